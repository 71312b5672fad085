"""Which rules a record must keep, read from the ``x-rules`` keyword at a JSON schema's root.

```json
"x-rules": [
  {"name": "amounts_add_up", "check": "subtotal + tax == total", "tolerance": 0.01},
  "due_date >= invoice_date"
]
```

A rule is a string (named by its own text) or an object with ``check``, and
optionally ``name`` and ``tolerance`` (how far apart two numbers may be and
still be equal). The schema stays the one place that says what a record is,
and validators ignore the unknown ``x-`` keyword.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterator, Mapping

from .expression import BOOL, DATE, NUMBER, STRING, Expression, RuleError, evaluate, field_value, parse

KEYWORD = "x-rules"
_OPTIONS = ("check", "name", "tolerance")


@dataclass(frozen=True)
class Rule:
    name: str
    expression: Expression
    tolerance: Decimal = Decimal(0)

    @property
    def fields(self) -> tuple[str, ...]:
        return self.expression.fields

    def holds(self, record: Mapping[str, Any]) -> bool:
        """True unless the record breaks the rule; a rule that does not apply (a field missing or null) holds."""
        return evaluate(self.expression, record, self.tolerance) is not False

    def explain(self, record: Mapping[str, Any]) -> str:
        """The rule and the values it read, for a reject's message."""
        values = ", ".join(f"{f}={field_value(record, f)!r}" for f in self.fields)
        named = "" if self.name == self.expression.text else f"{self.name}: "
        return f"{named}{self.expression.text} ({values})"


def rules_of(schema: Any) -> list[Rule]:
    """The rules ``schema`` declares, parsed and type-checked; ``RuleError`` names the bad rule and why."""
    if not isinstance(schema, dict):
        return []
    stray = next(_declarations(schema, ()), None)
    if stray is not None:
        raise RuleError(f"{'/'.join(stray)}: {KEYWORD} applies at the schema's root only")
    declared = schema.get(KEYWORD)
    if declared is None:
        return []
    if not isinstance(declared, list):
        raise RuleError(f"{KEYWORD} must be a list of rules, not {type(declared).__name__}")
    types = field_types(schema)
    rules: list[Rule] = []
    for i, entry in enumerate(declared):
        rule = _rule(entry, types, i)
        if any(r.name == rule.name for r in rules):
            raise RuleError(f"{KEYWORD}[{i}]: the name {rule.name!r} is taken by an earlier rule")
        rules.append(rule)
    return rules


def broken(rules: list[Rule], record: Mapping[str, Any]) -> list[Rule]:
    return [r for r in rules if not r.holds(record)]


def field_types(schema: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Every field a rule can read (properties, through nested objects, not arrays) -> its rule type."""
    types: dict[str, str] = {}
    for key, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        name = f"{prefix}{key}"
        kind = _type(sub)
        if kind:
            types[name] = kind
        elif sub.get("properties"):
            types |= field_types(sub, f"{name}.")
    return types


def _type(schema: Mapping[str, Any]) -> str | None:
    if "enum" in schema:  # a null member makes the field nullable, which a rule reads as not applying
        return STRING if all(isinstance(v, str) for v in schema["enum"] if v is not None) else None
    kinds = schema.get("type")
    kinds = [k for k in kinds if k != "null"] if isinstance(kinds, list) else [kinds]
    if len(kinds) != 1:
        return None
    if kinds[0] == "string":
        return DATE if schema.get("format") == "date" else STRING
    return {"number": NUMBER, "integer": NUMBER, "boolean": BOOL}.get(kinds[0])


def _rule(entry: Any, types: dict[str, str], i: int) -> Rule:
    where = f"{KEYWORD}[{i}]"
    if isinstance(entry, str):
        entry = {"check": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("check"), str):
        raise RuleError(f"{where}: a rule is a string, or an object with a 'check' string (and 'name', 'tolerance')")
    unknown = set(entry) - set(_OPTIONS)
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    text = entry["check"]
    name = entry.get("name", text)
    tolerance = entry.get("tolerance", 0)
    if not isinstance(name, str) or not name:
        raise RuleError(f"{where}: name must be a non-empty string")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise RuleError(f"{where} ({name!r}): tolerance must be a number >= 0, not {tolerance!r}")
    try:
        expression = parse(text, types)
    except RuleError as err:
        raise RuleError(f"{where} ({text!r}): {err}") from None
    return Rule(name, expression, Decimal(str(tolerance)))


def _declarations(node: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Where ``x-rules`` appears below the root."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, sub in children:
        if path and key == KEYWORD and isinstance(node, dict):
            yield (*path, key)
        if isinstance(sub, (dict, list)):
            yield from _declarations(sub, (*path, str(key)))
