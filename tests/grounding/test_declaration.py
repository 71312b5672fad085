"""The ``x-grounded`` keyword: where it may sit, its options, and one-line errors that name the property."""

import json

import jsonschema
import llguidance
import llguidance.hf
import pytest

from fucina_jobs.grounding.declaration import GroundingError, grounded_fields
from fucina_jobs.grounding.grammar import field_values, grounded_lark
from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO

INVOICE = json.loads((SHIPPED / "schemas/invoice.json").read_text())


def test_the_invoice_schema_grounds_its_document_fields():
    fields = {g.name: (g.kind, g.allow) for g in grounded_fields(INVOICE)}
    assert fields == {
        "invoice_number": ("string", ()),
        "invoice_date": ("date", ()),
        "due_date": ("date", ()),
        "vendor": ("string", ()),
        "customer": ("string", ()),
        "currency": ("enum", ()),
        "subtotal": ("number", ()),
        "tax": ("number", (0,)),
        "total": ("number", ()),
    }
    assert all(g.amount for g in grounded_fields(INVOICE) if g.kind == "number")


def test_nested_objects_and_array_items_are_found():
    schema = {
        "type": "object",
        "properties": {
            "party": {"type": "object", "properties": {"name": {"type": "string", "x-grounded": {"case": "insensitive"}}}},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"amount": {"type": ["number", "null"], "x-grounded": True}}}},
            "note": {"type": "string", "x-grounded": False},
        },
    }
    fields = grounded_fields(schema)
    assert [(g.name, g.kind, g.case, g.nullable) for g in fields] == [
        ("party.name", "string", "insensitive", False),
        ("lines[].amount", "number", "exact", True),
    ]


