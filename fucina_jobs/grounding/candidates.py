"""A grounded field's candidates in a text: the values and spans its options let it take, pure of any grammar.

Text + a field (``Grounded``) -> the numbers, dates, members, words and runs of words or lines the field may hold,
as the grammar offers them: ``candidates`` and ``preferred`` (numbers, dates, quantities), ``members`` (enums),
``words`` (``span: word``), ``labelled_runs``, ``labelled_values``, ``known_spans`` and ``line_starts`` (runs of
words), ``line_run_starts``, ``text_lines`` and ``line_runs`` (runs of lines), less what ``shape`` refuses (``shaped``,
``refused_runs``). ``grammar.py`` writes them as Lark;
``learn`` scores options by what they leave here. Nothing here knows Lark, models or jobs.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import re
import unicodedata
from decimal import Decimal
from typing import Any, Iterable, Iterator, NamedTuple

from .declaration import Grounded, whole_words
from .values import (
    COLUMN_GAP,
    after_labels,
    dates_in,
    json_number,
    labelled,
    normalize_whitespace,
    normalized_offsets,
    number_spans,
    quantities_in,
    written,
)

__all__ = [  # what learn and the grammar read: a field's values, words, runs of words and runs of lines in a text
    "LEAST_CHARS",
    "RUN_LINES",
    "candidates",
    "escaped",
    "known_spans",
    "known_written",
    "labelled_runs",
    "labelled_values",
    "line_run_starts",
    "line_runs",
    "line_starts",
    "members",
    "offered_values",
    "preferred",
    "refused_runs",
    "shaped",
    "text_lines",
    "word_chunks",
    "words",
    "written_values",
]

#: With ``includes``, ``ends_on`` or ``lines.first``, the most lines a run of lines (``span: lines``) takes past the
#: line it must reach (the one that writes the word, or its first line), and the farthest an included line may be from its start.
#: Why 7: a postal address or a company's block spans a handful of lines, its postcode or legal form on one of them;
#: 7 leaves room for a longer block, and every line of reach is one more nested optional piece in the grammar, for
#: each start.
RUN_LINES = 7

#: What a line that ``cut_before`` cuts loses at its new end, besides spaces: the marks that opened what was cut.
_CUT_ENDS = " \t([{-,:;/#"

#: A cut line keeps at least this many characters, or nothing: a letter or a mark alone (``T:`` before a phone
#: number) is no value.
_LEAST_KEPT = 2

#: With ``labels``, the most characters a run of words after a label takes where the string has no ``maxLength``.
#: Why 80: one line of a printed page. A value a label marks (a name, a place, a period) is written on the label's
#: line or the next, and each character more is one more piece of the run the grammar spells out.
LABELLED_CHARS = 80

#: A line break between two words (``within_line`` stops a run of words at it).
LINE_BREAK = re.compile(r"(?<=\S)[^\S\n]*\n\s*(?=\S)")

#: With ``most_words``, a run's last word may still take its own period (``Inc.``): it belongs to the word.
_OWN_PERIOD = "."

#: A run's first letter or digit, past the marks that open it (``“Acme``): ``capitalized`` reads its case.
_FIRST_CHARACTER = re.compile(r"[\W_]*([^\W_])")

#: A grounded string is never empty: the least characters it takes where the schema says fewer or nothing.
LEAST_CHARS = 1

#: A rounding line, in the languages of receipts (``ROUNDING ADJ``, ``Rundung``, ``arrondi``, ``redondeo``, ``öresavrundning``).
_ROUNDING = re.compile(r"(?i)\b(round|rundung|gerundet|arrondi|redondeo|arrotond|afrond)|avrundning")

#: Escapes stay whole, so a span never ends inside ``\\"`` and breaks the JSON string.
_CHUNK = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\w+|\s|.", re.DOTALL)

#: Marks that join the parts of one word (``K.K.``, ``3-8-2``, ``O'Brien``, ``A/C``, ``AT&T``): a run of words
#: neither starts nor ends between them (``Acme Tool Works K.`` is no value).
_JOIN = re.compile(r"[.\-/'&]")


def candidates(g: Grounded, text: str) -> list[str]:
    """The JSON spellings of the numbers, dates or quantities ``text`` writes that the field's schema _admits (of a
    number's, those its ``shape`` fits, where any does: ``shaped``), and its ``allow`` values."""
    if g.kind in ("date", "quantity"):
        return sorted(_spelled(g, set(written_values(g, text)) | set(g.allow)))
    values = set(shaped(g, list(written_values(g, text)))) | {Decimal(str(v)) for v in g.allow}
    return sorted(_spelled(g, (v for v in values if _admits(g, v))), key=lambda s: (len(s), s))


