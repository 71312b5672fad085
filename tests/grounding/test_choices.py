"""Which grounded fields a decoder may choose by likelihood, and the options it weighs."""

from fucina_jobs.grounding.choices import grounded_choices


def options(choices):
    """Each choice's values with the text after them, by the text before them."""
    return {after: tuple(v + follow for v in values) for after, values, follow in choices}


RECEIPT = {
    "type": "object",
    "properties": {
        "company": {"type": "string", "maxLength": 40, "x-grounded": {"span": "lines"}},
        "note": {"type": "string", "x-grounded": True},
        "date": {"type": "string", "format": "date", "x-grounded": True},
        "currency": {"enum": ["MYR", "USD", None], "x-grounded": {"spellings": {"MYR": ["RM"]}}},
        "total": {"type": "number", "x-grounded": {"amount": True}},
    },
    "required": ["company", "note", "date", "currency", "total"],
}
TEXT = "KEDAI MURNI\nSDN BHD\nDATE: 03/02/2018\nTOTAL RM 25.75\nCASH 30.00"


def test_numbers_dates_members_and_line_runs_are_choices_with_the_text_that_follows_them():
    choices = options(grounded_choices(RECEIPT, TEXT))
    assert list(choices) == ['"company":', '"date":', '"currency":', '"total":']  # a run of words is not a short list
    assert choices['"company":'][:4] == (
        '"KEDAI MURNI","note',
        '"KEDAI MURNI SDN BHD","note',
        '"KEDAI MURNI SDN BHD DATE: 03/02/2018","note',
        '"SDN BHD","note',
    )  # runs of whole lines up to maxLength
    assert all(len(o) <= 40 + len('"",note') for o in choices['"company":'])
    assert choices['"date":'] == ('"2018-02-03","currency', '"2018-03-02","currency')  # both readings of 03/02/2018
    assert choices['"currency":'] == ('"MYR","total', 'null,"total')  # the written member, and null
    assert choices['"total":'] == ("30}", "25.75}")


def test_fields_after_a_nested_one_are_left_to_the_decoder_and_an_optional_next_key_leaves_numbers_out():
    schema = {
        "type": "object",
        "properties": {
            "date": {"type": "string", "format": "date", "x-grounded": True},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"total": {"type": "number", "x-grounded": True}}}},
            "total": {"type": "number", "x-grounded": True},
        },
        "required": ["date", "lines", "total"],
    }
    assert [a for a, *_ in grounded_choices(schema, TEXT)] == ['"date":']
    optional = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": True}, "tax": {"type": "number"}}}
    assert grounded_choices(optional, TEXT) == []  # where 30 ends would go unscored


def test_a_single_value_is_no_choice():
    schema = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": True}}, "required": ["total"]}
    assert grounded_choices(schema, "TOTAL 9.00") == []


def test_every_line_run_of_a_long_receipt_is_in_its_grammar_and_the_lexer_holds(tokenizer):
    """Validating hundreds of options, then writing one, once exhausted llguidance's lexer ("too many expressions constructed")
    when runs of lines also counted their characters."""

    from fucina_jobs.decoding.constraint import Constraint
    from fucina_jobs.grounding.grammar import grounded_lark

    from tests.helpers import STOP

    lines = (
        ["TAN SDN BHD", "(123456-X)"] + [f"NO. {k}, JALAN MAWAR {k}/{k + 1}, TAMAN BUKIT {k}," for k in range(30)] + ["TOTAL RM 9.00", "THANK YOU !"]
    )
    text = "\n".join(lines)
    schema = {
        "type": "object",
        "properties": {"address": {"type": "string", "maxLength": 240, "x-grounded": {"span": "lines"}}},
        "required": ["address"],
    }
    grammar = Constraint.lark(grounded_lark(schema, text), tokenizer, stop_token=STOP)
    [(after, texts)] = options(grounded_choices(schema, text)).items()
    encode = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    for token in encode("{" + after):
        grammar.commit(token)
    valid = [o for o in texts if grammar.valid_prefix_len(encode(o)) == len(encode(o))]
    assert set(texts) - set(valid) == {o for o in texts if o.endswith(' !"}')}  # a run ending in a lone mark is no value
    for token in encode(valid[-1]):
        grammar.commit(token)
    assert not grammar.is_error and grammar.is_complete


def test_labels_and_includes_narrow_the_options_as_they_narrow_the_grammar():
    schema = {
        "type": "object",
        "properties": {
            "address": {"type": "string", "x-grounded": {"span": "lines", "includes": "[0-9]{5}"}},
            "total": {"type": "number", "x-grounded": {"amount": True, "labels": ["total"]}},
        },
        "required": ["address", "total"],
    }
    text = "KEDAI MURNI\nNO. 3, JALAN MAWAR,\n81100 JOHOR BAHRU\nCASH 30.00\nTOTAL RM 25.75"
    choices = options(grounded_choices(schema, text))
    assert all("81100" in option for option in choices['"address":']) and '"81100 JOHOR BAHRU","total' in choices['"address":']
    assert '"total":' not in choices  # one labelled amount: no choice left
    schema["properties"]["address"]["x-grounded"]["first_lines"] = 2  # a run from the top that reaches the postcode
    assert options(grounded_choices(schema, text))['"address":'] == (
        '"KEDAI MURNI NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU","total',
        '"KEDAI MURNI NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU CASH 30.00","total',
        '"KEDAI MURNI NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU CASH 30.00 TOTAL RM 25.75","total',
        '"NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU","total',
        '"NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU CASH 30.00","total',
        '"NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU CASH 30.00 TOTAL RM 25.75","total',
    )


def test_ends_on_and_cut_before_narrow_the_options_as_they_narrow_the_grammar():
    grounded = {"span": "lines", "ends_on": "BHD", "first_lines": 2, "cut_before": r"\([0-9]{5,}-[A-Z]\)"}
    schema = {"type": "object", "properties": {"company": {"type": "string", "x-grounded": grounded}}, "required": ["company"]}
    text = "KEDAI MURNI\nMURNI SDN BHD (126926-H)\nNO. 3, JALAN MAWAR\nSDN BHD"
    assert options(grounded_choices(schema, text))['"company":'] == ('"KEDAI MURNI MURNI SDN BHD"}', '"MURNI SDN BHD"}')
