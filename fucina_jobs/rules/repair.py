"""Repair: which grounded values to exclude when a record breaks a rule, so that its next decode can keep it.

A grounded number, date or enum field can only take the values its row's text
writes (``grounding.grammar.candidates``), so a broken rule can be searched for
the smallest change that keeps it: one field first, then two, and so on, the
least confident fields (their mean token probability) first. A change is
kept if every rule that reads a changed field holds with the new values. The
changed fields' candidates are then narrowed to the values such changes use,
their previous values excluded, and the rule's other finite fields are held
to the values they had; everything else is decoded afresh. Where no finite
change keeps the rule, the least confident grounded string of the rule gets its
previous value excluded. A plan is a mapping for ``grounded_lark(exclude=)``.

Example: ``subtotal + tax == total`` broken by 127.5 + 127.5 != 572.34 on a
text that writes 527.50 and 44.84 too: no single value fixes it, so the two
least confident fields change together, and subtotal is narrowed to 527.5
and tax to 44.84 while total is held. The search is exhaustive within
``MAX_CHANGES`` value combinations per set of fields, and pure: no model.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping

from .declaration import Rule
from .expression import field_value

#: Value combinations tried per set of changed fields; a larger set is skipped.
MAX_CHANGES = 20_000


@dataclass(frozen=True)
class Field:
    """A grounded field a rule reads: its path for the grammar, and its candidates (None for a string: any span)."""

    path: tuple[str, ...]
    candidates: list[Any] | None


@dataclass
class Repair:
    """One row's repair so far: the values its fields took before and were changed away from."""

    tried: dict[str, list[Any]] = field(default_factory=dict)

    def plan(self, record: Mapping[str, Any], rules: list[Rule], fields: Mapping[str, Field],
             confidence: Mapping[str, float]) -> dict[tuple[str, ...], list[Any]] | None:
        """Exclusions for the next decode of a ``record`` that breaks some of ``rules``; None when no change can keep them."""
        decided: dict[str, set[Any] | None] = {}  # field -> values it may take next (None: a string, its tried values excluded)
        for rule in (r for r in rules if not r.holds(record)):
            if decided.keys() & set(rule.fields):
                continue  # an earlier rule's change decides these; the next decode shows whether this one still breaks
            decided |= self._change(rule, record, rules, fields, confidence) or {}
        if not decided:
            return None
        exclude: dict[tuple[str, ...], list[Any]] = {}
        for name, allowed in decided.items():
            f = fields[name]
            value = field_value(record, name)
            if (allowed is None or value not in allowed) and value not in self.tried.get(name, ()):
                self.tried.setdefault(name, []).append(value)
            keep = allowed if allowed is not None else set()
            banned = [c for c in f.candidates if c not in keep] if f.candidates is not None else list(self.tried[name])
            if banned:
                exclude[f.path] = banned
        return exclude

    def _change(self, rule: Rule, record: Mapping[str, Any], rules: list[Rule], fields: Mapping[str, Field],
                confidence: Mapping[str, float]) -> dict[str, set[Any] | None] | None:
        present = [n for n in rule.fields if n in fields and field_value(record, n) is not None]
        finite = [n for n in present if fields[n].candidates is not None]
        for changed in _by_doubt(finite, confidence):
            options = [[c for c in fields[n].candidates if c != field_value(record, n) and c not in self.tried.get(n, ())] for n in changed]
            if _product(options) > MAX_CHANGES:
                continue
            touched = [r for r in rules if set(r.fields) & set(changed)]
            kept = [values for values in itertools.product(*options) if all(r.holds(_with(record, dict(zip(changed, values)))) for r in touched)]
            if kept:
                held = {n: {field_value(record, n)} for n in finite if n not in changed}
                return held | {n: {values[i] for values in kept} for i, n in enumerate(changed)}
        strings = [n for n in present if fields[n].candidates is None]
        if strings:
            return {min(strings, key=lambda n: confidence.get(n, 0.0)): None}
        return None


def _by_doubt(names: list[str], confidence: Mapping[str, float]) -> list[tuple[str, ...]]:
    """Every non-empty set of ``names``: fewer fields first, then the less confident (a missing confidence counts as 0)."""
    subsets = [s for size in range(1, len(names) + 1) for s in itertools.combinations(names, size)]
    return sorted(subsets, key=lambda s: (len(s), sum(confidence.get(n, 0.0) for n in s)))


def _product(options: list[list[Any]]) -> int:
    total = 1
    for o in options:
        total *= len(o)
    return total


def _with(record: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` with dotted fields set to ``values``."""
    out = dict(record)
    for name, value in values.items():
        node, parts = out, name.split(".")
        for part in parts[:-1]:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[parts[-1]] = value
    return out
