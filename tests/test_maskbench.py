"""Mask conformance: judge JSON instances by walking the token mask (MaskBench protocol).

For each suite file the schema is compiled whitespace-flexible; each test
instance is serialized with ``json.dumps`` (default separators), tokenized
plainly, and walked token by token through the mask of a fresh clone. The
verdict is "accepted" iff every token was allowed and the stop token is
allowed afterwards. A verdict that disagrees with the label, or a schema that
does not compile, must be listed as a known limitation of the engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fucina_jobs.eval.maskbench import KNOWN_LIMITATIONS

from .conftest import REPO, run_suite

CONFORMANCE = REPO / "tests" / "data" / "conformance"
MASKBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "maskbench-sample"

#: The project's own suite: every schema compiles and every verdict is right.
CONFORMANCE_KNOWN_LIMITATIONS: dict[str, str] = {}

#: MaskBench sample (309 JSON files): observed with llguidance 1.9.1. All are
#: compile-time refusals; no compiled schema gave a wrong verdict.
MASKBENCH_KNOWN_LIMITATIONS: dict[str, str] = KNOWN_LIMITATIONS


def check(report: dict, known: dict[str, str], label: str) -> None:
    wrong = {**report["compile_errors"], **report["valid_rejected"], **report["invalid_accepted"]}
    print(
        f"\n{label}: {report['files']} files, {len(report['compile_errors'])} compile errors "
        f"({report['skipped']} instances skipped); {report['instances']} instances judged "
        f"({report['valid']} valid, {report['invalid']} invalid): "
        f"{sum(map(len, report['valid_rejected'].values()))} valid rejected, "
        f"{sum(map(len, report['invalid_accepted'].values()))} invalid accepted"
    )
    unexpected = {name: why for name, why in wrong.items() if name not in known}
    assert not unexpected, f"new wrong verdicts or compile errors: {unexpected}"
    stale = sorted(set(known) - set(wrong))
    assert not stale, f"known limitations that now pass (remove them): {stale}"


def test_conformance_suite(tokenizer):
    files = sorted(CONFORMANCE.glob("*.json"))
    assert len(files) == 43
    report = run_suite(files, tokenizer)
    assert report["valid"] and report["invalid"]
    check(report, CONFORMANCE_KNOWN_LIMITATIONS, "conformance")


@pytest.mark.slow  # about 20 s
@pytest.mark.skipif(not MASKBENCH.is_dir(), reason=f"no MaskBench sample at {MASKBENCH}")
def test_maskbench_sample(tokenizer):
    files = sorted(MASKBENCH.glob("*.json"))
    assert files
    check(run_suite(files, tokenizer), MASKBENCH_KNOWN_LIMITATIONS, "maskbench-sample")
