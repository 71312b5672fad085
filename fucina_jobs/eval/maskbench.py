"""MaskBench protocol: judge JSON instances by walking a constraint's token mask, then post-validate.

Each suite file holds a ``schema``, ``tests`` (``{"valid", "data"}``) and
``meta.features``. The schema is compiled whitespace-flexible, relaxed where
llguidance refuses it (``compile_json_schema``, unless ``relax=False``); each
instance is serialized with ``json.dumps`` (default separators), tokenized
plainly and walked token by token through the mask of a fresh clone.

Two verdicts per instance, as a job sees its outputs: the *grammar* verdict
("accepted" iff every token was allowed and the stop token is allowed after
the last one) and the *final* verdict, which also needs the instance to pass
the original schema (``data.sink.schema_failure``, the check every record
goes through). A relaxed grammar accepts more than the schema allows; the
final verdict is where those instances must be rejected. This lives in the
package (not only in the tests) because ``eval.mode=grammar`` reports the
same verdicts a test asserts on.
"""

from __future__ import annotations

import json
import re
import time
from array import array
from pathlib import Path
from typing import Any, MutableSequence, Sequence

from ..engines import Constraint, GrammarError, compile_json_schema, tokenizer_bridge
from ..data import json_validator, schema_failure

#: Wrong-verdict causes (``verdict_cause``), by stage.
PROPERTY_ORDER = "property order"
VALID_REJECTED = "valid rejected by the grammar"
INVALID_ACCEPTED = "invalid accepted by the grammar"
INVALID_ACCEPTED_RELAXED = "invalid accepted by the relaxed grammar"
INVALID_PASSES = "invalid passes post-validation"
POST_REJECTED = "valid rejected by post-validation"
UNCHECKABLE = "schema cannot be checked"
#: Keywords llguidance does not implement; relaxation drops them.
UNIMPLEMENTED_KEYWORDS = (
    "not",
    "dependencies",
    "uniqueItems",
    "if/then/else",
    "propertyNames",
    "contains",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minContains",
    "maxContains",
)

#: Causes of failure (``relaxation.cause`` for compile errors, ``verdict_cause``
#: for wrong verdicts) that are the grammar engine's, not ours. Keyed by cause,
#: not by file, so they hold for any suite. With ``constraint.relax=auto`` the
#: relaxable causes compile; with ``off`` they are refused, as llguidance does.
KNOWN_LIMITATIONS: dict[str, str] = {
    **{k: f"llguidance does not implement {k!r} (relaxed: dropped)" for k in UNIMPLEMENTED_KEYWORDS},
    "format": "llguidance refuses formats it does not know (relaxed: a plain string)",
    "oneOf": "llguidance refuses oneOf it cannot prove disjoint (relaxed: anyOf, coerce_one_of)",
    "min/maxProperties": "llguidance bounds property counts only when every listed property is required (relaxed: dropped)",
    "regex": "llguidance's regex engine has no look-around or back-references (relaxed: the pattern dropped)",
    "patternProperties": "llguidance needs disjoint patternProperties (relaxed: one dropped where other keys are free)",
    PROPERTY_ORDER: "llguidance accepts object keys only in the schema's order",
    "remote $ref": "a $ref to another document: neither llguidance nor the post-check fetches it",
    "unsatisfiable": "the schema admits no instance (llguidance proves it; nothing to relax)",
    "circular $ref with sibling keys": "llguidance cannot expand a recursive $ref that has sibling keywords",
    "too large": "the schema's grammar exceeds llguidance's size limits",
    "llguidance panic": "llguidance crashed on the schema (reported as a refusal, not a crash)",
}


def suite_files(path: Path, limit: int | None = None) -> list[Path]:
    """The suite's ``*.json`` files in name order (the order of rows and verdicts)."""
    files = sorted(path.glob("*.json"))
    return files[:limit] if limit is not None else files


