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

Where the text writes a value more than once, the span is the first
occurrence, in text order (for strings the first that starts and ends at
word boundaries, as the grammar copies whole words, else the first at all).
Neither engine can tell which occurrence it copied: the grammar admits a
string as any run of the text's words and a number as any of the spellings
the text writes, with no position attached. A value the text does not write
(one of ``allow``, such as a tax of ``0``) has no span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Iterator

from .declaration import Grounded
from .values import dates_in, number_spans, numbers_in

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
        for path, value in _indexed(record, g.path, ""):
            if value is not None:
                yield path, g, value


def _indexed(value: Any, path: tuple[str, ...], prefix: str) -> Iterator[tuple[str, Any]]:
    if not path:
        yield prefix, value
        return
    head, rest = path[0], path[1:]
    if head == "[]":
        for i, item in enumerate(value if isinstance(value, list) else []):
            yield from _indexed(item, rest, f"{prefix}[{i}]")
    elif isinstance(value, dict) and head in value:
        yield from _indexed(value[head], rest, f"{prefix}.{head}" if prefix else head)


def value_spans(record: Any, fields: list[Grounded], text: str) -> dict[str, Span]:
    """Each grounded value's span in ``text``, by path; a value the text does not write has none."""
    source = _Source(text)
    spans = {}
    for path, g, value in grounded_leaves(record, fields):
        span = source.find(g, value)
        if span is not None:
            spans[path] = span
    return spans


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
    try:
        return Decimal(str(value)) in numbers_in(written, g.amount)
    except InvalidOperation:
        return False


def fold(text: str, g: Grounded) -> str:
    """``text`` the way ``g`` compares it: whitespace runs as one space (``normalize``), casefolded (``insensitive``)."""
    return _Folded(text, g.whitespace, g.case).text


class _Folded:
    """A text folded for comparison, with the source index of every folded character."""

    def __init__(self, text: str, whitespace: str, case: str):
        chars: list[str] = []
        where: list[int] = []
        for i, char in enumerate(text):
            if whitespace == "normalize" and char.isspace():
                if chars and chars[-1] != " ":
                    chars.append(" ")
                    where.append(i)
                continue
            for c in char.casefold() if case == "insensitive" else char:
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
        self._folded: dict[tuple[str, str], _Folded] = {}
        self._numbers: dict[bool, dict[Decimal, list[Span]]] = {}
        self._dates: dict[str, list[Span]] | None = None

    def find(self, g: Grounded, value: Any) -> Span | None:
        if g.kind == "string":
            return self._string(g, value) if isinstance(value, str) else None
        if g.kind == "enum":
            return self._enum(g, value)
        if g.kind == "date":
            if self._dates is None:
                self._dates = dates_in(self.text)
            return min(self._dates.get(value, []), default=None)
        if g.amount not in self._numbers:
            self._numbers[g.amount] = number_spans(self.text, g.amount)
        try:
            return min(self._numbers[g.amount].get(Decimal(str(value)), []), default=None)
        except InvalidOperation:
            return None

    def folded(self, g: Grounded) -> _Folded:
        key = (g.whitespace, g.case)
        if key not in self._folded:
            self._folded[key] = _Folded(self.text, *key)
        return self._folded[key]

    def _string(self, g: Grounded, value: str) -> Span | None:
        needle = fold(value, g)
        if not needle:
            return None
        hay = self.folded(g)
        first = None
        for m in re.finditer(f"(?={re.escape(needle)})", hay.text):
            start, end = m.start(), m.start() + len(needle)
            if _whole_words(hay.text, start, end):
                return hay.source_span(start, end)
            first = first if first is not None else (start, end)
        return hay.source_span(*first) if first is not None else None

    def _enum(self, g: Grounded, member: Any) -> Span | None:
        flags = re.IGNORECASE if g.case == "insensitive" else 0
        found = [m.span() for s in g.evidence(member) for m in re.finditer(rf"(?<![^\W\d_]){re.escape(s)}(?![^\W\d_])", self.text, flags)]
        return min(found, default=None)


def _whole_words(text: str, start: int, end: int) -> bool:
    """Does ``text[start:end]`` neither begin nor end inside a word?"""
    return not (start > 0 and _word(text[start - 1]) and _word(text[start])) and not (end < len(text) and _word(text[end - 1]) and _word(text[end]))


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"
