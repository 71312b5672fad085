"""MaskBench protocol: judge JSON instances by walking a constraint's token mask.

Each suite file holds a ``schema``, ``tests`` (``{"valid", "data"}``) and
``meta.features``. The schema is compiled whitespace-flexible; each instance
is serialized with ``json.dumps`` (default separators), tokenized plainly and
walked token by token through the mask of a fresh clone. The verdict is
"accepted" iff every token was allowed and the stop token is allowed after
the last one. This lives in the package (not only in the tests) because
``eval.mode=grammar`` reports the same verdicts a test asserts on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from ..decoding.constraint import Constraint, GrammarError, tokenizer_bridge

_FORMAT = "llguidance rejects a format it does not know (no lenient mode is passed)"
_NOT = "llguidance does not implement the 'not' keyword"
_DEPENDENCIES = "llguidance does not implement 'dependencies'"
_ONE_OF = "oneOf is refused unless coerce_one_of approximates it with anyOf"
_MIN_MAX_PROPERTIES = "min/maxProperties only when every listed property is required"

#: Files of the shared MaskBench sample (309 files) whose schema llguidance 1.9.1
#: refuses to compile. No compiled schema there gave a wrong verdict. The
#: project's own suite (tests/data/conformance) has no known limitation.
KNOWN_LIMITATIONS: dict[str, str] = {
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


def suite_files(path: Path, limit: int | None = None) -> list[Path]:
    """The suite's ``*.json`` files in name order (the order of rows and verdicts)."""
    files = sorted(path.glob("*.json"))
    return files[:limit] if limit is not None else files


def load_suite(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def instance_accepted(
    base: Constraint, tokenizer: Any, data: Any, separators: tuple[str, str] | None = None, mask_s: list[float] | None = None
) -> bool:
    """MaskBench verdict for one instance; each mask's compute time is appended to ``mask_s``.

    MaskBench serializes with ``json.dumps``' default separators (", ", ": ") and
    a whitespace-flexible grammar; pass ``(",", ":")`` for a compact grammar."""
    text = json.dumps(data, indent=None, ensure_ascii=False, separators=separators)
    tokens = tokenizer.encode(text, add_special_tokens=False)
    matcher = base.clone()
    for token in [*tokens, None]:
        row = torch.zeros(base.vocab_size)
        start = time.perf_counter()
        matcher.process(row, [])
        if mask_s is not None:
            mask_s.append(time.perf_counter() - start)
        allowed = torch.isfinite(row)
        if token is None:
            return bool(allowed[base.stop_token])
        if not allowed[token]:
            return False
        matcher.commit(token)
    raise AssertionError("unreachable")


def run_suite(files: Sequence[Path], tokenizer: Any, stop_token: int | None = None) -> dict:
    """Compile each schema and judge each instance.

    Returns counts, ``compile_errors`` and the wrong verdicts per file
    (``valid_rejected``, ``invalid_accepted``: instance indices), plus what a
    report needs: each file's ``features``, ``compile_s``, every ``mask_s`` and
    one ``verdicts`` row per instance (or per file that did not compile).
    """
    report: dict[str, Any] = {
        "files": 0, "instances": 0, "valid": 0, "invalid": 0, "skipped": 0,
        "compile_errors": {}, "valid_rejected": {}, "invalid_accepted": {},
        "features": {}, "compile_s": {}, "mask_s": [], "verdicts": [],
    }
    # Build the tokenizer bridge once up front, so that compile times are the schemas' own.
    tokenizer_bridge(tokenizer, len(tokenizer), tokenizer.eos_token_id if stop_token is None else stop_token)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # masks are tiny tensor ops: intra-op threads only add barrier waits (ms per mask on busy cores)
    try:
        for path in files:
            _judge_file(path, tokenizer, stop_token, report)
    finally:
        torch.set_num_threads(threads)
    return report


def _judge_file(path: Path, tokenizer: Any, stop_token: int | None, report: dict[str, Any]) -> None:
    suite = load_suite(path)
    report["files"] += 1
    report["features"][path.name] = list((suite.get("meta") or {}).get("features", []))
    start = time.perf_counter()
    try:
        base = Constraint.json_schema(suite["schema"], tokenizer, whitespace_flexible=True, stop_token=stop_token)
    except GrammarError as err:
        report["compile_errors"][path.name] = str(err).splitlines()[0][:160]
        report["skipped"] += len(suite["tests"])
        report["verdicts"].append({"file": path.name, "instance": -1, "expected": None, "accepted": None, "compile_error": report["compile_errors"][path.name]})
        return
    report["compile_s"][path.name] = time.perf_counter() - start
    for i, test in enumerate(suite["tests"]):
        report["instances"] += 1
        report["valid" if test["valid"] else "invalid"] += 1
        verdict = instance_accepted(base, tokenizer, test["data"], mask_s=report["mask_s"])
        report["verdicts"].append({"file": path.name, "instance": i, "expected": bool(test["valid"]), "accepted": verdict, "compile_error": None})
        if verdict != test["valid"]:
            key = "valid_rejected" if test["valid"] else "invalid_accepted"
            report[key].setdefault(path.name, []).append(i)
