"""A grounded grammar over a long real document compiles: its lexer gets the fuel llguidance's default lacks.

Optional: it reads one NDA of ``../shared/data/nda-train`` (skipped where that folder is absent); no synthetic text
found so far needs more than the default fuel, the repetitive prose of real contracts does."""

import json
from pathlib import Path

import llguidance
import pytest

from fucina_jobs.decoding.constraint import Constraint, tokenizer_bridge
from fucina_jobs.grounding.grammar import grounded_lark
from tests.helpers import STOP

NDA = Path(__file__).resolve().parents[3] / "shared/data/nda-train/inputs.jsonl"
ROW = "d50b5f4cf1b059aed9adb4d3d8953d84"  # 17,200 characters; its matcher failed at the default fuel
SCHEMA = {
    "type": "object",
    "properties": {
        "party": {
            "type": "array",
            "items": {"type": "string", "maxLength": 120, "x-grounded": {"case": "insensitive", "labels": ["and between"], "most_words": 6}},
        },
        "effective_date": {"type": ["string", "null"], "format": "date", "x-grounded": {"labels": ["as of"]}},
        "jurisdiction": {"type": ["string", "null"], "maxLength": 60, "x-grounded": {"labels": ["laws of the state of"], "most_words": 2}},
        "term": {"type": ["string", "null"], "x-grounded": {"units": ["day", "month", "year"], "labels": ["period of"], "only_labelled": True}},
    },
    "required": ["party", "effective_date", "jurisdiction", "term"],
    "additionalProperties": False,
}


@pytest.mark.skipif(not NDA.exists(), reason="../shared/data/nda-train is absent")
def test_a_long_contracts_grounded_grammar_compiles_and_masks(tokenizer):
    text = next(json.loads(line)["text"] for line in NDA.open(encoding="utf-8") if ROW in line)
    lark = grounded_lark(SCHEMA, text)
    default = llguidance.LLMatcher(tokenizer_bridge(tokenizer, len(tokenizer), STOP), llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
    assert default.is_error() and "lexer precomputation failed" in default.get_error()  # what the fuel is for
    constraint = Constraint.lark(lark, tokenizer, stop_token=STOP)
    for token in tokenizer.encode('{"party":[],"effective_date":null,"jurisdiction":"', add_special_tokens=False):
        assert constraint.allows(token), tokenizer.decode([token])
        constraint.commit(token)
    assert constraint.error() is None and constraint.allows(tokenizer.encode("Delaware", add_special_tokens=False)[0])