def shaped(g: Grounded, values: list[Any]) -> list[Any]:
    """Of the values a field's text writes, those its ``shape`` fits; all of them where it fits none, so that a shape
    learned from a few gold rows never leaves a field less than the text gave it (a soft filter)."""
    if not g.shape:
        return values
    return [v for v in values if g.shape.fits(v)] or values


def refused_runs(g: Grounded, text: str) -> list[str]:
    """The runs of words after a label (``labelled_values``) or of lines (``line_runs``, where ``line_run_starts``
    narrows) that the grammar lists and the field's ``shape`` refuses, as the grammar writes them, where it fits
    another; the grammar takes them away. [] for runs it does not list: a free run of words is any of the text's."""
    if not g.shape:
        return []
    if g.span == "lines":
        starts = line_run_starts(g, *text_lines(text, g))
        offered = [recase(json.loads(run)) for run in line_runs(g, text) for recase in g.recasings] if starts else []
    else:
        offered = sorted(labelled_values(g, text) or ()) if not known_spans(g, text) else []
    kept = shaped(g, offered)
    return [] if kept is offered else [run for run in offered if run not in kept]


def written_values(g: Grounded, text: str) -> dict[Any, list[tuple[int, int]]]:
    """The numbers (dates, counts) the text writes that a number (date, count) field _admits -> their spans; with
    ``labels``, only the labelled ones, where the text labels any (with ``only_labelled``, none where it labels
    none, or where there are no labels). Offsets are into the NFC form of ``text``."""
    found, text = _found(g, text)
    marked = labelled(found, text, g.labels, g.rivals) if g.labels else {}
    return marked or ({} if g.only_labelled else found)


def _found(g: Grounded, text: str) -> tuple[dict[Any, list[tuple[int, int]]], str]:
    """Every number (date) the text writes that the field _admits -> its spans, and the text they are in (NFC)."""
    if g.kind == "date":
        return dates_in(text, g.day_first), text
    if g.kind == "quantity":
        return quantities_in(text, g.units), text
    text = unicodedata.normalize("NFC", text)
    return {v: spans for v, spans in number_spans(text, g.amount).items() if _admits(g, v)}, text


def _spelled(g: Grounded, values: Iterable[Any]) -> set[str]:
    return {json.dumps(v) if g.kind in ("date", "quantity") else json_number(v) for v in values}


