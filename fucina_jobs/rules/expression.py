"""The rule language: one true-or-false expression over a record's fields, parsed safely.

A rule reads like ``subtotal + tax == total`` or ``due_date >= invoice_date``.
Python's own parser turns the text into a tree (``ast.parse`` only parses;
nothing is ever run by Python), and the tree is accepted only if every node is
on a short list:

- a field (``vendor``; ``address.city`` inside an object), a number, a string,
  ``true`` or ``false``;
- ``+ - * /`` and unary ``-`` on numbers; ``abs``, ``min`` and ``max``;
- ``== != < <= > >=`` (chains such as ``0 <= tax <= total`` included);
- ``and``, ``or``, ``not``.

Each field has a type read from the schema (number, string, date, bool), and
the tree is type-checked when the job starts, so a typo or a comparison of a
date with a number is a one-line error before any model loads. ``evaluate``
walks the checked tree: numbers are Decimals (``0.1 + 0.2 == 0.3`` holds),
dates are dates, strings compare as the text they name (case, runs of
whitespace and punctuation at either end aside: ``"Velo Kessler "`` equals
``"velo kessler"``), and a field that is missing or null makes the rule not apply.
"""

from __future__ import annotations

import ast
import datetime as dt
import operator
import string
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

NUMBER, STRING, DATE, BOOL = "number", "string", "date", "bool"
FUNCTIONS = ("abs", "min", "max")
MAX_LENGTH = 500  # characters; a rule is a line, and ast.parse of a huge text is slow
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_ORDERED = (NUMBER, DATE)


class RuleError(ValueError):
    """A rule does not parse or does not type-check; the message names the part that is wrong."""


class _NotApplicable(Exception):
    """A field the rule reads is missing or null, or a division by zero: the rule says nothing."""


@dataclass(frozen=True)
class Expression:
    text: str
    tree: ast.expr
    types: dict[str, str]  # the dotted field names it reads, in the order they first appear -> their type
    literal_dates: frozenset[int]  # ids of the string literals that are compared with dates

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.types)


