"""Where each grounded value sits in its source text: character offsets, so a person can see it there.

A grounded value is written in its row's text, but the record alone does not
say where. ``value_spans`` finds each grounded leaf's span, keyed by the same
paths as the confidence maps (``vendor``, ``items[0].name``), from nothing but
the record, the schema's declarations and the text; the shard writer calls it
for every record, so both engines get the same spans.

Offsets are Python string indices (code points) into the text as given. A
span is the written form the value was read from:

- a string: the run of text that equals it under the field's ``x-grounded``
  options (whitespace folded, case folded), a line break inside it included;
- a number: its whole written form, sign, parentheses and an adjacent currency
  included (``1.234,50 €`` for ``1234.5``; ``values.number_spans``);
- a date: the date as written (``3rd April 2025``);
- an enum member: the member or the declared spelling the text writes (``€``).

Where the text writes a value more than once, neither engine can tell which
occurrence it copied: the grammar admits a string as any run of the text's
words and a number as any of the spellings the text writes, with no position
attached. Records list their values in text order far more often than not
(items in the order the text has them, a receipt's name before its date
before its total), so values are located in the record's order, each at its
first occurrence at or after the previous value's; a value with no
occurrence after it (a vendor printed above the invoice number) takes its
first occurrence. For strings, occurrences that start and end at word
boundaries (the grammar copies whole words) come before any others. An item
of an array declared ``"x-grounded": {"items": "paragraph"}`` (or ``"line"``;
``declaration.grounded_arrays``) is located inside its own paragraph: the
first one after the previous item's that writes all its values, as the
grammar made it. A value the text does not write (one of ``allow``, such as
a tax of ``0``) has no span. Chunked rows use the spans to tell an item found
twice in an overlap from two items, and to map values back to the row's
text (``pipeline/merging.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Iterator, Mapping

from .declaration import Grounded, Units, unit_spans
from .candidates import written_values
from .paths import indexed_at, leaves
from .values import dates_in, number_spans, numbers_in, quantities_in, spellings_written

Span = tuple[int, int]


@dataclass
class SpanCheck:
    """How a record's spans hold up: values located, values the text does not write (allowed), and bad spans."""

    values: int = 0
    located: int = 0
    unwritten: int = 0  # ``allow`` values the text does not write: no span, and none expected
    mismatched: list[str] = field(default_factory=list)  # one ``path=value: why`` line per bad span

    def add(self, other: "SpanCheck") -> None:
        self.values += other.values
        self.located += other.located
        self.unwritten += other.unwritten
        self.mismatched += other.mismatched


def grounded_leaves(record: Any, fields: list[Grounded]) -> Iterator[tuple[str, Grounded, Any]]:
    """(path, field, value) for every non-null grounded leaf of ``record``; paths as the confidence maps spell them."""
    for g in fields:
        for path, value in indexed_at(record, g.path):
            if value is not None:
                yield path, g, value


def value_spans(record: Any, fields: list[Grounded], text: str, arrays: Mapping[tuple[str, ...], Units] | None = None) -> dict[str, Span]:
    """Each grounded value's span in ``text``, by path; a value the text does not write has none. ``arrays``: the
    schema's arrays grounded by paragraph or line (``grounded_arrays``), whose items are located in their own."""
    locator = _Locator(fields, arrays or {}, _Source(text))
    locator.walk(record, "", (), (0, len(text)))
    return locator.spans


class _Locator:
    """Walks a record in its own order, locating each grounded value at or after the previous one, inside a window."""

    def __init__(self, fields: list[Grounded], arrays: Mapping[tuple[str, ...], Units], source: "_Source"):
        self.fields = {g.path: g for g in fields}
        self.arrays, self.source = arrays, source
        self.spans: dict[str, Span] = {}
        self.cursor = 0

    def walk(self, value: Any, path: str, schema_path: tuple[str, ...], window: Span) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                self.walk(sub, f"{path}.{key}" if path else key, (*schema_path, key), window)
        elif isinstance(value, list) and schema_path in self.arrays:
            self.units(value, path, schema_path, window)
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                self.walk(sub, f"{path}[{i}]", (*schema_path, "[]"), window)
        elif schema_path in self.fields and value is not None:
            found = self.within(window, schema_path, value)
            if found:
                span = next((s for s in found if s[0] >= self.cursor), found[0])
                self.spans[path] = span
                self.cursor = span[0]

    def units(self, items: list[Any], path: str, schema_path: tuple[str, ...], window: Span) -> None:
        """Each item inside the first unit after the previous item's that writes all its values (the grammar's rule)."""
        text = self.source.text[window[0] : window[1]]
        units = [(window[0] + a, window[0] + b) for a, b in unit_spans(text, self.arrays[schema_path].unit)]
        at = 0
        for i, item in enumerate(items):
            inside = [(p, v) for p, v in leaves(item, (*schema_path, "[]")) if p in self.fields and v is not None]
            k = next((k for k in range(at, len(units)) if all(self.within(units[k], p, v) for p, v in inside)), None)
            unit = units[k] if k is not None else window
            self.cursor = unit[0]
            self.walk(item, f"{path}[{i}]", (*schema_path, "[]"), unit)
            at = k + 1 if k is not None else at

    def within(self, window: Span, schema_path: tuple[str, ...], value: Any) -> list[Span]:
        return [s for s in self.source.occurrences(self.fields[schema_path], value) if window[0] <= s[0] and s[1] <= window[1]]