def load_suite(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def instance_accepted(
    base: Constraint, tokenizer: Any, data: Any, separators: tuple[str, str] | None = None, mask_s: MutableSequence[float] | None = None
) -> bool:
    """MaskBench grammar verdict for one instance; each mask's compute time is appended to ``mask_s``.

    MaskBench serializes with ``json.dumps``' default separators (", ", ": ") and
    a whitespace-flexible grammar; pass ``(",", ":")`` for a compact grammar."""
    text = serialize(data, separators)
    return rejected_at(base, tokenize(tokenizer, text), mask_s) is None


def serialize(data: Any, separators: tuple[str, str] | None = None) -> str:
    return json.dumps(data, indent=None, ensure_ascii=False, separators=separators)


def tokenize(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def rejected_at(base: Constraint, tokens: Sequence[int], mask_s: MutableSequence[float] | None = None) -> int | None:
    """Walk ``tokens`` through a fresh clone's mask: None if the grammar accepts them, else the index
    of the first disallowed token (``len(tokens)`` when the stop token is not allowed at the end)."""
    matcher = base.clone()
    for i, token in enumerate([*tokens, base.stop_token]):
        start = time.perf_counter()
        allowed = matcher.allows(token)
        if mask_s is not None:
            mask_s.append(time.perf_counter() - start)
        if not allowed:
            return i
        if i < len(tokens):
            matcher.commit(token)
    return None


_KEY = re.compile(r'[{,]\s*"(?:[^"\\]|\\.)*"\s*:')


def verdict_cause(expected: bool, rejected: int | None, failure: tuple[str, str] | None, relaxed: bool, at_key: bool) -> str | None:
    """Why a verdict is wrong at either stage (grammar, then post-validation); None when both are right.

    A valid instance the grammar refuses at an object key is put down to
    property order: llguidance accepts keys only in the schema's order."""
    accepted = rejected is None
    if expected and not accepted:
        return PROPERTY_ORDER if at_key else VALID_REJECTED
    if expected and failure is not None:
        return UNCHECKABLE if failure[0] == "error" else POST_REJECTED
    if not expected and accepted and failure is None:
        return INVALID_PASSES
    if not expected and accepted:
        return INVALID_ACCEPTED_RELAXED if relaxed else INVALID_ACCEPTED
    return None


def run_suite(files: Sequence[Path], tokenizer: Any, stop_token: int | None = None, relax: bool = True) -> dict:
    """Compile (relaxing where llguidance refuses) each schema and judge each instance at both stages.

    Returns counts, ``compile_errors`` and ``relaxations`` per file, and what
    a report needs: each file's ``features`` and number of ``tests``, ``compile_s``, every ``mask_s``
    and one ``verdicts`` row per instance (or per file that did not compile):
    ``accepted`` (grammar), ``final`` (after post-validation) and the ``cause``
    of a wrong verdict at either stage.
    """
    report: dict[str, Any] = {
        "files": 0,
        "instances": 0,
        "valid": 0,
        "invalid": 0,
        "skipped": 0,
        "compile_errors": {},
        "relaxations": {},
        "features": {},
        "tests": {},
        "compile_s": {},
        "mask_s": array("d"),  # millions of masks at 10,000 schemas: 8 bytes each, not a float object
        "verdicts": [],
    }
    # Build the tokenizer bridge once up front, so that compile times are the schemas' own.
    tokenizer_bridge(tokenizer, len(tokenizer), tokenizer.eos_token_id if stop_token is None else stop_token)
    for path in files:
        _judge_file(path, tokenizer, stop_token, relax, report)
    return report


def _judge_file(path: Path, tokenizer: Any, stop_token: int | None, relax: bool, report: dict[str, Any]) -> None:
    suite = load_suite(path)
    report["files"] += 1
    report["features"][path.name] = list((suite.get("meta") or {}).get("features", []))
    report["tests"][path.name] = len(suite["tests"])
    start = time.perf_counter()
    try:
        compiled = compile_json_schema(suite["schema"], whitespace_flexible=True, relax_schema=relax)
        base = Constraint(compiled.grammar, tokenizer, stop_token=stop_token)
    except GrammarError as err:
        report["compile_errors"][path.name] = str(err).splitlines()[0][:300]
        report["skipped"] += len(suite["tests"])
        report["verdicts"].append(
            {
                "file": path.name,
                "instance": -1,
                "expected": None,
                "accepted": None,
                "final": None,
                "cause": None,
                "compile_error": report["compile_errors"][path.name],
                "relaxations": [],
            }
        )
        return
    report["compile_s"][path.name] = time.perf_counter() - start
    relaxations = [str(r) for r in compiled.relaxations]
    if relaxations:
        report["relaxations"][path.name] = relaxations
    validator = json_validator(suite["schema"])
    for i, test in enumerate(suite["tests"]):
        report["instances"] += 1
        report["valid" if test["valid"] else "invalid"] += 1
        text = serialize(test["data"])
        tokens = tokenize(tokenizer, text)
        rejected = rejected_at(base, tokens, report["mask_s"])
        failure = schema_failure(validator, test["data"]) if rejected is None else None
        at_key = rejected is not None and _at_key(tokenizer, tokens, rejected, text)
        report["verdicts"].append(
            {
                "file": path.name,
                "instance": i,
                "expected": bool(test["valid"]),
                "accepted": rejected is None,
                "final": rejected is None and failure is None,
                "cause": verdict_cause(bool(test["valid"]), rejected, failure, bool(relaxations), at_key),
                "compile_error": None,
                "relaxations": relaxations,
            }
        )


def _at_key(tokenizer: Any, tokens: Sequence[int], index: int, text: str) -> bool:
    """Did the grammar refuse the token that starts (or continues) an object key?"""
    prefix = tokenizer.decode(list(tokens[:index]))
    if not text.startswith(prefix):
        return False
    at = len(prefix)
    return any(m.start() <= at < m.end() for m in _KEY.finditer(text))