def preferred(g: Grounded, values: list[str], text: str) -> list[str]:
    """Of a number or date field's candidates left (JSON spellings), the ones its grammar holds: none of its
    ``allow`` values where its ``labels`` mark a value the text writes (a tax of 0 is for an invoice that labels
    no tax, not for one that writes ``VAT 21% € 42,00``); those that a label of weight 2 marks, where any is
    left (a receipt's ``TOTAL ROUNDED`` below its ``TOTAL``); with ``rounding``, where the text writes a rounding
    line, none that a multiple of the step left is within a step of (``12.47`` beside ``12.45``: cash paid is
    rounded); of those, with ``pick``, the largest (smallest) alone, the latest (earliest) of dates. All are preferences, not facts: a rule's repair
    excludes the value held where it breaks a rule (an items total written before a discount), and the next
    one is held then, an allowance last."""
    found, text = _found(g, text) if (g.allow and g.labels) or g.preferred_labels else ({}, text)
    if g.allow and g.labels:
        marked = _spelled(g, labelled(found, text, g.labels, g.rivals))
        values = [v for v in values if v in marked] or values
    if g.preferred_labels:
        marked = _spelled(g, labelled(found, text, g.preferred_labels, g.rivals))
        values = [v for v in values if v in marked] or values
    if g.rounding and _ROUNDING.search(text):
        values = _rounded(values, g.rounding)
    key = str if g.kind == "date" else Decimal
    if values and g.pick:
        return [max(values, key=key) if g.pick == "largest" else min(values, key=key)]
    return values


def _rounded(values: list[str], step: Decimal) -> list[str]:
    """``values`` less those a multiple of ``step`` among them is within a step of (an amount before its rounding)."""
    multiples = [Decimal(v) for v in values if Decimal(v) % step == 0]
    return [v for v in values if Decimal(v) % step == 0 or not any(abs(m - Decimal(v)) < step for m in multiples)]


def words(g: Grounded, text: str, narrowed: bool = False) -> list[str]:
    """The distinct words of ``text`` (``span: word``) that fit the string's length bounds (and ``shape``: ``shaped``), in order: each a
    maximal run without whitespace, less the punctuation marks at its ends (``(HP-55021),`` is ``HP-55021``);
    ``narrowed``: of those that match ``includes``, where the text writes such words, the ones right after a
    label, where there are any. A label may end inside a word (``Facture n°10042``): the rest is the word."""
    low, high = g.schema.get("minLength", LEAST_CHARS), g.schema.get("maxLength", len(text))
    recase = g.recasings

    def fits(found: Iterable[str]) -> list[str]:
        return [w for w in dict.fromkeys(f(word) for word in found for f in recase) if w and low <= len(w) <= high]

    fitting = fits(_strip_marks(w) for w in text.split())
    if not narrowed:
        return shaped(g, fitting)
    labelled = fits(_strip_marks(text[start:].split()[0]) for start in after_labels(text, g.labels, g.rivals))
    if _writes_included(g, text):
        fitting, labelled = ([w for w in found if _writes_included(g, w)] for found in (fitting, labelled))
    return shaped(g, labelled) or ([] if g.only_labelled else shaped(g, fitting))


class _Start(NamedTuple):
    """A run of lines while ``line_run_starts`` narrows: its first line, the line it must reach, the last it may reach,
    whether it holds an included line, whether it ends on an ending line, and where its block ends."""

    first: int
    least: int
    most: int
    holds: bool
    ends: bool
    block: int