@pytest.mark.parametrize(
    "prop, message",
    [
        ({"type": "boolean", "x-grounded": True}, "properties/x: x-grounded applies to string, number, integer, date or enum properties"),
        ({"const": "a", "x-grounded": True}, "properties/x: x-grounded on a const"),
        ({"enum": ["a", 1], "x-grounded": True}, "properties/x: x-grounded on an enum needs string members"),
        (
            {"enum": ["a"], "x-grounded": {"spellings": {"b": ["B"]}}},
            "x-grounded.spellings must be an object of enum members to lists of non-empty strings",
        ),
        ({"enum": ["a"], "x-grounded": {"allow": ["b"]}}, 'x-grounded.allow must be a list of members of the enum; not ["b"]'),
        (
            {"type": "string", "x-grounded": {"amount": True}},
            "x-grounded.amount must be true or false, on number or integer properties only; not true on a string",
        ),
        ({"type": "string", "x-grounded": "yes"}, "properties/x: x-grounded must be true or an object"),
        ({"type": "string", "x-grounded": {"cases": "insensitive"}}, "unknown option(s) ['cases']"),
        (
            {"type": "string", "x-grounded": {"whitespace": "squash"}},
            'x-grounded.whitespace must be one of normalize, exact, on string properties only; not "squash"',
        ),
        ({"type": "number", "x-grounded": {"allow": ["zero"]}}, "x-grounded.allow must be a list of number values"),
        ({"type": "string", "format": "date", "x-grounded": {"allow": ["03/04/2025"]}}, "list of date values"),
        ({"anyOf": [{"type": "string", "x-grounded": True}]}, "properties/x/anyOf/0: x-grounded only applies under properties or array items"),
        (
            {"enum": ["a"], "x-grounded": {"labels": ["total"]}},
            "x-grounded.labels must be a list of non-empty strings, or an object of them to a weight",
        ),
        ({"type": "string", "x-grounded": {"span": "lines", "labels": ["to"]}}, 'not ["to"] on a string of span: lines'),
        ({"type": "number", "x-grounded": {"labels": "total"}}, "x-grounded.labels must be a list of non-empty strings"),
        ({"type": "string", "x-grounded": {"includes": "[0-9]"}}, 'on a string of span: word or lines only; not "[0-9]" on a string of span: words'),
        ({"type": "string", "x-grounded": {"span": "lines", "includes": "[0-9"}}, "x-grounded.includes must be a regex"),
        ({"type": "string", "x-grounded": {"includes": "(?<![0-9])[0-9]{5}"}}, "x-grounded.includes must be a regex"),
        ({"type": "string", "x-grounded": {"includes": "^[0-9]{5}$"}}, "x-grounded.includes must be a regex"),
        (
            {"type": "string", "x-grounded": {"span": "word", "lines": {"first": 3}}},
            'x-grounded.lines must be an object of first, starts_on, ends_on, shortest, cut_before, to_block_end, within_line (e.g. {"first": 3, '
            '"cut_before": "TEL|FAX"}), on a string of span: words or lines only; not {"first": 3} on a string of span: word',
        ),
        ({"type": "string", "x-grounded": {"span": "lines", "lines": {"first": 0}}}, "x-grounded.lines.first must be a whole number"),
        (
            {"type": "string", "x-grounded": {"span": "lines", "lines": {"firsts": 2}}},
            "x-grounded.lines has unknown option(s) ['firsts']; known: first,",
        ),
        ({"type": "string", "x-grounded": {"span": "lines", "lines": 2}}, "x-grounded.lines must be an object of first,"),
        (
            {"type": "string", "x-grounded": {"lines": {"ends_on": "BHD"}}},
            "x-grounded.lines.ends_on must be a regex without look-arounds or anchors (e.g. SDN|BHD), on a string of span: words or lines only, "
            'with labels or lines.first on a string of span: words; not "BHD" without labels or lines.first',
        ),
        ({"type": "string", "x-grounded": {"span": "word", "lines": {"ends_on": "BHD"}}}, "x-grounded.lines must be an object"),
        ({"type": "string", "x-grounded": {"span": "lines", "lines": {"cut_before": "(?=TEL)"}}}, "x-grounded.lines.cut_before must be a regex"),
        (
            {"type": "number", "x-grounded": {"lines": {"cut_before": "TEL"}}},
            'on a string of span: words or lines only; not {"cut_before": "TEL"} on a number property',
        ),
        (
            {"type": "string", "x-grounded": {"pick": "largest"}},
            "x-grounded.pick must be one of largest, smallest, on number, integer or date properties only",
        ),
        (
            {"type": "number", "x-grounded": {"pick": "biggest"}},
            'x-grounded.pick must be one of largest, smallest, on number, integer or date properties only; not "biggest"',
        ),
        (
            {"type": "string", "x-grounded": {"span": "lines", "lines": {"shortest": True}}},
            "x-grounded.lines.shortest must be true or false, on a string of span: lines only, with lines.ends_on; not true without lines.ends_on",
        ),
        (
            {"type": "string", "x-grounded": {"lines": {"to_block_end": True}}},
            "x-grounded.lines.to_block_end must be true or false, on a string of span: lines only",
        ),
        ({"type": "string", "x-grounded": {"span": "lines", "lines": {"to_block_end": 1}}}, "x-grounded.lines.to_block_end must be true or false"),
        (
            {"type": "string", "x-grounded": {"lines": {"starts_on": "[0-9]"}}},
            "x-grounded.lines.starts_on must be a regex without look-arounds or anchors (e.g. [^\\W_]*[0-9][^\\W_]*), on a string of span: lines only",
        ),
        ({"type": "string", "x-grounded": {"span": "lines", "lines": {"starts_on": "^[0-9]"}}}, "x-grounded.lines.starts_on must be a regex"),
        (
            {"type": "string", "x-grounded": {"labels": {"net total": 2}}},
            "x-grounded.labels must be a list of non-empty strings, or an object of them to a weight, 1 or 2 (2 on number, integer or date properties)",
        ),
        ({"type": "number", "x-grounded": {"labels": {"net total": 3}}}, 'not {"net total": 3}'),
        ({"type": "number", "x-grounded": {"labels": {" ": 2}}}, "x-grounded.labels must be a list of non-empty strings"),
        ({"type": "number", "x-grounded": {"largest": "yes"}}, 'x-grounded.largest must be true or false; write pick: "largest" instead'),
        ({"type": "number", "x-grounded": {"labels": ["net"], "prefer_labels": ["net"]}}, "names ['net'] in both labels and prefer_labels"),
        ({"type": "string", "x-grounded": {"first_lines": 2, "lines": {"first": 3}}}, "writes ['first'] both inside lines and out"),
        (
            {"type": "string", "x-grounded": {"day_first": True}},
            "x-grounded.day_first must be true or false, on date properties only; not true on a string",
        ),
        ({"type": "string", "x-grounded": {"prefer_members": True}}, "x-grounded.prefer_members must be true or false, on enum properties only"),
        (
            {"type": "integer", "x-grounded": {"rounding": 5}},
            "x-grounded.rounding must be a positive number (e.g. 0.05), on number properties only; not 5 on an integer property",
        ),
        ({"type": "number", "x-grounded": {"rounding": 0}}, "x-grounded.rounding must be a positive number"),
        ({"type": "number", "x-grounded": {"rounding": True}}, "x-grounded.rounding must be a positive number"),
        ({"type": "number", "x-grounded": {"units": ["year"]}}, "x-grounded.units must be a list of non-empty strings"),
        ({"type": "string", "x-grounded": {"units": "year"}}, "x-grounded.units must be a list of non-empty strings"),
        (
            {"type": "number", "x-grounded": {"labels": ["a"], "only_labelled": True}},
            "x-grounded.only_labelled must be true or false, on number, integer or date properties or a string of span: words or word only, on a property that may be null; not true on a property that may not be null",
        ),
        ({"type": "string", "x-grounded": {"most_words": 0}}, "x-grounded.most_words must be a whole number of words"),
        ({"type": "string", "x-grounded": {"span": "word", "most_words": 2}}, "on a string of span: words"),
        ({"type": "string", "x-grounded": {"drop_marks": ",a"}}, "drop_marks must be a string of punctuation marks"),
        ({"type": "number", "x-grounded": {"drop_marks": ","}}, "on string properties only"),
        (
            {"type": "number", "x-grounded": {"whitespace": "exact"}},
            'x-grounded.whitespace must be one of normalize, exact, on string properties only; not "exact" on a number',
        ),
        (
            {"type": "number", "x-grounded": {"case": "upper"}},
            'x-grounded.case must be one of exact, upper, lower, title, insensitive, on enum or string properties only; not "upper" on a number',
        ),
        (
            {"type": "number", "x-grounded": {"labels": ["total"], "lines": {"first": 2}}},
            "x-grounded.lines must be an object of first,",
        ),
        (
            {"type": "string", "x-grounded": {"labels": ["from"], "lines": {"ends_on": "LTD", "shortest": True}}},
            "not true on a string of span: words",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "x-grounded": True},
            "x-grounded on an array must be an object of options (items, every), not True",
        ),
        ({"type": "array", "items": {"type": "string"}, "x-grounded": {"every": True}}, "x-grounded.items must be one of paragraph, line; not given"),
        ({"type": "array", "x-grounded": {"items": "line", "every": "yes"}}, 'x-grounded.every must be true or false; not "yes"'),
        ({"type": "array", "x-grounded": {"items": "line", "each": True}}, "x-grounded has unknown option(s) ['each']; known: items, every"),
        ({"type": "number", "x-grounded": {"amount": 0}}, "x-grounded.amount must be true or false, on number or integer properties only; not 0"),
    ],
)
def test_bad_declarations_name_the_property(prop, message):
    with pytest.raises(GroundingError, match=None) as err:
        grounded_fields({"type": "object", "properties": {"x": prop}})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_declaration_fails_the_job_before_any_model_loads(tmp_path):
    schema = tmp_path / "bad.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean", "x-grounded": True}}}))
    cfg = validate(
        {"constraint": {"json_schema": str(schema)}, "dataset": {"path": "jobs/invoices/inputs.jsonl"}, "output": {"dir": str(tmp_path / "out")}}
    )
    with pytest.raises(ConfigError, match=r"constraint.json_schema: .*bad.json: properties/ok: x-grounded applies to"):
        Job(cfg, REPO)


