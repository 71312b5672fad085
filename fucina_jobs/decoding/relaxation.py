"""Relaxed compilation: a JSON schema llguidance refuses, widened until it compiles.

llguidance refuses a schema that uses a keyword it does not implement (``not``,
``uniqueItems``, ``if``/``then``/``else``...), a format it does not know, a
regex its engine cannot express, ``oneOf`` it cannot prove disjoint,
min/maxProperties over optional keys, or overlapping patternProperties. Each
refusal names its cause; ``relax`` answers it with a *wider* schema (the
keyword dropped, the format a plain string, ``oneOf`` as ``anyOf``, one of the
overlapping patterns dropped), so every instance of the original schema is
still accepted, and ``compile_json_schema`` retries until the schema compiles
or a cause no relaxation handles remains.

Wider means the grammar may accept outputs the original schema rejects: that
is why every output is validated against the *original* schema afterwards
(``data.sink.Validator``), and a failure there is a ``schema_violation``.

``relax`` and ``cause`` are pure functions of the schema and llguidance's
message; only ``compile_json_schema`` calls llguidance. It needs no tokenizer,
so a job's schema can be checked before any model loads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import llguidance

from .constraint import GrammarError

#: More than this many relaxations of one schema means a loop, not progress.
MAX_RELAXATIONS = 32

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[(.*?)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
_MIN_MAX_PROPERTIES = "min/maxProperties only supported"
_ONE_OF = "oneOf constraints are not supported"
_REGEX = "regex parse error:"
_OVERLAPPING = re.compile(r"patternProperty regexes /(.*)/ and /(.*)/ are not disjoint")
_CONDITIONAL = ("if", "then", "else")
#: Refusals no relaxation answers, each with the stable cause it is grouped and known by.
_UNRELAXABLE = (
    ("remote $ref", re.compile(r"not present in a registry|retriev", re.I)),
    ("unsatisfiable", re.compile(r"unsatisfiable", re.I)),
    ("circular $ref with sibling keys", re.compile(r"circular references with sibling keys")),
    ("too large", re.compile(r"schema too large|too many (expressions|states)", re.I)),
    ("llguidance panic", re.compile(r"llguidance panicked")),
)

# Where JSON Schema keeps subschemas: maps of them, single ones, lists of them.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


@dataclass(frozen=True)
class Relaxation:
    """One widening of a schema, named by the cause llguidance gave."""

    cause: str  # not | uniqueItems | format | oneOf | regex | min/maxProperties | ...
    detail: str = ""  # which format, which pattern

    def __str__(self) -> str:
        return f"{self.cause}={self.detail}" if self.detail else self.cause


class Compiled(NamedTuple):
    grammar: str  # llguidance's grammar JSON
    schema: dict[str, Any] | bool  # the schema that compiled: the original unless relaxations is non-empty
    relaxations: list[Relaxation]


def cause(error: str) -> str:
    """The cause of an llguidance refusal, short and stable enough to group thousands of them by."""
    if m := _UNIMPLEMENTED.search(error):
        first = json.loads(f"[{m.group(1)}]")[0]
        return "/".join(_CONDITIONAL) if first in _CONDITIONAL else first
    if _UNKNOWN_FORMAT.search(error):
        return "format"
    if _MIN_MAX_PROPERTIES in error:
        return "min/maxProperties"
    if _ONE_OF in error:
        return "oneOf"
    if _REGEX in error:
        return "regex"
    if _OVERLAPPING.search(error):
        return "patternProperties"
    if known := next((name for name, pattern in _UNRELAXABLE if pattern.search(error)), None):
        return known
    first = error.strip().splitlines()[0] if error.strip() else "unknown"
    first = re.sub(r"^\S*\.json: |^<[a-z]+>: | \(after relaxing .*\)$", "", first)  # the caller's name and notes
    first = re.sub(r"\"[^\"]*\"|'[^']*'|`[^`]*`|\S*[/#]\S*", "…", first)  # names, paths and regexes vary by schema
    return re.sub(r"\d+", "N", first)[:80]


def relax(schema: dict[str, Any], error: str) -> tuple[dict[str, Any], list[Relaxation]] | None:
    """A wider copy of ``schema`` that answers llguidance's ``error``, or None when no relaxation handles it."""
    if m := _UNIMPLEMENTED.search(error):
        keys = set(json.loads(f"[{m.group(1)}]"))
        named = sorted(keys - set(_CONDITIONAL)) + (["/".join(_CONDITIONAL)] if keys & set(_CONDITIONAL) else [])
        keys |= set(_CONDITIONAL) if keys & set(_CONDITIONAL) else set()  # then/else without if mean nothing: drop the whole
        return _rewrite(schema, lambda node: _without(node, *keys)), [Relaxation(k) for k in named]
    if m := _UNKNOWN_FORMAT.search(error):
        fmt = m.group(1).strip("\"'`")
        return _rewrite(schema, lambda node: _without(node, "format") if node.get("format") == fmt else node), [Relaxation("format", fmt)]
    if _MIN_MAX_PROPERTIES in error:
        return _rewrite(schema, _drop_min_max_properties), [Relaxation("min/maxProperties")]
    if _ONE_OF in error and not schema.get("x-guidance", {}).get("coerce_one_of"):
        options = {**schema.get("x-guidance", {}), "coerce_one_of": True}  # llguidance's own oneOf-as-anyOf
        return {**schema, "x-guidance": options}, [Relaxation("oneOf")]
    if _REGEX in error:
        return _relax_regex(schema, error)
    if m := _OVERLAPPING.search(error):
        return _relax_overlapping(schema, m.group(1), m.group(2))
    return None