def parse(text: str, types: Mapping[str, str]) -> Expression:
    """Parse and type-check ``text`` against the fields' ``types``; raise ``RuleError`` naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError("a rule is a non-empty string such as 'subtotal + tax == total'")
    if len(text) > MAX_LENGTH:
        raise RuleError(f"a rule is at most {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise RuleError(f"does not parse: {err.msg} at column {err.offset}") from None
    checker = _Checker(types)
    if checker.type(tree) != BOOL:
        raise RuleError("is not a comparison: a rule must be true or false, e.g. 'total >= 0'")
    return Expression(text, tree, {name: types[name] for name in checker.fields}, frozenset(checker.literal_dates))


def evaluate(expression: Expression, record: Mapping[str, Any], tolerance: Decimal = Decimal(0)) -> bool | None:
    """Whether ``record`` keeps the rule; None when it does not apply (a field it reads is missing or null).

    ``tolerance`` widens ``==`` (and narrows ``!=``) between numbers: ``|a - b| <= tolerance`` is equal."""
    try:
        return bool(_Evaluator(expression, record, tolerance).value(expression.tree))
    except _NotApplicable:
        return None


def field_value(record: Mapping[str, Any], name: str) -> Any:
    """The value at a dotted field name, or None where the record has none."""
    value: Any = record
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


class _Checker:
    """Type-checks a parsed tree node by node; anything not on the list is an error."""

    def __init__(self, types: Mapping[str, str]):
        self.types = types
        self.fields: list[str] = []
        self.literal_dates: set[int] = set()

    def type(self, node: ast.expr) -> str:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise RuleError(
                f"{_show(node)!r} is not allowed: use fields, numbers, strings, + - * /, comparisons, and/or/not and {', '.join(FUNCTIONS)}"
            )
        return method(node)

    def _Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, bool) or node.value is None:
            raise RuleError(f"{node.value!r} is Python: write true or false")
        if isinstance(node.value, (int, float)):
            return NUMBER
        if isinstance(node.value, str):
            return STRING
        raise RuleError(f"{node.value!r} is not a number or a string")

    def _Name(self, node: ast.Name) -> str:
        if node.id in ("true", "false"):
            return BOOL
        return self._field(node)

    def _Attribute(self, node: ast.Attribute) -> str:
        return self._field(node)

    def _field(self, node: ast.expr) -> str:
        name = _dotted(node)
        if name is None or name not in self.types:
            known = ", ".join(sorted(self.types)) or "none"
            raise RuleError(f"unknown field {name or _show(node)!r}; the schema's fields a rule can read: {known}")
        self.fields.append(name)
        return self.types[name]

    def _UnaryOp(self, node: ast.UnaryOp) -> str:
        operand = self.type(node.operand)
        if isinstance(node.op, ast.Not) and operand == BOOL:
            return BOOL
        if isinstance(node.op, ast.USub) and operand == NUMBER:
            return NUMBER
        raise RuleError(f"{_show(node)!r}: 'not' takes a comparison and '-' a number")

    def _BinOp(self, node: ast.BinOp) -> str:
        if type(node.op) not in _ARITHMETIC:
            raise RuleError(f"{_show(node)!r}: only + - * / are allowed")
        for side in (node.left, node.right):
            if self.type(side) != NUMBER:
                raise RuleError(f"{_show(node)!r}: {_show(side)!r} is not a number")
        return NUMBER

    def _BoolOp(self, node: ast.BoolOp) -> str:
        for value in node.values:
            if self.type(value) != BOOL:
                raise RuleError(f"{_show(node)!r}: {_show(value)!r} is not true or false")
        return BOOL

    def _Compare(self, node: ast.Compare) -> str:
        if any(type(op) not in _COMPARISONS for op in node.ops):
            raise RuleError(f"{_show(node)!r}: only == != < <= > >= compare")
        operands = [node.left, *node.comparators]
        kinds = [self.type(o) for o in operands]
        for op, (left, right), (a, b) in zip(node.ops, zip(operands, operands[1:]), zip(kinds, kinds[1:])):
            a, b = self._date_literal(left, a, b), self._date_literal(right, b, a)
            if a != b:
                raise RuleError(f"{_show(node)!r}: {_show(left)!r} is a {a} and {_show(right)!r} a {b}")
            if a not in _ORDERED and not isinstance(op, (ast.Eq, ast.NotEq)):
                raise RuleError(f"{_show(node)!r}: a {a} has no order; only numbers and dates take < <= > >=")
        return BOOL

    def _date_literal(self, node: ast.expr, kind: str, other: str) -> str:
        """A string literal compared with a date is a date, if it is one (``due_date <= "2030-01-01"``)."""
        if kind == STRING and other == DATE and isinstance(node, ast.Constant):
            try:
                dt.date.fromisoformat(node.value)
            except ValueError:
                raise RuleError(f"{node.value!r} is compared with a date but is not one (YYYY-MM-DD)") from None
            self.literal_dates.add(id(node))
            return DATE
        return kind

    def _Call(self, node: ast.Call) -> str:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS or node.keywords:
            raise RuleError(f"{_show(node)!r}: the functions are {', '.join(FUNCTIONS)}")
        kinds = [self.type(a) for a in node.args]
        if name == "abs":
            if kinds != [NUMBER]:
                raise RuleError(f"{_show(node)!r}: abs takes one number")
            return NUMBER
        if len(kinds) < 2 or len(set(kinds)) != 1 or kinds[0] not in _ORDERED:
            raise RuleError(f"{_show(node)!r}: {name} takes two or more numbers, or two or more dates")
        return kinds[0]


class _Evaluator:
    def __init__(self, expression: Expression, record: Mapping[str, Any], tolerance: Decimal):
        self.expression, self.record, self.tolerance = expression, record, tolerance

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            if id(node) in self.expression.literal_dates:
                return dt.date.fromisoformat(node.value)
            return Decimal(str(node.value)) if isinstance(node.value, (int, float)) else node.value
        if isinstance(node, ast.Name) and node.id in ("true", "false"):
            return node.id == "true"
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self.field(_dotted(node))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            return (not operand) if isinstance(node.op, ast.Not) else -operand
        if isinstance(node, ast.BoolOp):  # both sides are read, so a missing field never hides behind and/or
            values = [self.value(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.BinOp):
            return self.arithmetic(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Compare):
            values = [self.value(o) for o in (node.left, *node.comparators)]
            return all(self.compare(op, a, b) for op, a, b in zip(node.ops, values, values[1:]))
        args = [self.value(a) for a in node.args]  # ast.Call: the checker let only abs, min and max through
        return {"abs": lambda: abs(args[0]), "min": lambda: min(args), "max": lambda: max(args)}[node.func.id]()

    def field(self, name: str) -> Any:
        value = field_value(self.record, name)
        if value is None:
            raise _NotApplicable(name)
        kind = None if isinstance(value, bool) else type(value)
        if kind in (int, float):
            return Decimal(str(value))
        if isinstance(value, str) and self.expression.types[name] == DATE:
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                raise _NotApplicable(name) from None  # schema validation rejects it; the rule has nothing to say
        return value

    def arithmetic(self, op: ast.operator, a: Decimal, b: Decimal) -> Decimal:
        if isinstance(op, ast.Div):
            if b == 0:
                raise _NotApplicable("division by zero")
            return a / b
        return _ARITHMETIC[type(op)](a, b)

    def compare(self, op: ast.cmpop, a: Any, b: Any) -> bool:
        if isinstance(a, str) and isinstance(b, str):
            a, b = _text(a), _text(b)
        if isinstance(a, Decimal) and isinstance(b, Decimal) and isinstance(op, (ast.Eq, ast.NotEq)):
            try:
                equal = abs(a - b) <= self.tolerance
            except InvalidOperation:
                equal = False
            return equal if isinstance(op, ast.Eq) else not equal
        return _COMPARISONS[type(op)](a, b)


def _text(value: str) -> str:
    """What a string names, for comparing: case, whitespace runs and punctuation at the ends do not count."""
    return " ".join(value.split()).strip(string.punctuation + " ").casefold()


def _show(node: ast.expr) -> str:
    return ast.unparse(node)
