"""The grounding check after decoding: is every grounded value found in its source?

It runs on both engines, after schema validation. With our engine the
grammar already made ungrounded values impossible and this is a cheap proof;
where the grammar could not be used it is the only guard. A value found
nowhere in the source makes the row a reject with reason ``ungrounded``
(the driver's choice, see docs/GROUNDING.md), never a clean record.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from .declaration import Grounded
from .paths import values_at
from .values import dates_in, normalize_whitespace, numbers_in, quantities_in, written


def ungrounded_values(record: Any, fields: list[Grounded], text: str) -> tuple[int, list[str]]:
    """(grounded values checked, one ``field=value`` line per value not found in ``text``)."""
    source = _Source(text)
    checked, misses = 0, []
    for g in fields:
        for value in values_at(record, g.path):
            if value is None:
                continue  # nothing claimed
            checked += 1
            if not source.holds(g, value):
                misses.append(f"{g.name}={value!r}")
    return checked, misses


class _Source:
    """One row's text, with its numbers and dates read once on first use."""

    def __init__(self, text: str):
        self.text = text
        self._numbers: dict[bool, set[Decimal]] = {}  # amounts only? -> numbers
        self._dates: set[str] | None = None

    def holds(self, g: Grounded, value: Any) -> bool:
        if value in g.allow and type(value) is not bool:
            return True
        if g.kind == "enum":
            return written(self.text, g.evidence(value), g.case)
        if g.kind == "string":
            return isinstance(value, str) and value != "" and _normalized(value, g) in _normalized(self.text, g)
        if g.kind == "quantity":
            return value in quantities_in(self.text, g.units)
        if g.kind == "date":
            if self._dates is None:
                self._dates = set(dates_in(self.text))
            return value in self._dates
        if g.amount not in self._numbers:
            self._numbers[g.amount] = numbers_in(self.text, g.amount)
        try:
            return Decimal(str(value)) in self._numbers[g.amount]
        except InvalidOperation:
            return False


def _normalized(text: str, g: Grounded) -> str:
    text = "".join(c for c in text if c not in g.drop_marks)
    text = normalize_whitespace(text) if g.whitespace == "normalize" else text
    return text.casefold() if g.folds_case else text
