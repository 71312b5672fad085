"""Where a record's grounded values sit in its source text: one character span per value.

A value a text writes more than once (a total printed three times, a shop's
name on every receipt of a report) needs a choice. Records list their values
in text order far more often than not (items in the order the text has them,
a receipt's name before its date before its total), so values are located in
the record's order, each at its first occurrence at or after the previous
value's; a value with no occurrence after it (a vendor printed above the
invoice number) takes its first occurrence. Values the text does not write
(an ``allow`` value) get no span.

``value_spans`` is this module's one entry; chunked rows use it to tell an
item found twice in an overlap from two items, and to map values back to the
row's text (``pipeline/merging.py``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Iterator

from .declaration import Grounded
from .values import dates_in, number_spans


def value_spans(record: Any, fields: list[Grounded], text: str) -> dict[str, tuple[int, int]]:
    """Grounded leaf path (``receipts[2].total``, as ``confidence`` names it) -> its ``(start, end)`` in ``text``."""
    by_path = {g.path: g for g in fields}
    occurrences = _Occurrences(text)
    spans: dict[str, tuple[int, int]] = {}
    cursor = 0
    for path, schema_path, value in _leaves(record, "", ()):
        g = by_path.get(schema_path)
        if g is None or value is None:
            continue
        found = occurrences.of(g, value)
        if not found:
            continue
        span = next((s for s in found if s[0] >= cursor), found[0])
        spans[path] = span
        cursor = span[0]
    return spans


class _Occurrences:
    """Every span that writes a value, by kind; numbers and dates are read once per text."""

    def __init__(self, text: str):
        self.text = text
        self._numbers: dict[bool, dict[Decimal, list[tuple[int, int]]]] = {}
        self._dates: dict[str, list[tuple[int, int]]] | None = None

    def of(self, g: Grounded, value: Any) -> list[tuple[int, int]]:
        if g.kind == "string" and isinstance(value, str) and value.strip():
            return self._matches(_bounded(value, _words(value, g.whitespace), r"[^\W_]"), g.case)
        if g.kind == "enum" and isinstance(value, str):
            return sorted(s for spelling in g.evidence(value) for s in self._matches(_bounded(spelling, re.escape(spelling), r"[^\W\d_]"), g.case))
        if g.kind == "date":
            if self._dates is None:
                self._dates = dates_in(self.text)
            return sorted(set(self._dates.get(value, [])))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return []
        if g.amount not in self._numbers:
            self._numbers[g.amount] = number_spans(self.text, g.amount)
        try:
            return sorted(set(self._numbers[g.amount].get(Decimal(str(value)), [])))
        except InvalidOperation:
            return []

    def _matches(self, pattern: str, case: str) -> list[tuple[int, int]]:
        flags = re.IGNORECASE if case == "insensitive" else 0
        return [m.span() for m in re.finditer(pattern, self.text, flags)]


def _bounded(value: str, pattern: str, glued: str) -> str:
    """``pattern`` with no ``glued`` character touching an end of ``value`` that is itself one (whole words, as the grammar cuts them)."""
    head = rf"(?<!{glued})" if re.match(glued, value[:1]) else ""
    tail = rf"(?!{glued})" if re.match(glued, value[-1:]) else ""
    return head + pattern + tail


def _words(value: str, whitespace: str) -> str:
    """A string value as a pattern: with ``whitespace: normalize``, any run of whitespace between its words."""
    if whitespace != "normalize":
        return re.escape(value)
    return r"\s+".join(re.escape(word) for word in value.split())


def _leaves(value: Any, path: str, schema_path: tuple[str, ...]) -> Iterator[tuple[str, tuple[str, ...], Any]]:
    """(path as ``confidence`` names it, path as ``Grounded`` names it, value) per leaf, in the record's order."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, f"{path}.{key}" if path else key, (*schema_path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _leaves(sub, f"{path}[{i}]", (*schema_path, "[]"))
    else:
        yield path, schema_path, value