def test_validators_and_llguidance_ignore_the_keyword(tokenizer):
    record = {
        "invoice_number": "A-1",
        "invoice_date": "2025-01-02",
        "due_date": "2025-01-03",
        "vendor": "V",
        "customer": "C",
        "currency": "EUR",
        "subtotal": 1,
        "tax": 0,
        "total": 1,
    }
    jsonschema.Draft202012Validator(INVOICE, format_checker=jsonschema.FormatChecker()).validate(record)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(INVOICE, defaults={"whitespace_flexible": False})
    bridge = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer), eos_token=2)
    assert llguidance.LLMatcher.validate_grammar(grammar, bridge) == ""


def test_the_invoice_currency_is_a_code_the_text_writes_or_null():
    """Real invoices are billed in many currencies, and some name none: the grammar offers the codes the text
    writes, by code or symbol, and null, so that no such invoice is rejected before it is decoded."""
    currency = {g.name: g for g in grounded_fields(INVOICE)}["currency"]
    assert currency.nullable
    assert field_values(currency, "Należność ogółem: 316,83 PLN") == ["PLN"]
    assert field_values(currency, "Grand Total: ₹ 4,720.00") == ["INR"]
    assert field_values(currency, "Total due: $ 572.34") == ["USD"]
    assert field_values(currency, "Total due: 572.34") == []
    grounded_lark(INVOICE, "Invoice 7\nDate: 2025-01-02\nACME Ltd\nTotal due: 572.34")  # no NothingToGround