def check_spans(record: Any, fields: list[Grounded], text: str, spans: dict[str, Any]) -> SpanCheck:
    """Does each span's text, read on its own, write its value? A value without a span must be one the text does not write."""
    check = SpanCheck()
    source = _Source(text)
    for path, g, value in grounded_leaves(record, fields):
        check.values += 1
        span = spans.get(path)
        if span is None:
            if source.find(g, value) is not None:
                check.mismatched.append(f"{path}={value!r}: no span, but the text writes it")
            elif value in g.allow:
                check.unwritten += 1
            else:
                check.mismatched.append(f"{path}={value!r}: no span, and the text does not write it")
            continue
        start, end = span
        if 0 <= start < end <= len(text) and writes(g, text[start:end], value):
            check.located += 1
        else:
            check.mismatched.append(f"{path}={value!r}: text[{start}:{end}] is {text[start:end]!r}")
    return check


def writes(g: Grounded, written: str, value: Any) -> bool:
    """Does ``written``, a span's text on its own, write ``value`` under ``g``'s options?"""
    if g.kind == "string":
        return isinstance(value, str) and fold(written, g) == fold(value, g)
    if g.kind == "enum":
        return fold(written, g) in {fold(s, g) for s in g.evidence(value)}
    if g.kind == "date":
        return value in dates_in(written)
    if g.kind == "quantity":
        return value in quantities_in(written, g.units)
    try:
        return Decimal(str(value)) in numbers_in(written, g.amount)
    except InvalidOperation:
        return False


def fold(text: str, g: Grounded) -> str:
    """``text`` the way ``g`` compares it: whitespace runs as one space (``normalize``), casefolded (any ``case`` but ``exact``)."""
    return _Folded(text, g.whitespace, g.case, g.drop_marks).text


class _Folded:
    """A text folded for comparison, with the source index of every folded character."""

    def __init__(self, text: str, whitespace: str, case: str, dropped: str = ""):
        chars: list[str] = []
        where: list[int] = []
        for i, char in enumerate(text):
            if char in dropped:
                continue
            if whitespace == "normalize" and char.isspace():
                if chars and chars[-1] != " ":
                    chars.append(" ")
                    where.append(i)
                continue
            for c in char.casefold() if case != "exact" else char:
                chars.append(c)
                where.append(i)
        if chars and chars[-1] == " " and whitespace == "normalize":
            chars.pop()
            where.pop()
        self.text = "".join(chars)
        self.where = where

    def source_span(self, start: int, end: int) -> Span:
        return self.where[start], self.where[end - 1] + 1


class _Source:
    """One row's text, folded, and its numbers and dates, each computed once on first use."""

    def __init__(self, text: str):
        self.text = text
        self._folded: dict[tuple[str, str, str], _Folded] = {}
        self._numbers: dict[bool, dict[Decimal, list[Span]]] = {}
        self._dates: dict[str, list[Span]] | None = None
        self._labelled: dict[tuple[str, ...], dict[Any, list[Span]]] = {}  # a labelled field's path -> its labelled values

    def find(self, g: Grounded, value: Any) -> Span | None:
        """The value's first occurrence (for a string, its first at word boundaries if it has one)."""
        return next(iter(self.occurrences(g, value)), None)

    def occurrences(self, g: Grounded, value: Any) -> list[Span]:
        """Every span that writes ``value``, in text order; for a string, those at word boundaries first."""
        if g.kind == "string":
            return self._string(g, value) if isinstance(value, str) else []
        if g.kind == "enum":
            return self._enum(g, value)
        if g.kind == "date":
            if self._dates is None:
                self._dates = dates_in(self.text)
            return self._labelled_first(g, value, sorted(set(self._dates.get(value, []))))
        if g.kind == "quantity":
            return self._labelled_first(g, value, quantities_in(self.text, g.units).get(value, []))
        if g.amount not in self._numbers:
            self._numbers[g.amount] = number_spans(self.text, g.amount)
        try:
            value = Decimal(str(value))
        except InvalidOperation:
            return []
        return self._labelled_first(g, value, self._numbers[g.amount].get(value, []))

    def _labelled_first(self, g: Grounded, value: Any, spans: list[Span]) -> list[Span]:
        """A field with ``labels`` took its value where a label marks it: those occurrences come first."""
        if not g.labels or not spans:
            return spans
        if g.path not in self._labelled:
            self._labelled[g.path] = written_values(g, self.text)
        first = self._labelled[g.path].get(value, [])
        return [*first, *(s for s in spans if s not in first)]

    def folded(self, g: Grounded) -> _Folded:
        key = (g.whitespace, g.case, g.drop_marks)
        if key not in self._folded:
            self._folded[key] = _Folded(self.text, *key)
        return self._folded[key]

    def _string(self, g: Grounded, value: str) -> list[Span]:
        needle = fold(value, g)
        if not needle:
            return []
        hay = self.folded(g)
        found = [(m.start(), m.start() + len(needle)) for m in re.finditer(f"(?={re.escape(needle)})", hay.text)]
        whole = [span for span in found if _whole_words(hay.text, *span)]
        return [hay.source_span(*span) for span in whole or found]

    def _enum(self, g: Grounded, member: Any) -> list[Span]:
        return sorted({m.span() for m in spellings_written(self.text, g.evidence(member), g.case)})


def _whole_words(text: str, start: int, end: int) -> bool:
    """Does ``text[start:end]`` neither begin nor end inside a word?"""
    return not (start > 0 and _word(text[start - 1]) and _word(text[start])) and not (end < len(text) and _word(text[end - 1]) and _word(text[end]))


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"
