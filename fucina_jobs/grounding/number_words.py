"""Numbers written in English words: ``Five Thousand Dollars``, ``one hundred and twenty-five thousand``.

Why: contracts and letters write amounts and periods in words, often with no figure beside them (``a fee of
Twenty-Five Thousand Dollars``, ``within thirty days``); a grounded number field must be able to take such a
value, and ``learn`` must find its gold where the text writes it so. Prose writes small numbers in words all the
time (``one of the parties``, ``a copy``), so a run of words counts as a number only where it holds a tens or a
scale word (``twenty``, ``hundred``, ``thousand``) or a currency's name or code stands beside it (``five
dollars``, ``USD five``); as money (``amount``), only where a currency does, as a figure counts as money only
where it is marked as money. An ordinal (``twenty-fifth``) or a word glued to another by a hyphen
(``forty-hour``) is no number.
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple

from .currencies import CODES, NAMES

__all__ = ["WORD_VALUES", "word_numbers"]

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
#: A word -> the number it writes, below a hundred: units and teens, then the tens.
WORD_VALUES: dict[str, int] = {w: n for n, w in enumerate(_UNITS.split())} | {
    w: 10 * n for n, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)
}
#: Why these four: the scales contracts write amounts with; beyond a billion, figures.
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9}
#: Why 20: the first word that is no unit or teen; a run with one is no lone ``one`` of prose.
_TENS = 20
_WORD = re.compile(r"(?<!\w)(?:" + "|".join(sorted([*WORD_VALUES, *_SCALES, "and", "a"], key=len, reverse=True)) + r")(?!\w)", re.IGNORECASE)
#: What may stand between two words of one number: spaces or a hyphen (``twenty-five``, ``Twenty Five``).
_GAP = re.compile(r"\s+|[^\S\n]*-[^\S\n]*")
#: Codes in capitals only (``TRY`` is a currency, ``try`` a word); names in any case.
_CURRENCY = "(?-i:" + "|".join(CODES) + ")|" + "|".join(sorted({n for names in NAMES.values() for n in names}, key=len, reverse=True))
#: A currency's name or code after a number (``Dollars``, ``euros``, ``USD``), or before it (``Rupees``, ``USD``).
_AFTER = re.compile(rf"\s+(?:{_CURRENCY})(?![^\W\d_])", re.IGNORECASE)
#: Why 24: how far before a number its currency is looked for, the longest name (``pounds sterling``) and the
#: spaces a layout puts after it.
_CURRENCY_REACH = 24
_BEFORE = re.compile(rf"(?<![^\W\d_])(?:{_CURRENCY})\s+\Z", re.IGNORECASE)
#: A letter glued by a hyphen to a number's first or last word: ``twenty-fifth``, ``forty-hour``.
_HYPHENED_AFTER = re.compile(r"-[^\W\d_]")
_HYPHENED_BEFORE = re.compile(r"[^\W\d_]-\Z")


class _Word(NamedTuple):
    text: str  # lower case
    start: int
    end: int


class _Number:
    """One number being read word by word: what the words so far add up to, and what the last one was."""

    def __init__(self, first: _Word):
        self.total = self.current = 0
        self.scale: int | None = None  # the last scale of a thousand or more: the next one must be smaller
        self.last = ""  # "unit", "tens", "hundred", "scale", "and" or "a"
        self.start, self.end, self.big = first.start, first.start, False
        self.take(first)

    def takes(self, word: str) -> bool:
        """May ``word`` come next in this number (``one hundred and`` takes ``five``; ``twenty`` takes no ``thirty``)?"""
        if word in WORD_VALUES:
            n = WORD_VALUES[word]
            after_unit = self.last == "tens" and 0 < n < 10
            return n > 0 and (self.last in ("hundred", "scale", "and") or after_unit)
        if word == "hundred":
            return self.last in ("unit", "tens", "a") and 0 < self.current < 100
        if word in _SCALES:
            smaller = self.scale is None or _SCALES[word] < self.scale
            return self.last in ("unit", "tens", "hundred", "a") and 0 < self.current and smaller
        return word == "and" and self.last in ("hundred", "scale")

    def take(self, w: _Word) -> None:
        if w.text in WORD_VALUES:
            n = WORD_VALUES[w.text]
            self.current += n
            self.last, self.big = ("tens", True) if n >= _TENS else ("unit", self.big)
        elif w.text == "hundred":
            self.current *= _SCALES["hundred"]
            self.last, self.big = "hundred", True
        elif w.text in _SCALES:
            self.scale = _SCALES[w.text]
            self.total, self.current = self.total + self.current * self.scale, 0
            self.last, self.big = "scale", True
        elif w.text == "a":
            self.current, self.last = 1, "a"
        else:
            self.last = "and"
        if w.text not in ("and", "a"):
            self.end = w.end

    @property
    def value(self) -> int | None:
        """The number the words write; None where they write none (an ``a`` alone)."""
        return None if self.end == self.start else self.total + self.current


def word_numbers(text: str, money: bool = False) -> dict[int, list[tuple[int, int]]]:
    """Every number ``text`` writes in English words -> the spans that write it (a currency's name or code beside
    it included, as a figure's span takes its currency code), in text order. ``money``: only those a currency marks."""
    found: dict[int, list[tuple[int, int]]] = {}
    for number in _read(text):
        if _HYPHENED_BEFORE.search(text, 0, number.start) or _HYPHENED_AFTER.match(text, number.end):
            continue
        before = _BEFORE.search(text, max(0, number.start - _CURRENCY_REACH), number.start)
        after = _AFTER.match(text, number.end)
        if before or after or (number.big and not money):
            found.setdefault(number.value, []).append((before.start() if before else number.start, after.end() if after else number.end))
    return found


def _read(text: str) -> Iterator[_Number]:
    """The runs of number words in ``text``, each read as one number as far as the words go on writing it (``five
    six`` is two numbers); the numbers that write nothing (an ``a`` alone) left out."""
    number: _Number | None = None
    previous_end = -1
    for m in _WORD.finditer(text):
        word = _Word(m.group().lower(), m.start(), m.end())
        joined = number is not None and _GAP.fullmatch(text, previous_end, word.start) is not None
        if number is not None and joined and number.takes(word.text):
            number.take(word)
        else:
            if number is not None and number.value is not None:
                yield number
            starts = word.text in WORD_VALUES or word.text == "a"
            number = _Number(word) if starts else None
        previous_end = word.end
    if number is not None and number.value is not None:
        yield number
