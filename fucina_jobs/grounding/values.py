"""The numbers and dates a text writes, normalised: what grounded numbers and dates may be.

Invoices write one amount many ways (``$1,340.00``, ``1.340,00 €``,
``CHF 1'340.00``, ``(45.00)``) and one date many ways (``03.04.2025``,
``April 3, 2025``, ``3rd April 2025``). Grounding compares normalised values,
so these functions read every plausible value out of a text; where a form is
ambiguous (``1,340`` or ``03/04/2025``) every reading is kept, since the text
alone cannot say which one the writer meant.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import itertools
import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterator, Mapping, Sequence, TypeVar

from .currencies import CODES
from .number_words import WORD_VALUES, word_numbers

K = TypeVar("K")

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            "january jan januar janvier enero gennaio januari jänner janeiro stycznia styczeń",
            "february feb februar février fevrier febrero febbraio februari fevereiro lutego luty",
            "march mar märz maerz mars marzo maart março marca marzec",
            "april apr avril abril aprile kwietnia kwiecień",
            "may mai mayo maggio mei maio maj maja",
            "june jun juni juin junio giugno junho czerwca czerwiec",
            "july jul juli juillet julio luglio julho lipca lipiec",
            "august aug août aout agosto augustus augusti sierpnia sierpień",
            "september sep sept septembre septiembre settembre setembro września wrzesień",
            "october oct oktober octobre octubre ottobre outubro okt października październik",
            "november nov novembre noviembre novembro listopada listopad",
            "december dec dezember décembre decembre diciembre dicembre dezembro desember dez grudnia grudzień",
        ],
        start=1,
    )
    for name in names.split()
}
#: Where PDF text extraction glued two cells, a lower-case letter then an upper-case one: ``Invoice dateMar 3, 2025``.
_CASE_CHANGE = r"(?-i:(?<=[a-z])(?=[A-Z]))"
_MONTH = "(?P<month>" + "|".join(sorted(map(re.escape, _MONTHS), key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th|er|\.)?"
_YEAR = r"(?P<year>\d{4})"
#: 03.04.2025, 14/01/2025, 04/15/2025, 14-11-2025, 03.04.25: a date of numbers only, read day first and month first.
_NUMERIC_DATE = re.compile(r"(?<![\d.])(?P<a>\d{1,2})(?P<sep>[-/.])(?P<b>\d{1,2})(?P=sep)(?P<year>\d{4}|\d{2})(?![\d])")
#: The last month: a first number above it is a day.
_LAST_MONTH = 12
#: A two-digit year (``28 MAR 18``) is this century's: the documents are recent.
_CENTURY = 2000
_DATES = [
    # 2025-02-11, 2025/05/20, 2025.09.12
    re.compile(r"(?<!\d)(?P<year>\d{4})(?P<sep>[-/.])(?P<a>\d{1,2})(?P=sep)(?P<b>\d{1,2})(?!\d)"),
    _NUMERIC_DATE,
    # 2 October 2024, 5th September 2025, 30-Jun-2025, 25/FEB/2017, 28 MAR 18, 1. März 2025, 2 de octubre de 2025,
    # the 1st day of March, 2015
    # (a dash or slash between day and month has no spaces around it: ``July 1 - July 31, 2014`` writes no 1 July 2031)
    re.compile(rf"(?<!\d){_DAY}(?:[/-]|\s*)(?:(?:day\s+)?of\s+|de\s+)?{_MONTH}[\s,/-]*(?:de\s+)?(?P<year>\d{{4}}|\d{{2}})(?![\d:])", re.IGNORECASE),
    # October 2, 2024, Jan 7 2025, August 3 , 2014, and glued to its label: Invoice dateMar 3, 2025
    re.compile(rf"(?:(?<![^\W\d_])|{_CASE_CHANGE}){_MONTH}\s*{_DAY}\s*,?\s*{_YEAR}(?!\d)", re.IGNORECASE),
    # 2025年1月14日
    re.compile(r"(?P<year>\d{4})年(?P<a>\d{1,2})月(?P<b>\d{1,2})日"),
]


#: The texts whose dates and numbers are kept once read: a text is read again for each field, each option the
#: learner scores and each chunk's grammar, and reading it is most of what grounding costs.
TEXTS_CACHED = 2048


def dates_in(text: str, day_first: bool | None = None) -> dict[str, list[tuple[int, int]]]:
    """Every date the text writes, as ISO ``YYYY-MM-DD`` -> the spans that write it.

    A date of numbers only (``04/12/2017``) is read both ways where both are dates; ``day_first`` (True: day
    first, False: month first) keeps the one reading a locale gives, and reads the other only where that one is
    no date (``04/15/2025``). Without it, a text that writes such dates one way only where they read one way
    (``22-9-2022``: day first) is read that way throughout (``8-9-2022`` is 8 September): a document keeps
    one convention. Where it shows none, a dotted date reads day first (``01.11.2023``), as every locale
    that dots its dates writes them."""
    return dict(_dates_in(text, day_first))


@functools.lru_cache(maxsize=TEXTS_CACHED)
def _dates_in(text: str, day_first: bool | None) -> dict[str, list[tuple[int, int]]]:
    if day_first is None:
        day_first = _order_written(text)
    found: dict[str, list[tuple[int, int]]] = {}
    for pattern in _DATES:
        for m in pattern.finditer(text):
            readings = _readings(m)
            if m.re is _NUMERIC_DATE and len(readings) == 2:
                first = day_first if day_first is not None else (True if m["sep"] == "." else None)
                if first is not None:
                    readings = readings[:1] if first else readings[1:]
            for iso in readings:
                found.setdefault(iso, []).append(m.span())
    return found


def _order_written(text: str) -> bool | None:
    """True (False) where every date of numbers only that ``text`` writes and that reads one way only reads day
    (month) first; None where none does, or they disagree."""
    orders = set()
    for m in _NUMERIC_DATE.finditer(text):
        readings = _readings(m)
        if len(readings) == 1 and int(m["a"]) != int(m["b"]):
            orders.add(int(m["a"]) > _LAST_MONTH)
    return orders.pop() if len(orders) == 1 else None


def _readings(m: re.Match) -> list[str]:
    groups = m.groupdict()
    year = int(groups["year"])
    year += _CENTURY if year < 100 else 0
    if groups.get("month"):
        candidates = [(_MONTHS[groups["month"].lower()], int(groups["day"]))]
    elif m.re is _NUMERIC_DATE:
        a, b = int(groups["a"]), int(groups["b"])
        candidates = [(b, a), (a, b)]  # day-first, month-first
    else:
        candidates = [(int(groups["a"]), int(groups["b"]))]
    isos = []
    for month, day in candidates:
        try:
            isos.append(dt.date(year, month, day).isoformat())
        except ValueError:
            continue
    return list(dict.fromkeys(isos))


_NUMBER_WORD = "|".join(sorted(WORD_VALUES, key=len, reverse=True))
#: A number in words or digits, a digit copy in brackets after the words as contracts write it (``three (3)``).
_COUNT = rf"(?P<count>\d+(?:\.\d+)?|(?:{_NUMBER_WORD})(?:[- ](?:{_NUMBER_WORD}))?)(?:\s*\(\s*(?P<digits>\d+(?:\.\d+)?)\s*\))?"


def quantities_in(text: str, units: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """Every count of one of ``units`` the text writes, normalised to ``N unit`` -> the spans that write it.

    Contracts write a period in words, digits or both (``three (3) years``, ``twenty-four months``,
    ``18 months``); grounding compares the normalised form, whose unit is spelled as the text writes it
    (``1 year``, ``2 years``), lower-cased. A unit matches singular or plural."""
    if not units:
        return {}
    spelled = "|".join(sorted({form for u in units for form in (u.lower().rstrip("s"), u.lower().rstrip("s") + "s")}, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.]){_COUNT}[\s-]*(?P<unit>{spelled})(?![^\W\d_])", re.IGNORECASE)
    found: dict[str, list[tuple[int, int]]] = {}
    for m in pattern.finditer(text):
        count = m["digits"] or m["count"]
        value = Decimal(count) if count[0].isdigit() else Decimal(sum(WORD_VALUES[w] for w in re.split(r"[- ]", count.lower())))
        found.setdefault(f"{json_number(value)} {m['unit'].lower()}", []).append(m.span())
    return found


#: Signs, ``X$`` dollars, and the letter symbols that receipts print glued to the amount (``RM33.90``, ``Rp5.000``).
_CURRENCY = r"[$€£¥₹₱₩₫₺₽₪฿₦₴]|[A-Z]{1,3}\$|(?<![^\W\d_])(?:RM|Rp|Rs\.?|kr|zł|Kč|Ft)"
_NUMBER_HEAD = rf"(?P<open>\()?(?P<sign>[-−–])?\s?(?P<currency>{_CURRENCY})?\s?"
_CODE = "(?:" + "|".join(CODES) + ")"
_CODE_BEFORE = re.compile(rf"(?:\b{_CODE}|[$€£¥₹])[ \t]*\Z")  # CHF 6'750.00, €   320,00
#: How far before a number its currency code is looked for (``CHF 6'750.00``, ``€   320,00``): a code and the
#: spaces a layout puts after it (8: a three-letter code and five spaces), not a word of the label before.
_CODE_REACH = 8
_CODE_AFTER = re.compile(rf" ?(?:{_CODE}\b|[$€£¥₹])")  # 2.350,00 €, 1,450.00 CAD
#: The digits of a thousands group (``1,340``): a lone separator before this many digits may be one.
_GROUP = 3
#: Read twice: with a plain space as a thousands separator (``2 480,00``) and without (``12 30``).
_NUMBERS = [re.compile(_NUMBER_HEAD + rf"(?P<core>\d+(?:[{seps}]\d{{{_GROUP}}})*(?:[.,]\d+)?)") for seps in (",.'’\u00a0\u202f ", ",.'’\u00a0\u202f")]


def numbers_in(text: str, amounts: bool = False) -> set[Decimal]:
    """Every number the text writes, normalised; numbers inside dates and identifiers are skipped.

    Thousands separators (``,`` ``.`` ``'`` and thin spaces) and decimal commas
    are read; a lone separator before three digits (``1,340``) gives both
    readings, but for ``amounts`` the thousands one. A minus sign or parentheses make a number negative, and its
    magnitude counts too (a credit of ``-45.00`` also writes ``45``).
    ``amounts`` keeps only numbers written as money: next to a currency sign
    or code, or with two decimals, and never a percentage. Numbers written in English words count too, as
    ``number_words`` reads them (``Five Thousand Dollars``).
    """
    return set(number_spans(unicodedata.normalize("NFC", text), amounts))


def number_spans(text: str, amounts: bool = False) -> dict[Decimal, list[tuple[int, int]]]:
    """``numbers_in``'s numbers -> the spans of ``text`` that write them, in text order.

    A span is the whole written form: sign or parentheses and an adjacent currency
    sign or code included (``1.234,50 €`` for ``1234.5``, ``(45.00)`` for ``-45``).
    Offsets are into ``text`` as given (``numbers_in`` reads its NFC form)."""
    return dict(_number_spans(text, amounts))


@functools.lru_cache(maxsize=TEXTS_CACHED)
def _number_spans(text: str, amounts: bool) -> dict[Decimal, list[tuple[int, int]]]:
    masked = list(text)
    for spans in dates_in(text).values():
        for start, end in spans:
            masked[start:end] = " " * (end - start)
    text = "".join(masked)
    found: dict[Decimal, list[tuple[int, int]]] = {}
    for m in (m for pattern in _NUMBERS for m in pattern.finditer(text)):
        start, end = m.start() + len(m.group()) - len(m.group().lstrip()), m.end("core")
        if _inside_identifier(text, start, end) or (amounts and not _is_money(m, text)):
            continue
        negative = bool(m.group("sign")) or (bool(m.group("open")) and text[end : end + 1] == ")")
        span = _written_span(m, text, start, end)
        for value in _core_readings(m.group("core"), money=amounts):
            found.setdefault(value, []).append(span)
            if negative and value:
                found.setdefault(-value, []).append(span)
    for number, spans in word_numbers(text, amounts).items():
        found.setdefault(Decimal(number), []).extend(spans)
    return {value: sorted(set(spans)) for value, spans in found.items()}


def _written_span(m: re.Match, text: str, start: int, end: int) -> tuple[int, int]:
    """The number's written form: its head and core, a closing parenthesis, a currency code before or after it."""
    if m.group("open") and text[end : end + 1] == ")":
        end += 1
    before = None if m.group("currency") else _CODE_BEFORE.search(text, max(0, start - _CODE_REACH), m.start("core"))
    after = _CODE_AFTER.match(text, end) if not (m.group("currency") or before) else None
    return (min(start, before.start()) if before else start), (after.end() if after else end)


def _is_money(m: re.Match, text: str) -> bool:
    after = text[m.end("core") :]
    if re.match(r"\s?%", after):
        return False
    marked = m.group("currency") or _CODE_BEFORE.search(text, 0, m.start("core")) or _CODE_AFTER.match(after)
    return bool(marked or re.search(r"[.,]\d{2}$", m.group("core")))


def _inside_identifier(text: str, start: int, end: int) -> bool:
    """Is ``text[start:end]`` part of a word or a code such as ``BWS-2025-0147`` or ``M8``?"""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if before.isalnum() or before in "_#" or after.isalpha() or after == "_":
        return True
    if before in "-/" and start > 1 and text[start - 2].isalnum():
        return True
    return after in "-/" and end + 1 < len(text) and text[end + 1].isalnum()


def _core_readings(core: str, money: bool = False) -> list[Decimal]:
    """The values ``core`` may write; ``money``: a lone separator before three digits is a thousands separator
    (``¥416,000``), as money is written with two decimals or none (dinars' three are the rare exception)."""
    core = re.sub(r"['’\s]", "", core)
    separators = [c for c in core if c in ",."]
    if not separators:
        return [Decimal(core)]
    last = separators[-1]
    if len(set(separators)) == 2:  # 1,340.00 or 2.350,00: the last one is the decimal point
        whole, _, fraction = core.rpartition(last)
        return [Decimal(re.sub(r"[,.]", "", whole) + "." + fraction)]
    if len(separators) > 1:  # 1,234,567: thousands only
        return [Decimal(core.replace(last, ""))]
    whole, _, fraction = core.partition(last)
    decimal = Decimal(whole + "." + fraction)
    if len(fraction) == _GROUP:
        return [Decimal(whole + fraction)] if money else [decimal, Decimal(whole + fraction)]
    return [decimal]


def labelled(
    found: Mapping[K, list[tuple[int, int]]], text: str, labels: Sequence[str], rivals: Sequence[str] = ()
) -> dict[K, list[tuple[int, int]]]:
    """The values of ``found`` (value -> its spans in ``text``) that ``text`` writes after one of ``labels``, with those spans.

    A label marks the first value written after it on its own line, but a rate's base (``Tax 15% on $ 100.00
    $ 15.00`` marks 15.00). Where the rest of that line writes none, it
    marks one below it, read the way OCR and PDF text lay out a form (``_below``). Labels match whole words, in any
    case, across any spaces, and not inside a longer one of ``rivals`` (``_label_matches``)."""
    starts: dict[int, list[tuple[K, tuple[int, int]]]] = {}
    for value, spans in found.items():
        for span in spans:
            starts.setdefault(span[0], []).append((value, span))
    lines = _form_lines(text, starts)
    firsts = [line.start for line in lines]
    read = [line for line in lines if line.kind != "blank"]
    places = {line.start: n for n, line in enumerate(read)}
    marked: dict[K, list[tuple[int, int]]] = {}
    for first, end in _label_matches(text, labels, rivals):
        line = lines[bisect.bisect_right(firsts, first) - 1]
        own = [s for s in line.values if s >= end and not _BASE.search(text, line.start, s)]
        if own or line.start not in places:
            start = own[0] if own else None
        else:
            start = _below(read, places[line.start], text, (first, end))
        for value, span in starts.get(start, []):
            marked.setdefault(value, []).append(span)
    return marked


#: A rate's base before a value (``Tax 15% on $ 100.00  $ 15.00``, ``19,0% MwSt. aus 200,00 €  38,00 €``: the rate
#: applies to 100.00 and 200.00; the tax is the other value).
_BASE = re.compile(r"\d\s?%[^\n]*?(?<![^\W\d_])(?:on|of|over|sur|auf|aus|von|su|sobre|de|op|od)\s*\Z", re.IGNORECASE)


@dataclass(frozen=True)
class _Line:
    start: int
    values: tuple[int, ...]  # where the values it writes start
    kind: str  # text (no value), value (values and at most ``_VALUE_LETTERS`` letters beside them), mixed, or blank


#: A line of values may write this many letters beside them and still be one: a currency (``RM``) or a tax code (``SR``).
_VALUE_LETTERS = 3


#: A line of marks, or of a currency alone (``:``, ``RM``), which OCR splits off between a label and its value.
_BLANK_LINE = re.compile(rf"[\W_]*(?:(?:{_CURRENCY}|{_CODE})[\W_]*)?")


def _form_lines(text: str, starts: Mapping[int, list[tuple[Any, tuple[int, int]]]]) -> list[_Line]:
    order = sorted(starts)
    lines, offset = [], 0
    for line in text.split("\n"):
        end = offset + len(line)
        values = tuple(order[bisect.bisect_left(order, offset) : bisect.bisect_left(order, end)])
        beside = list(line)
        for s in values:
            stop = max(span[1] for _, span in starts[s])
            beside[s - offset : stop - offset] = " " * (min(stop, end) - s)
        letters = sum(c.isalpha() for c in beside)
        kind = ("value" if letters <= _VALUE_LETTERS else "mixed") if values else ("blank" if _BLANK_LINE.fullmatch(line) else "text")
        lines.append(_Line(offset, values, kind))
        offset = end + 1
    return lines


def _below(read: list[_Line], n: int, text: str, label: tuple[int, int]) -> int | None:
    """Where the value starts that a label (at ``label`` in ``text``) marks below it, on ``read[n]`` (the text's
    lines but its blank ones); None where it marks none.

    - A label and its value side by side often come out as lines of their own (``TOTAL:`` then ``25.75``; or
      ``TOTAL``, ``:``, ``RM``, ``73.00``): the label marks the first value of the next line, blank lines passed over.
      Where both lines are laid out in columns (``COLUMN_GAP``), as a PDF's text keeps a table's
      header above its row, the label marks what that line writes in its column (``_in_column``).
    - A table of labels and amounts comes out as a column of labels, then a column of values (``TOTAL``, ``CASH``,
      ``CHANGE``, then ``12.30``, ``20.00``, ``7.70``): a label in such a column marks the value in its place,
      counted from the columns' ends, since lines above the labels (an item's name) often join their column
      (docs/history/ACCURACY.md measures what this found and lost).
    """
    first = last = n
    if read[n].kind == "text":
        while first > 0 and read[first - 1].kind == "text":
            first -= 1
        while last + 1 < len(read) and read[last + 1].kind == "text":
            last += 1
    below = read[last + 1 :]
    values = len(list(itertools.takewhile(lambda line: line.kind == "value", below)))
    if 0 < values <= last - first + 1:
        place = n - last + values - 1  # counted from the ends
        return below[place].values[0] if place >= 0 else None
    if n != last or not below or not below[0].values:
        return None
    return _in_column(text, read[n], below[0], label)


#: The fewest spaces between two words that part two columns: one or two sit between the words of one cell
#: (justified text, a sentence's end), a layout puts more between a PDF's columns (OCR writes none).
GAP_SPACES = 3
#: A column gap inside a line of laid-out text: ``GAP_SPACES`` spaces or more between two words.
COLUMN_GAP = re.compile(rf"(?<=\S) {{{GAP_SPACES},}}(?=\S)")


def _in_column(text: str, header: _Line, row: _Line, label: tuple[int, int]) -> int | None:
    """The value of ``row`` below the ``label`` on ``header``, two lines laid out in columns: the word of ``row``
    that overlaps the label's columns, else the one nearest them (``Invoice Date:  Due Date:`` above ``03/02/2025
    04/01/2025``; ``Tax`` above ``12.50`` beside ``10.00%`` below ``Tax(%)``). Where that word is no value but
    writes a digit (a rate, a quantity), the label marks none; otherwise, as for lines not laid out, the row's
    first value."""
    head, line = (text[x.start : _line_end(text, x.start)] for x in (header, row))
    if not (COLUMN_GAP.search(head) and COLUMN_GAP.search(line)):
        return row.values[0]
    left, right = label[0] - header.start, label[1] - header.start
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", line)]
    start, end = min(words, key=lambda w: (not (w[0] < right and left < w[1]), abs(w[0] + w[1] - left - right)))
    value = next((v for v in row.values if start <= v - row.start < end), None)
    if value is None and any(c.isdigit() for c in line[start:end]):
        return None
    return value if value is not None else row.values[0]


def after_labels(text: str, labels: Sequence[str], rivals: Sequence[str] = ()) -> list[int]:
    """Where the first word after each of ``labels`` in ``text`` starts (past the marks and spaces that follow a
    label: ``Bill to:`` then a line break, ``Invoice #: 2025-044``), in text order; not inside one of ``rivals``.
    Where the label's line and the next one are laid out in columns, the cell below it starts one too: invoices
    print ``Bill To:  Ship To:`` above ``Jane Roe  Acme Store``."""
    if not labels:
        return []
    starts = set()
    for first, end in _label_matches(text, labels, rivals):
        starts.add(re.compile(r"[\W_]*").match(text, end).end())
        starts.add(_cell_below(text, first, end))
    return sorted(start for start in starts if start is not None and start < len(text))


def _cell_below(text: str, first: int, end: int) -> int | None:
    """Where the cell of the next line that holds anything starts below ``text[first:end]`` (a run of words with
    single spaces that overlaps its columns), both lines laid out in columns; None where there is none."""
    head_start = text.rfind("\n", 0, first) + 1
    head_end = _line_end(text, end)
    row_start = head_end + 1
    while row_start < len(text) and not text[row_start : _line_end(text, row_start)].strip():
        row_start = _line_end(text, row_start) + 1
    row = text[row_start : _line_end(text, row_start)]
    if not (COLUMN_GAP.search(text[head_start:head_end]) and COLUMN_GAP.search(row)):
        return None
    left, right = first - head_start, end - head_start
    return next((row_start + m.start() for m in re.finditer(r"\S+(?: \S+)*", row) if m.start() < right and left < m.end()), None)


#: Label readings kept: one per row (every field of a schema reads the same labels, its own and its rivals'), read
#: again by the row's spans and repairs after its grammar; 64 covers a replica's rows in flight (``engine.streams``,
#: 4 by default) many times over, and ``learn``'s label candidates, one pattern each.
_CACHED = 64


def _label_matches(text: str, labels: Sequence[str], rivals: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Where (start, end) ``text`` writes one of ``labels``, but not as a part of a longer one of ``rivals``, the
    other fields' labels: ``Due Date`` is the due date's label, and its ``Date`` labels no issue date. The
    longest label written at a place is the one read there."""
    own = {_spelled_label(label) for label in labels}
    return ((start, end) for start, end, label in _written_labels(text, tuple(sorted({*labels, *rivals}))) if label in own)


@functools.lru_cache(maxsize=_CACHED)
def _written_labels(text: str, labels: tuple[str, ...]) -> tuple[tuple[int, int, str], ...]:
    """Every place ``text`` writes one of ``labels``, and which: every field of a schema reads the same labels
    (its own and its rivals'), and a row's grammar, spans and repairs read them again."""
    return tuple((m.start(), m.end(), _spelled_label(m.group())) for m in _label_pattern(labels).finditer(text))


def _spelled_label(written: str) -> str:
    return " ".join(written.lower().split())


@functools.lru_cache(maxsize=_CACHED)
def _label_pattern(labels: tuple[str, ...]) -> re.Pattern:
    """Labels as whole words: no letter glued to a label's ends, where its end is a letter (``Invoice #HP-55021``),
    but a value glued on where the case changes (``_CASE_CHANGE``)."""
    alternatives = []
    for label in sorted(labels, key=len, reverse=True):
        words = r"[^\S\n]+".join(map(re.escape, label.split()))
        alternatives.append(
            (r"(?<![^\W\d_])" if label.strip()[0].isalpha() else "")
            + words
            + (rf"(?:(?![^\W\d_])|{_CASE_CHANGE})" if label.strip()[-1].isalpha() else "")
        )
    return re.compile("|".join(alternatives), re.IGNORECASE)


def json_number(value: Decimal) -> str:
    """The one JSON spelling of a number: integers without a point, no trailing zeros, no exponent."""
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def normalize_whitespace(text: str) -> str:
    """Runs of whitespace (line breaks included) become one space: a name broken over two lines is still one name."""
    return " ".join(text.split())


def _line_end(text: str, at: int) -> int:
    """Where the line that holds offset ``at`` ends: its line break, or the text's end."""
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def normalized_offsets(text: str) -> list[int]:
    """For each offset of ``text``, where it lands in ``normalize_whitespace(text)`` (a run of whitespace: on the
    next word)."""
    offsets, at, pending = [], 0, False
    for c in text:
        if c.isspace():
            pending = pending or at > 0
        else:
            at += pending
            pending = False
        offsets.append(at)
        at += not c.isspace()
    return offsets + [at]


def written(text: str, spellings: tuple[str, ...], case: str = "exact") -> bool:
    """Does the text write any of ``spellings`` (``spellings_written``)?"""
    return next(spellings_written(text, spellings, case), None) is not None


def spellings_written(text: str, spellings: tuple[str, ...], case: str = "exact") -> Iterator[re.Match]:
    """Where the text writes one of ``spellings`` with no letter glued to it (``C$`` is not ``$``; any ``case`` but
    ``exact``: in any case), spelling by spelling."""
    flags = re.IGNORECASE if case != "exact" else 0
    return (m for s in spellings for m in re.finditer(rf"(?<![^\W\d_]){re.escape(s)}(?![^\W\d_])", text, flags))
