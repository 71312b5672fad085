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

from .conftest import REPO, run_suite

CONFORMANCE = REPO / "tests" / "data" / "conformance"
MASKBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "maskbench-sample"

#: The project's own suite: every schema compiles and every verdict is right.
CONFORMANCE_KNOWN_LIMITATIONS: dict[str, str] = {}

_FORMAT = "llguidance rejects a format it does not know (no lenient mode is passed)"
_NOT = "llguidance does not implement the 'not' keyword"
_DEPENDENCIES = "llguidance does not implement 'dependencies'"
_ONE_OF = "oneOf is refused unless coerce_one_of approximates it with anyOf"
_MIN_MAX_PROPERTIES = "min/maxProperties only when every listed property is required"

#: MaskBench sample (309 JSON files): observed with llguidance 1.9.1. All are
#: compile-time refusals; no compiled schema gave a wrong verdict.
MASKBENCH_KNOWN_LIMITATIONS: dict[str, str] = {
    "Github_easy---o12368.json": _FORMAT + " (country-code)",
    "Github_easy---o12387.json": _FORMAT + " (source-category)",
    "Github_easy---o55253.json": _FORMAT + " (only-a)",
    "Github_easy---o63378.json": _FORMAT + " (positiveInteger)",
    "Github_easy---o91584.json": _NOT,
    "Github_easy---o9351.json": _FORMAT + " (topic)",
    "Github_hard---o4249.json": _MIN_MAX_PROPERTIES,
    "Github_hard---o53084.json": _FORMAT + " (uri-reference)",
    "Github_hard---o58639.json": _DEPENDENCIES,
    "Github_hard---o73933.json": _MIN_MAX_PROPERTIES,
    "Github_hard---o74015.json": _FORMAT + " (expose)",
    "Github_hard---o8457.json": _MIN_MAX_PROPERTIES,
    "Github_medium---o38445.json": _FORMAT + " (uri-reference)",
    "Github_medium---o52959.json": _FORMAT + " (topic)",
    "Github_medium---o63323.json": _FORMAT + " (path)",
    "Github_medium---o67670.json": _FORMAT + " (path)",
    "Github_medium---o79482.json": _ONE_OF,
    "Github_medium---o90913.json": _ONE_OF,
    "Github_ultra---o69992.json": _FORMAT + " (idn-email)",
    "Glaiveai2K---calculate_area_3547f407.json": _ONE_OF,
    "Glaiveai2K---calculate_volume_82c6c066.json": _ONE_OF,
    "Handwritten---dep1.json": _DEPENDENCIES,
    "Handwritten---pNameFalse.json": _NOT,
    "Handwritten---pnmp10.json": _NOT,
    "JsonSchemaStore---github-workflow-template-properties.json": "llguidance does not implement 'uniqueItems'",
    "Kubernetes---kb_34_Normalized.json": _FORMAT + " (byte)",
    "Synthesized---draft2019_09_valid_maxProperties_id3_subschema1_not_2.json": _NOT,
    "Synthesized---draft2019_09_valid_not_id9_subschema1_not_2.json": _NOT,
    "Synthesized---draft2019_09_valid_patternProperties_id4_subschema1_not_2.json": _NOT,
    "WashingtonPost---wp_37_Normalized.json": _DEPENDENCIES,
}


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
