"""``x-grounded.shape``: the candidates that do not look like the field's gold go, softly; a value that slips
through is named by ``misfits``."""

import json

import pytest

from fucina_jobs.confidence import MISFIT_CONFIDENCE, capped, confidence, leaves
from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.grounding.candidates import candidates, words
from fucina_jobs.grounding.declaration import GroundingError, grounded_fields
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.grounding.shape import misfits

from tests.helpers import STOP, instance_accepted

NAME_SHAPE = {"letter": True, "least_chars": 3, "not_only": ["to", "them", "a", "of"]}
TEXT = "Payment of 12000 to THEM | Bill to: Acme Tools\nIncome 1 and 4,500.00 Jo"


def field(kind: str, options: dict) -> object:
    node = {"type": kind, "x-grounded": options}
    return grounded_fields({"type": "object", "properties": {"f": node}})[0]


def test_a_word_s_candidates_lose_function_words_marks_and_short_words():
    g = field("string", {"span": "word", "shape": NAME_SHAPE})
    kept = words(g, TEXT)
    assert {"of", "to", "THEM", "1", "Jo", "12000"}.isdisjoint(kept)
    assert {"Payment", "Acme", "Tools", "Income"} <= set(kept)
    assert {"of", "to", "THEM", "Jo"} <= set(words(g.without("shape"), TEXT))


def test_a_number_s_candidates_keep_its_magnitude():
    g = field("number", {"shape": {"magnitude": [100, 100000]}})
    assert candidates(g, TEXT) == ["4500", "12000"]
    assert "1" in candidates(g.without("shape"), TEXT)


def test_the_filter_never_leaves_a_field_less_than_the_text_gives():
    word = field("string", {"span": "word", "shape": NAME_SHAPE})
    number = field("number", {"shape": {"magnitude": [100, 100000]}})
    text = "to them | 1 of 7"  # no word that looks like a name, no number of its magnitude
    assert words(word, text) == words(word.without("shape"), text) == ["to", "them", "|", "1", "of", "7"]
    assert candidates(number, text) == candidates(number.without("shape"), text) == ["1", "7"]


def test_shape_takes_a_labelled_run_that_does_not_look_like_the_field_s_away(tokenizer):
    options = {"labels": ["to"], "shape": NAME_SHAPE}
    schema = {"type": "object", "properties": {"f": {"type": "string", "maxLength": 40, "x-grounded": options}}, "required": ["f"]}
    text = "Sent to them by post.\nBill to Acme Tools Ltd"
    constraint = lambda: Constraint.lark(grounded_lark(schema, text), tokenizer, stop_token=STOP)  # noqa: E731
    assert instance_accepted(constraint(), tokenizer, {"f": "Acme Tools"}, separators=(",", ":"))
    assert not instance_accepted(constraint(), tokenizer, {"f": "them"}, separators=(",", ":"))
    schema["properties"]["f"]["x-grounded"] = {"labels": ["to"]}
    assert instance_accepted(constraint(), tokenizer, {"f": "them"}, separators=(",", ":"))


def test_misfits_name_the_values_that_slipped_through_by_their_confidence_path():
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "x-grounded": {"shape": NAME_SHAPE}},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"n": {"type": "number", "x-grounded": {"shape": {"magnitude": [10, 99]}}}}},
            },
        },
    }
    record = {"name": "TO", "items": [{"n": 50}, {"n": 1}]}
    assert misfits(grounded_fields(schema), record) == ["name", "items[1].n"]
    assert misfits(grounded_fields(schema), {"name": "Acme", "items": [{"n": None}]}) == []


@pytest.mark.parametrize("shape", [{"letter": False}, {"least_chars": 0}, {"not_only": ["two words"]}, {"magnitude": [5, 1]}, {"size": 3}])
def test_a_malformed_shape_is_refused_with_what_it_must_be(shape):
    with pytest.raises(GroundingError, match="x-grounded.shape must be an object of letter"):
        field("string", {"shape": shape})


def test_a_value_that_slipped_through_is_the_least_certain_of_its_record():
    schema = {"type": "object", "properties": {"name": {"type": "string", "x-grounded": {"shape": NAME_SHAPE}}, "n": {"type": "number"}}}
    text = '{"name":"TO","n":7}'
    spans = [(i, i + 1) for i in range(len(text))]
    probs = [0.97] * len(text)
    probs[text.index("7")] = 0.4  # the model was unsure of n, sure of the name
    sure = confidence(text, spans, probs, leaves(text))
    assert min(sure.field_mean, key=sure.field_mean.get) == "n"
    shown = capped(sure, misfits(grounded_fields(schema), json.loads(text)))
    assert min(shown.field_mean, key=shown.field_mean.get) == "name"
    assert shown.record == shown.field_mean["name"] == MISFIT_CONFIDENCE and shown.field_mean["n"] == sure.field_mean["n"]
    assert capped(sure, misfits(grounded_fields(schema), {"name": "Acme", "n": 7})) == sure