def line_run_starts(g: Grounded, lines: list[str], cut: list[bool]) -> list[tuple[int, int, int]] | None:
    """The runs of whole lines that ``includes``, ``ends_on``, ``lines.first``, ``to_block_end`` and ``starts_on``
    allow, as (first line, the line it must reach, the last line it may reach); None where they narrow nothing.
    ``includes`` (``ends_on``) narrows only where a start that ``lines.first`` allows reaches (ends on) such a line
    within the string's ``maxLength``. No run goes past a line of only marks or a line that ``cut_before`` cut
    (``cut``): that is where a run's block ends, and with ``to_block_end`` a run not held by ``ends_on`` reaches it,
    where it can. With ``starts_on``, a block's runs start on its first start that writes such a word."""
    if g.includes is None and g.lines.ends_on is None and g.lines.first is None and not g.lines.to_block_end and g.lines.starts_on is None:
        return None
    joiner, high = " " if g.whitespace == "normalize" else "\n", g.schema.get("maxLength")

    def fits(a: int, b: int) -> bool:  # lines a..b joined, within maxLength
        return high is None or len(escaped(joiner.join(lines[a : b + 1]))) <= high

    marks = [not any(c.isalnum() for c in line) for line in lines]
    included, ending = g.included(), whole_words(g.lines.ends_on)
    starts: list[_Start] = []
    for first in range(min(len(lines), g.lines.first or len(lines))):
        if marks[first] or not fits(first, first):
            continue
        end = next((i for i in range(first + 1, len(lines)) if marks[i] or cut[i - 1]), len(lines))  # the run's block
        reach = range(first, min(end, first + 1 + RUN_LINES))
        holds = [k for k in reach if included is not None and included.search(lines[k]) and fits(first, k)]
        least = holds[0] if holds else first
        most = min(end - 1, least + RUN_LINES)
        ends = [k for k in range(least, most + 1) if ending is not None and ending.search(lines[k]) and fits(first, k)]
        if g.lines.to_block_end and not ends and end - 1 <= most and fits(first, end - 1):
            least = end - 1  # the run must reach its block's last line
        starts += [_Start(first, k, k, bool(holds), True, end) for k in ends] or [_Start(first, least, most, bool(holds), False, end)]
    for narrows, pattern in (("holds", included), ("ends", ending)):
        if pattern is not None and any(getattr(s, narrows) for s in starts):
            starts = [s for s in starts if getattr(s, narrows)]
    if g.lines.shortest and ending is not None:
        starts = _shortest(starts, lines, ending)
    if g.lines.starts_on is not None:
        starts = _first_in_block(starts, lines, whole_words(g.lines.starts_on))
    if g.lines.first is None and not g.lines.to_block_end and g.lines.starts_on is None and not any(s.holds or s.ends for s in starts):
        return None  # includes or ends_on alone, and no run can hold such a line: every run
    return [(s.first, s.least, s.most) for s in starts] or None


#: The most lines a value ``line_runs`` lists joins: a run longer than a letterhead's block is no field's value.
RUN_MOST_LINES = 8


def line_runs(g: Grounded, text: str) -> Iterator[str]:
    """Every run of up to ``RUN_MOST_LINES`` whole lines that fits the field's length bounds and that ``includes``,
    ``ends_on``, ``lines.first`` and ``cut_before`` allow, as a JSON string: the values a ``span: lines`` field
    may take, listed (``learn`` weighs them)."""
    lines, cut = text_lines(text, g)
    starts = line_run_starts(g, lines, cut)
    joiner = " " if g.whitespace == "normalize" else "\n"
    low, high = g.schema.get("minLength", 1), g.schema.get("maxLength", float("inf"))
    seen = set()
    for start in range(len(lines)):
        for end in range(start, min(start + RUN_MOST_LINES, len(lines))):
            value = joiner.join(lines[start : end + 1])
            if len(value) > high or not lines[end] or (end > start and cut[end - 1]):
                break
            if starts is not None and not any(first == start and least <= end <= most for first, least, most in starts):
                continue
            if len(value) >= low and value not in seen:
                seen.add(value)
                yield json.dumps(value, ensure_ascii=False)


def _first_in_block(starts: list[_Start], lines: list[str], starting: re.Pattern) -> list[_Start]:
    """Each block's runs from its first start whose line writes a ``starts_on`` word, and none from a block whose
    starts write none; all of them where no start's line writes one. A letterhead's address block starts on its
    first line with a number (``2ND FLR, 12 MILL ROAD`` above ``12345 SOMETOWN``), not on a
    brand line above it (``ACME MART``); left to choose among the block's lines, a model starts on the
    postcode's line."""
    firsts: dict[int, int] = {}
    for start in starts:  # in text order
        if starting.search(lines[start.first]):
            firsts.setdefault(start.block, start.first)
    return [s for s in starts if firsts.get(s.block) == s.first] if firsts else starts