def compile_json_schema(
    schema: dict[str, Any] | bool, *, whitespace_flexible: bool = False, relax_schema: bool = True, name: str = "<schema>"
) -> Compiled:
    """Compile ``schema`` strictly; on a refusal a relaxation handles (``relax_schema``), relax and retry.

    Raises ``GrammarError`` naming the schema and the cause left when the schema does not compile."""
    relaxations: list[Relaxation] = []
    current = schema
    while True:
        grammar, problem = _compile(current, whitespace_flexible)
        if not problem:
            return Compiled(grammar, current, relaxations)
        step = relax(current, problem) if relax_schema and isinstance(current, dict) and len(relaxations) < MAX_RELAXATIONS else None
        if step is None or step[0] == current:
            tried = f" (after relaxing {', '.join(map(str, relaxations))})" if relaxations else ""
            raise GrammarError(f"{name}: {problem}{tried}")
        current, applied = step
        relaxations += applied


# -- internals ---------------------------------------------------------------------


def _compile(schema: dict[str, Any] | bool, whitespace_flexible: bool) -> tuple[str, str]:
    """(llguidance's grammar, its refusal or ""): the check needs no tokenizer."""
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": whitespace_flexible})
        return grammar, llguidance.LLMatcher.validate_grammar(grammar)
    except ValueError as err:
        return "", str(err)
    except BaseException as err:  # a Rust panic arrives as pyo3's PanicException, a BaseException: one schema must not kill the job
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        return "", f"llguidance panicked on this schema: {err}"


def _without(node: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in keys}


def _rewrite(node: Any, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """A copy of schema ``node`` with ``edit`` applied to it and to every subschema under it."""
    if not isinstance(node, dict):
        return node
    out = edit(node)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out = {**out, key: {k: _rewrite(v, edit) for k, v in out[key].items()}}
    for key in _SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out = {**out, key: _rewrite(out[key], edit)}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out = {**out, key: [_rewrite(v, edit) for v in out[key]]}
    return out


def _drop_min_max_properties(node: dict[str, Any]) -> dict[str, Any]:
    optional = set(node.get("properties") or {}) - set(node.get("required") or [])
    return _without(node, "minProperties", "maxProperties") if optional else node


def _relax_overlapping(schema: dict[str, Any], first: str, second: str) -> tuple[dict[str, Any], list[Relaxation]] | None:
    """Drop the second of two overlapping patternProperties where any other key is allowed anyway.

    Keys matching both then need only the first's schema, keys matching only
    the second fall to additionalProperties: wider, but only when that allows
    anything (absent or true); otherwise nothing is relaxed."""

    def edit(node: dict[str, Any]) -> dict[str, Any]:
        props = node.get("patternProperties")
        if isinstance(props, dict) and first in props and second in props and node.get("additionalProperties", True) is True:
            node = {**node, "patternProperties": {k: v for k, v in props.items() if k != second}}
        return node

    relaxed = _rewrite(schema, edit)
    return (relaxed, [Relaxation("patternProperties", second[:60])]) if relaxed != schema else None


def _relax_regex(schema: dict[str, Any], error: str) -> tuple[dict[str, Any], list[Relaxation]] | None:
    """Drop the pattern llguidance quotes (a string keeps its length bounds), or the patternProperties entry keyed by it."""
    lines = error.splitlines()
    bad = lines[lines.index(next(line for line in lines if _REGEX in line)) + 1].strip() if len(lines) > 1 else None
    if not bad:
        return None

    def edit(node: dict[str, Any]) -> dict[str, Any]:
        if isinstance(node.get("pattern"), str) and node["pattern"].strip() == bad:
            node = _without(node, "pattern")
        props = node.get("patternProperties")
        if isinstance(props, dict) and any(k.strip() == bad for k in props):
            node = {**node, "patternProperties": {k: v for k, v in props.items() if k.strip() != bad}}
        return node

    relaxed = _rewrite(schema, edit)
    return (relaxed, [Relaxation("regex", bad[:60])]) if relaxed != schema else None
