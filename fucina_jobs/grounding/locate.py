"""Where a record's grounded values sit in its source text: one character span per value.

A value a text writes more than once (a total printed three times, a shop's
name on every receipt of a report) needs a choice. Records list their values
in text order far more often than not (items in the order the text has them,
a receipt's name before its date before its total), so values are located in
the record's order, each at its first occurrence at or after the previous
value's; a value with no occurrence after it (a vendor printed above the
invoice number) takes its first occurrence. An item of an array declared
``"x-grounded": {"items": "paragraph"}`` (or ``"line"``) is located inside its
own paragraph: the first one after the previous item's that writes all its
values, as the grammar made it. Values the text does not write (an ``allow``
value) get no span.

``value_spans`` is this module's one entry; chunked rows use it to tell an
item found twice in an overlap from two items, and to map values back to the
row's text (``pipeline/merging.py``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .declaration import Grounded, grounded_arrays, grounded_fields, unit_spans
from .values import dates_in, number_spans


def value_spans(record: Any, schema: Any, text: str) -> dict[str, tuple[int, int]]:
    """Grounded leaf path (``receipts[2].total``, as ``confidence`` names it) -> its ``(start, end)`` in ``text``."""
    locator = _Locator(schema, text)
    locator.walk(record, "", (), (0, len(text)))
    return locator.spans


class _Locator:
    def __init__(self, schema: Any, text: str):
        self.fields = {g.path: g for g in grounded_fields(schema)}
        self.arrays = grounded_arrays(schema)
        self.occurrences = _Occurrences(text)
        self.text = text
        self.spans: dict[str, tuple[int, int]] = {}
        self.cursor = 0

    def walk(self, value: Any, path: str, schema_path: tuple[str, ...], window: tuple[int, int]) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                self.walk(sub, f"{path}.{key}" if path else key, (*schema_path, key), window)
        elif isinstance(value, list) and schema_path in self.arrays:
            self.units(value, path, schema_path, window)
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                self.walk(sub, f"{path}[{i}]", (*schema_path, "[]"), window)
        elif schema_path in self.fields and value is not None:
            found = [s for s in self.occurrences.of(self.fields[schema_path], value) if window[0] <= s[0] and s[1] <= window[1]]
            if found:
                span = next((s for s in found if s[0] >= self.cursor), found[0])
                self.spans[path] = span
                self.cursor = span[0]

    def units(self, items: list[Any], path: str, schema_path: tuple[str, ...], window: tuple[int, int]) -> None:
        """Each item inside the first unit after the previous item's that writes all its values (the grammar's rule)."""
        units = [(window[0] + a, window[0] + b) for a, b in unit_spans(self.text[window[0]:window[1]], self.arrays[schema_path].unit)]
        at = 0
        for i, item in enumerate(items):
            leaves = [(p, v) for p, v in _leaves(item, (*schema_path, "[]")) if p in self.fields and v is not None]
            k = next((k for k in range(at, len(units)) if all(self.written_in(units[k], p, v) for p, v in leaves)), None)
            unit = units[k] if k is not None else window
            self.cursor = unit[0]
            self.walk(item, f"{path}[{i}]", (*schema_path, "[]"), unit)
            at = k + 1 if k is not None else at

    def written_in(self, window: tuple[int, int], schema_path: tuple[str, ...], value: Any) -> bool:
        return any(window[0] <= s[0] and s[1] <= window[1] for s in self.occurrences.of(self.fields[schema_path], value))


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


def _leaves(value: Any, schema_path: tuple[str, ...]):
    """(path as ``Grounded`` names it, value) per leaf below ``value``."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*schema_path, key))
    elif isinstance(value, list):
        for sub in value:
            yield from _leaves(sub, (*schema_path, "[]"))
    else:
        yield schema_path, value