def _shortest(starts: list[_Start], lines: list[str], ending: re.Pattern) -> list[_Start]:
    """Of the runs that end on an ``ends_on`` line, for each such line the shortest that writes a word besides what
    ``ends_on`` matches and what brackets hold (``ACME TRADING LTD (12345-X)`` alone, below a brand line;
    ``ACME BOOK`` then ``CO. (UK) LTD``, both lines); the other runs as they are."""
    firsts: dict[int, list[int]] = {}
    for start in starts:
        if start.ends:
            firsts.setdefault(start.least, []).append(start.first)
    chosen = {end: next((f for f in sorted(fs, reverse=True) if _names(" ".join(lines[f : end + 1]), ending)), min(fs)) for end, fs in firsts.items()}
    return [s for s in starts if not s.ends or s.first == chosen[s.least]]


def _names(run: str, ending: re.Pattern) -> bool:
    """Does ``run`` write a word besides what ``ending`` matches and what brackets hold? A run that starts inside
    brackets (``HILL) LTD`` below ``... TRADING (GREEN``) names nothing: its start is no name's."""
    closed, opened = run.find(")"), run.find("(")
    if closed >= 0 and not 0 <= opened < closed:
        return False
    return bool(re.search(r"[^\W_]", ending.sub(" ", re.sub(r"\([^)]*\)?", " ", run))))


def known_spans(g: Grounded, text: str) -> list[tuple[int, int]]:
    """Where ``text`` writes one of the field's ``known_values`` (whole words, any case, any whitespace between them):
    of those a label marks, where the text writes a label (and none where its labels mark other values: the label
    wins over a value written elsewhere, as an address's state is not the state whose law governs); else all of
    them. [] where they narrow nothing."""
    if not g.known_values:
        return []
    found = [m.span() for m in _known_pattern(g.known_values).finditer(text)]
    starts = set(after_labels(text, g.labels, g.rivals)) if g.labels else set()
    return [s for s in found if s[0] in starts] if starts else found