def test_a_member_written_itself_outranks_one_shown_by_a_spelling_only():
    """Other dollars write ``$`` too: with ``prefer_members``, a code beside the amounts says which."""
    currency = {g.name: g for g in grounded_fields(INVOICE)}["currency"]
    assert currency.prefer_members
    assert field_values(currency, "Total  $2,169.60 CAD") == ["CAD"]
    assert field_values(currency, "Total (AUD)  $756.14") == ["AUD"]
    assert field_values(currency, "Total  $756.14") == ["USD"]
    plain = {
        g.name: g
        for g in grounded_fields(
            {**INVOICE, "properties": {"currency": {**INVOICE["properties"]["currency"], "x-grounded": {"spellings": {"USD": ["$"]}}}}}
        )
    }
    assert field_values(plain["currency"], "Total  $2,169.60 CAD") == ["USD", "CAD"]


def test_a_label_inside_another_fields_longer_label_is_theirs():
    """``Date`` labels the issue date, but not inside ``Due Date``, the due date's own label; the longest label
    written at a place is the one read there, whichever field it belongs to."""
    schema = {
        "type": "object",
        "properties": {
            "issued": {"type": "string", "format": "date", "x-grounded": {"labels": ["date", "invoice date"]}},
            "due": {"type": "string", "format": "date", "x-grounded": {"labels": ["due date"]}},
            "number": {"type": "string", "x-grounded": {"span": "word", "labels": ["invoice"]}},
        },
    }
    fields = {g.name: g for g in grounded_fields(schema)}
    text = "Invoice QL-7\nInvoice Date: November 3, 2025\nDue Date: December 3, 2025"
    assert fields["issued"].rivals == ("due date", "invoice")
    assert field_values(fields["issued"], text) == ["2025-11-03"]
    assert field_values(fields["due"], text) == ["2025-12-03"]
    lark = grounded_lark(schema, text)
    assert '"\\"QL-7\\""' in lark and '"\\"Date\\""' not in lark  # the word after Invoice, not Invoice Date's


def test_the_invoice_amounts_read_vat_inclusive_and_exclusive_totals():
    """``Total incl. VAT`` is the total's label, so its ``VAT`` labels no tax, and ``Total excl. VAT`` the subtotal's."""
    labels = {"subtotal": ["total excl. vat"], "tax": ["vat"], "total": ["total incl. vat"]}
    amounts = {f: {"type": "number", "x-grounded": {"amount": True, "labels": labels[f], **({"allow": [0]} if f == "tax" else {})}} for f in labels}
    fields = {g.name: g for g in grounded_fields({"type": "object", "properties": amounts})}
    text = "Total excl. VAT   £100.00\nVAT 20%   £20.00\nTotal incl. VAT   £120.00"
    assert [field_values(fields[f], text) for f in ("subtotal", "tax", "total")] == [[100], [0, 20], [120]]  # a tax may be 0


OLD_AND_NEW = [
    (
        {"span": "lines", "first_lines": 3, "cut_before": "TEL", "ends_on": "BHD", "shortest": True},
        {"span": "lines", "lines": {"first": 3, "cut_before": "TEL", "ends_on": "BHD", "shortest": True}},
    ),
    ({"labels": ["from"], "within_line": True, "most_words": 4}, {"labels": ["from"], "lines": {"within_line": True}, "most_words": 4}),
    ({"span": "lines", "starts_on": "[0-9]+", "to_block_end": True}, {"span": "lines", "lines": {"starts_on": "[0-9]+", "to_block_end": True}}),
]


@pytest.mark.parametrize("old, new", OLD_AND_NEW)
def test_an_old_spelling_reads_as_the_new_one_with_one_note_per_schema(old, new, caplog):
    name = "_".join(old)  # a schema of its own: the note is logged once a process for each

    def field(options):
        return grounded_fields({"type": "object", "properties": {name: {"type": "string", "x-grounded": options}}})[0]

    with caplog.at_level("WARNING"):
        assert field(old) == field(new) and field(old).lines.first == new.get("lines", {}).get("first")
    notes = [r.message for r in caplog.records if "old x-grounded spellings" in r.message]
    assert len(notes) == 1 and all(f"lines.{key}" in notes[0] for key in new["lines"])  # one line, naming each new spelling


def test_old_largest_smallest_and_prefer_labels_read_as_pick_and_weighted_labels():
    def field(options):
        return grounded_fields({"type": "object", "properties": {"x": {"type": "number", "x-grounded": options}}})[0]

    old = field({"labels": ["total"], "prefer_labels": ["rounded"], "largest": True})
    assert old == field({"labels": {"total": 1, "rounded": 2}, "pick": "largest"})
    assert (old.labels, old.preferred_labels, old.pick) == (("total",), ("rounded",), "largest")
    assert (
        field({"smallest": True}).pick == "smallest" and field({"largest": True, "smallest": True}).pick == "largest"
    )  # as the old grammar read both
