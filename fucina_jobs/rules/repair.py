"""Repair: which grounded values to exclude when a record breaks a rule, so that its next decode can keep it.

A grounded number, date or enum field can only take the values its row's text
writes (``grounding.grammar.field_values``), so a broken rule can be searched for
the smallest change that keeps it: one field, then two, and so on, the least
confident fields (their mean token probability) first. A change counts if
every rule that reads a changed field holds with the new values, and one
made of values the text writes beats one that needs a value the schema only
allows (``x-grounded.allow``, such as a tax of 0): an allowance is a default,
not evidence. The changed fields' candidates are then narrowed to the values
such changes use, and the rule's other finite fields are held to the values
they had; everything else is decoded afresh.

Where no finite change keeps a rule that reads grounded strings, each of
those strings is an alternative: its value is excluded (with every span that
names the same thing, ``grounded_lark``), each alternative is decoded, and the
replica keeps the one whose new value the model is surest of. Values a field
was changed away from stay excluded at later attempts. The planner is pure:
no model, no text.

Example: ``subtotal + tax == total`` broken by 127.5 + 127.5 != 572.34 on a
text that writes 527.50 and 44.84 too: no single written value fixes it, so
the two least confident fields change together, subtotal narrowed to 527.5
(or 572.34) and tax to 44.84 (or 0), while total is held.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping

from .declaration import Rule
from .expression import field_value

#: Value combinations tried per set of changed fields; a larger set is skipped.
MAX_CHANGES = 20_000
#: Alternatives decoded for one attempt at most (strings of several broken rules multiply).
MAX_PLANS = 4


@dataclass(frozen=True)
class Field:
    """A grounded field a rule reads: its path for the grammar, its candidates (None for a string: any span), and
    those only the schema's allowance gives (``x-grounded.allow``, not written in the text)."""

    path: tuple[str, ...]
    candidates: list[Any] | None
    defaults: frozenset = frozenset()


@dataclass(frozen=True)
class Plan:
    """One way to decode a record again: what to exclude, and which fields it changes away from which values.

    ``doubt`` is the string field whose new value's confidence ranks this plan against its alternatives."""

    exclude: dict[tuple[str, ...], list[Any]]
    changed: dict[str, Any]
    doubt: str | None = None


@dataclass
class Repair:
    """One row's repair so far: the values its fields took before and were changed away from."""

    tried: dict[str, list[Any]] = field(default_factory=dict)

    def plans(self, record: Mapping[str, Any], rules: list[Rule], fields: Mapping[str, Field], confidence: Mapping[str, float]) -> list[Plan]:
        """Alternative plans for a ``record`` that breaks some of ``rules``; none when no change can keep them."""
        choices: list[list[dict[str, set[Any] | None]]] = []  # per broken rule: its alternatives, field -> values it may take
        decided: set[str] = set()
        for rule in (r for r in rules if not r.holds(record)):
            if decided & set(rule.fields):
                continue  # an earlier rule's change decides these; the next decode shows whether this one still breaks
            options = self._changes(rule, record, rules, fields, confidence)
            if options:
                choices.append(options)
                decided |= {name for option in options for name in option}
        combined = [dict(c for part in parts for c in part.items()) for parts in itertools.product(*choices)] if choices else []
        return [self._plan(decision, record, fields) for decision in combined[:MAX_PLANS]]

    def take(self, plan: Plan) -> None:
        """The plan was decoded and kept: the values it changed away from stay excluded from now on."""
        for name, value in plan.changed.items():
            if value not in self.tried.setdefault(name, []):
                self.tried[name].append(value)

    def _plan(self, decision: dict[str, set[Any] | None], record: Mapping[str, Any], fields: Mapping[str, Field]) -> Plan:
        exclude, changed, doubt = {}, {}, None
        for name, allowed in decision.items():
            f, value = fields[name], field_value(record, name)
            if allowed is None or value not in allowed:
                changed[name] = value
            if allowed is None:
                doubt = name
                banned = list(dict.fromkeys([*self.tried.get(name, ()), value]))
            else:
                banned = [c for c in f.candidates if c not in allowed]
            if banned:
                exclude[f.path] = banned
        for name, values in self.tried.items():  # what earlier attempts changed away from stays excluded
            if name not in decision and name in fields:
                exclude[fields[name].path] = list(values)
        return Plan(exclude, changed, doubt)

    def _changes(
        self, rule: Rule, record: Mapping[str, Any], rules: list[Rule], fields: Mapping[str, Field], confidence: Mapping[str, float]
    ) -> list[dict[str, set[Any] | None]]:
        """The rule's way(s) out: one finite change, or else one alternative per grounded string it reads."""
        present = [n for n in rule.fields if n in fields and field_value(record, n) is not None]
        finite = [n for n in present if fields[n].candidates is not None]
        best: tuple[tuple[str, ...], list[tuple[Any, ...]]] | None = None
        for changed in _by_doubt(finite, confidence):
            kept = self._keeping(changed, record, rules, fields)
            written = [values for values in kept if not any(v in fields[n].defaults for n, v in zip(changed, values))]
            if written:
                best = (changed, written)
                break
            if kept and best is None:
                best = (changed, kept)
        if best is not None:
            changed, kept = best
            held = {n: {field_value(record, n)} for n in finite if n not in changed}
            return [held | {n: {values[i] for values in kept} for i, n in enumerate(changed)}]
        return [{name: None} for name in present if fields[name].candidates is None]

    def _keeping(self, changed: tuple[str, ...], record: Mapping[str, Any], rules: list[Rule], fields: Mapping[str, Field]) -> list[tuple[Any, ...]]:
        """Every combination of new values for ``changed`` with which the rules reading them hold."""
        options = [[c for c in fields[n].candidates if c != field_value(record, n) and c not in self.tried.get(n, ())] for n in changed]
        if _product(options) > MAX_CHANGES:
            return []
        touched = [r for r in rules if set(r.fields) & set(changed)]
        return [values for values in itertools.product(*options) if all(r.holds(_with(record, dict(zip(changed, values)))) for r in touched)]


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