@functools.lru_cache(maxsize=64)
def _known_pattern(values: tuple[str, ...]) -> re.Pattern:
    alternatives = (r"\s+".join(map(re.escape, v.split())) for v in sorted(values, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{'|'.join(alternatives)})(?![^\W_])", re.IGNORECASE)


def labelled_runs(g: Grounded, text: str) -> tuple[list[list[str]], list[str]] | None:
    """With ``labels`` (or ``lines.first``) on a run of words: the runs that start with the first word after a label
    (with one of the text's first lines, where it writes no label), as JSON-escaped pieces per start and recasing, of
    at most ``most_words`` words, up to the string's ``maxLength`` (``LABELLED_CHARS`` without one) and, with
    ``cut_before``, up to the first word it matches (none from a start it matches); and, with ``ends_on``, the runs
    (escaped) that end on such a word. None where neither narrows anything, or no run is left. No run crosses a column
    gap, three spaces or more between two words of a line: laid-out text puts the letterhead and the customer's block
    side by side (``12 Mill Road    Acme Analytics GmbH``); with ``within_line``, none crosses a line break."""
    if not g.labels and not g.lines.first:
        return None
    normalize = g.whitespace == "normalize"
    flat = normalize_whitespace(text) if normalize else text
    starts = _capitalized(g, text, after_labels(text, g.labels, g.rivals))  # read in the text's own lines
    offsets = normalized_offsets(text) if normalize else None
    if starts and offsets:
        starts = sorted({offsets[start] for start in starts})
    starts = starts or _capitalized(g, flat, line_starts(text, g))
    breaks = [*COLUMN_GAP.finditer(text), *(LINE_BREAK.finditer(text) if g.lines.within_line else ())]
    gaps = sorted(offsets[m.end()] - 1 if offsets else m.start() for m in breaks) + [len(flat)]
    cutter = whole_words(g.lines.cut_before)
    rests = []
    for start in starts:
        cut = cutter.search(flat, start) if cutter else None
        stop = min(cut.start() if cut else len(flat), gaps[bisect.bisect_right(gaps, start)])
        rests.append(_kept(flat[start:stop].rstrip(_CUT_ENDS)) if stop < len(flat) else flat[start:])
    ending = whole_words(g.lines.ends_on)
    chains, ended = [], []
    for recase in g.recasings:
        for rest in rests:
            chunks, room, words_left = [], g.schema.get("maxLength", LABELLED_CHARS), g.most_words or len(rest)
            for chunk in word_chunks(escaped(recase(rest))):
                room -= len(chunk)
                if room < 0 or (not words_left and chunk != _OWN_PERIOD):
                    break  # the last word's own period (``Inc.``) may end the run with it
                chunks.append(chunk)
                words_left -= chunk[0].isalnum()
            if chunks:  # none where the first word after the label is longer than the string may be
                chains.append(chunks)
                ended += _ending_runs(chunks, ending) if ending else []
    return (chains, list(dict.fromkeys(ended))) if chains else None


def _capitalized(g: Grounded, text: str, starts: list[int]) -> list[int]:
    """With ``capitalized``: the ``starts`` of ``text`` whose first letter the text writes as a capital, or that
    start with a digit (a name's word, ``24 Acme Stores``), not a sentence's next word (``date of the latter``,
    offered re-cased as ``Date``); all of them without the option."""
    if not g.capitalized:
        return starts
    return [start for start in starts if (m := _FIRST_CHARACTER.match(text, start)) and not m.group(1).islower()]


def offered_values(g: Grounded, text: str) -> set[str] | None:
    """The values a run of words may take where ``known_values`` or ``labels`` leave a set of them (as the grammar spells
    them), None where any run of the text may be one."""
    return set(known_written(g, text)) or labelled_values(g, text)


def known_written(g: Grounded, text: str) -> list[str]:
    """The spans ``known_spans`` finds, as the grammar writes them (whitespace normalised, recased as ``case`` says)."""
    normalize = normalize_whitespace if g.whitespace == "normalize" else str
    return list(dict.fromkeys(recase(normalize(text[a:b])) for a, b in known_spans(g, text) for recase in g.recasings))


def labelled_values(g: Grounded, text: str) -> set[str] | None:
    """The values ``labelled_runs`` offers, as strings: every run of a chain that ends on a word (or on its marks), or
    the runs that end on an ``ends_on`` word, where any does; None where they narrow nothing."""
    found = labelled_runs(g, text)
    if found is None:
        return None
    chains, ended = found
    if ended:
        return {json.loads(f'"{run}"') for run in ended}
    values = set()
    for chunks in chains:
        for k in range(1, len(chunks) + 1):
            run = json.loads(f'"{"".join(chunks[:k])}"')
            if _trimmed_end(run):
                values.add(run)
    return values


def _trimmed_end(run: str) -> bool:
    """Does ``run`` end as ``_TRIMMED`` lets a value end: on a character that is no space or mark, marks after it aside?"""
    bare = run.rstrip("".join(c for c in set(run) if unicodedata.category(c).startswith("P")))
    return bool(bare) and not bare[-1].isspace() and bare[-1] == bare[-1].strip()


def line_starts(text: str, g: Grounded) -> list[int]:
    """With ``lines.first`` on a run of words: where each of the text's first lines that may start a value starts
    (a letterhead's name starts its line), in the text as the field reads it; none without the option. A line
    that ``cut_before`` cuts at its start neither starts a run nor counts: an invoice's title and its number and
    date lines come before the letterhead in many layouts."""
    if not g.lines.first:
        return []
    read = normalize_whitespace(text) if g.whitespace == "normalize" else text
    starts, at = [], 0
    for piece in [piece for piece in text_lines(text, g)[0] if piece][: g.lines.first]:
        found = read.find(piece, at)
        if found < 0:
            break
        starts.append(found + len(piece) - len(piece.lstrip()))
        at = found + len(piece)
    return starts


def _writes_included(g: Grounded, text: str) -> bool:
    """Does ``text`` write a word that the field's ``includes`` matches whole? (True where there is no ``includes``.)"""
    pattern = g.included()
    return pattern is None or pattern.search(text) is not None


def _strip_marks(word: str) -> str:
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(word[end - 1]).startswith("P"):
        end -= 1
    return word[start:end]


def members(g: Grounded, text: str) -> list[str]:
    """The JSON spellings of the enum members ``text`` writes (or the field allows). With ``prefer_members``,
    where it writes some members themselves, only those: ``$1,450.00 CAD`` is Canadian dollars, though ``$``
    also spells USD."""
    shown = [m for m in g.members if written(text, g.evidence(m), g.case)]
    if g.prefer_members and (themselves := [m for m in shown if written(text, (m,), g.case)]):
        shown = themselves
    return [json.dumps(m, ensure_ascii=False) for m in g.members if m in g.allow or m in shown]


def text_lines(text: str, g: Grounded) -> tuple[list[str], list[bool]]:
    """The text's lines that hold anything but whitespace, as a ``span: lines`` value joins them, and for each
    whether ``cut_before`` cut it: such a line stops before the first word the regex matches (less the marks that
    opened it, ``(``; empty where it starts the line), and no run of lines goes past it."""
    lines = [normalize_whitespace(line) if g.whitespace == "normalize" else line for line in text.splitlines() if line.strip()]
    cutter = whole_words(g.lines.cut_before)
    found = [cutter.search(line) if cutter else None for line in lines]
    kept = [_kept(line[: m.start()].rstrip(_CUT_ENDS)) if m else line for line, m in zip(lines, found)]
    return kept, [m is not None for m in found]


def _kept(head: str) -> str:
    """What is left of a cut line: up to a bracket it opens and does not close, whose rest was cut (``(CO.`` of
    ``ACME REALTY LTD (CO. NO:12345-X)``); nothing where a letter or a mark alone is left (``T:`` before a
    phone number)."""
    opened = head.rfind("(")
    if opened > head.rfind(")"):
        head = head[:opened].rstrip(_CUT_ENDS)
    return head if len(head.strip()) >= _LEAST_KEPT else ""


def word_chunks(escaped: str) -> list[str]:
    """The pieces whose runs a run of words may be: words, spaces and single marks (``_CHUNK``), a word's
    parts and the marks that join them (``_JOIN``) one piece."""
    pieces: list[str] = []
    chunks = _CHUNK.findall(escaped)
    i = 0
    while i < len(chunks):
        joined = pieces and _JOIN.fullmatch(chunks[i]) and pieces[-1][-1].isalnum() and i + 1 < len(chunks) and chunks[i + 1][0].isalnum()
        if joined:
            pieces[-1] += chunks[i] + chunks[i + 1]
            i += 2
        else:
            pieces.append(chunks[i])
            i += 1
    return pieces


def _ending_runs(chunks: list[str], ending: re.Pattern) -> list[str]:
    """The runs of ``chunks`` (a run of words' pieces, from its start) that end where ``ending`` ends a match."""
    text, stops = "".join(chunks), set(itertools.accumulate(map(len, chunks)))
    return [text[: m.end()] for m in ending.finditer(text) if m.end() in stops]


def escaped(text: str) -> str:
    """``text`` as it is written inside a JSON string (the grammar's pieces are JSON-escaped text)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _admits(g: Grounded, value: Decimal) -> bool:
    s = g.schema
    if g.kind == "integer" and value != value.to_integral_value():
        return False
    bounds = [("minimum", value.__ge__), ("maximum", value.__le__), ("exclusiveMinimum", value.__gt__), ("exclusiveMaximum", value.__lt__)]
    return all(ok(Decimal(str(s[key]))) for key, ok in bounds if isinstance(s.get(key), (int, float)))
