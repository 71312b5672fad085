"""Mask conformance: judge JSON instances by walking the token mask (MaskBench protocol).

For each suite file the schema is compiled whitespace-flexible (relaxed where
llguidance refuses it); each test instance is serialized with ``json.dumps``
(default separators), tokenized plainly, and walked token by token through the
mask of a fresh clone, then post-validated against the original schema. A
compile error or a wrong final verdict must have a cause listed as a known
limitation of the engine, and no invalid instance may pass both stages.
"""

from __future__ import annotations

from pathlib import Path

from fucina_jobs.eval.maskbench import KNOWN_LIMITATIONS
from fucina_jobs.eval.scoring import grammar_scores
from fucina_jobs.config import SHIPPED

from tests.helpers import run_suite

CONFORMANCE = SHIPPED / "jobs" / "conformance"
MASKBENCH = Path(__file__).resolve().parent / "data" / "maskbench"


def check(report: dict, label: str) -> dict:
    g = grammar_scores(report, KNOWN_LIMITATIONS)
    print(
        f"\n{label}: {g['files']} files, {g['compiled']} compiled ({g['relaxed']} relaxed); {g['instances']} instances; "
        f"wrong verdicts: grammar {g['stages']['grammar']}, final {g['stages']['final']}"
    )
    assert not g["unexplained"], f"causes no known limitation explains: {g['unexplained']}"
    assert g["stages"]["final"]["invalid_accepted"] == 0, g["wrong_verdicts"]["final"]
    return g


def test_conformance_suite(tokenizer):
    files = sorted(CONFORMANCE.glob("*.json"))
    assert len(files) == 51
    report = run_suite(files, tokenizer)
    assert report["valid"] and report["invalid"]
    g = check(report, "conformance")
    assert g["compiled"] == 51 and g["relaxed"] == 8 and g["stages"]["final"]["wrong"] == 0
    # Every relaxed schema's invalid instance the grammar let through was caught by post-validation.
    assert set(g["wrong_verdicts"]["grammar"]) == {"invalid accepted by the relaxed grammar"}


def test_maskbench_format_fixture(tokenizer):
    """Five schemas of our own in MaskBench's file format (tests/eval/data/maskbench): a function call, a CI
    config with $ref and anyOf, a record with a nullable total, unique tags, an e-mail format."""
    files = sorted(MASKBENCH.glob("*.json"))
    assert len(files) == 5
    g = check(run_suite(files, tokenizer), "maskbench-format fixture")
    assert g["compiled"] == 5 and g["relaxed"] == 1 and g["coverage"] == 1.0 and g["stages"]["final"]["wrong"] == 0
    # uniqueItems is relaxed away: the grammar lets the repeated tag through, post-validation rejects it.
    assert g["stages"]["grammar"] == {"wrong": 1, "valid_rejected": 0, "invalid_accepted": 1}
