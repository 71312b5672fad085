"""Learning a field's ``x-grounded`` options from gold rows: the grammar's narrowing, chosen by what it scores.

A grounded field's grammar offers the model the values its text writes; options narrow that choice
(``labels``: only the values after one of these words; ``day_first``; ``pick``; ...). Which options
help a schema is a fact about its documents, which the user's gold shows. For every field this module
scores candidate options on the gold rows by the **pick rate**: the chance that a model choosing
uniformly among what the grammar offers takes the gold value (1/len(offered) where the gold is offered,
0 where it is not; null counts as one more choice of a nullable field; runs of lines are weighed by the order
the grammar offers them, ``_ordered_rate``). It keeps the options that raise it, so a cue is kept only where
the rows show that it helps, and each comes with its counts.

The options and their defaults are the table's (``grounding/options.py``): those it marks ``tried`` are tried
value by value on the fields they apply to, and ``labels`` and ``only_labelled`` are learned where a field can take them
(``Grounded.takes``). Runs of words (``most_words``, ``lines.first``, ``capitalized``, ``within_line``, ``cut_before``, ``ends_on``) are
learned for strings, not for quantities, whose candidates are counts; a ``span: lines`` string learns where its runs
start, which line they must reach and where they stop (``_learn_lines``, from each of a few numbers of top lines),
each tried again once the others are known (``_settled``); a one-word string its shape (``includes``). A number or
date learns labels of weight 2 (preferred) from the words written before its gold values (a receipt's ``total rounded`` below its
``total``).

Label candidates are the words written just before the gold values, or those words after the close of a defined
name (``), and``; ``evidence.label_contexts``); they
are added greedily, each step taking the label that raises the pick rate most, until none raises it by
``MIN_GAIN``. The search scores a set of labels as the union of what each marks alone (one reading per
row and label), and the chosen set is scored again exactly. Words and shapes that stop a run (``cut_before``,
``ends_on``) and preferred labels are chosen the same way, best first (``_greedy``), each set scored exactly.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import KW_ONLY, dataclass, field
from decimal import Decimal
from typing import Any, Callable, Sequence

from ..grounding.candidates import (
    candidates,
    known_spans,
    labelled_runs,
    labelled_values,
    line_runs,
    line_starts,
    members,
    preferred,
    words,
    written_values,
)
from ..grounding.declaration import Grounded
from ..grounding.options import LINES_PARTS, MARKS, OPTIONS, PREFERS, RECASINGS, VALUES
from ..grounding.paths import values_at
from ..grounding.values import after_labels, json_number, labelled
from .evidence import keyed, label_contexts, occurrences, verbatim

#: The longest label candidate, in words (``laws of the state of``).
LONGEST_LABEL = 5
#: A label candidate is written before the gold value in at least this share of the rows, or is a key (``keyed``).
LABEL_SUPPORT = 0.1
#: Why 2: a wording seen before the gold in one document alone may be that document's own, or its OCR's typo
#: (``numher``); one seen in two documents is a habit of the kind. A key too must be seen in two.
LABEL_ROWS = 2
#: Candidates scored at each greedy step, the most frequent first.
LABEL_CANDIDATES = 40
#: Labels a field learns at most.
MOST_LABELS = 8
#: The least rise of the mean pick rate for which a cue is kept.
MIN_GAIN = 0.005
#: A string field reads its words in any case where its gold is written verbatim in fewer of its rows than this.
VERBATIM_SHARE = 0.8
#: A mark the gold leaves out is dropped where at least this share of the written values' spans hold it.
MARK_SUPPORT = 0.1
#: The last words of gold values tried as ``ends_on`` words, the most frequent first.
ENDINGS = 8
#: The words tried as ``cut_before`` words (``_cut``), the most frequent first.
FOLLOWERS = 32
#: A shape of words is tried as a cut where it writes a word of at most this share of the gold values.
SHAPE_SLACK = 0.02
#: The most top lines ``lines.first`` is tried with.
TOP_LINES = 15
#: A run of lines' options are learned from each of this many ``lines.first``, the best alone first (``_learn_lines``).
LINE_STARTS = 3
#: A run of lines offered after ``i`` others is picked with weight ``FIRST_RUN_BIAS ** i`` (``_ordered_rate``).
FIRST_RUN_BIAS = 0.25

_WORD = re.compile(r"\w+")
#: The word written after a value, past the spaces and marks between (``Acme, Inc., an Oregon corporation``).
_FOLLOWER = re.compile(r"[\W_]*?(\w+)")
_MARKS = ".,;:!?()[]{}\"'"
#: Marks that open a word, which a cut's shape of it keeps (``(12345-X)``).
_OPENERS = "(["
#: A word of a name as ``ends_on`` learns it: its own period kept (``Inc.``), a comma between two words a break.
_NAME_WORD = re.compile(r"[^\s,;]+")
#: A word as a cut reads its shape: up to a space, less the marks that end it (``12345-X`` of ``(12345-X).``).
_TOKEN = re.compile(r"\S*?(?=[^\w]*(?:\s|$))")
#: A word with a digit in it: an identifier (``includes`` of a ``span: word`` string), a reference, a postcode.
DIGIT_WORD = r"[^\W\d_]*\d[^\W_]*"
#: Shapes of words a cut tries as a whole, besides the words themselves and the shape of each word with a digit
#: (``_shape``): a word of letters before a colon (another field's label: ``Subject:``), an e-mail address, any word
#: with a digit, a time of day and a date of numbers (a receipt's sale line below its address).
CUT_SHAPES = (r"[^\W\d_]+ ?:", r"[^\s@]+@[^\s@]+", DIGIT_WORD, r"\d{1,2}:\d{2}", r"\d{1,2}[./-]\d{1,2}[./-]\d{2,4}")


@dataclass
class Row:
    """One gold row: its document and the gold values of one field (a list for an array's items)."""

    text: str
    values: list[Any]


@dataclass
class FieldCues:
    """What was learned for one field: its options and the evidence for each, or why none is kept (``left``)."""

    name: str
    path: tuple[str, ...]
    options: dict[str, Any]
    _: KW_ONLY
    evidence: dict[str, Any] = field(default_factory=dict)
    array: dict[str, int] = field(default_factory=dict)  # an item's array: its minItems and maxItems in the gold
    left: str | None = None  # why no cue is kept, the field left to the model; None where cues are kept


def field_rows(g: Grounded, gold: Sequence[tuple[str, Any]]) -> list[Row]:
    """The rows of ``gold`` ((text, label) pairs) as one field's rows: its gold values at its path."""
    return [Row(text, list(values_at(label, g.path))) for text, label in gold if _has_path(label, g.path)]


def _has_path(label: Any, path: tuple[str, ...]) -> bool:
    head = path[0] if path else None
    return isinstance(label, dict) and head in label if head not in (None, "[]") else True


def learn_field(g: Grounded, rows: list[Row]) -> FieldCues:
    """The options that raise ``g``'s pick rate on ``rows``, with their evidence."""
    found = [[occurrences(g, v, r.text) for v in r.values] for r in rows]
    given = [v for r in rows for v in r.values if v is not None]
    written = sum(any(spans) for spans in found)
    evidence: dict[str, Any] = {
        "rows": len(rows),
        "values": len(given),
        "written": sum(bool(s) for spans in found for s in spans),
        "rows_written": written,
    }
    options: dict[str, Any] = {}
    if g.kind == "string" and given:
        exact = sum(verbatim(str(v), r.text) for r in rows for v in r.values if v is not None)
        evidence["verbatim"] = exact
        spans = _written_spans(rows, found)
        drop = _dropped_marks(spans)
        if drop:
            options["drop_marks"] = drop
        case, evidence["recased"] = _case(spans, exact, drop)
        if case != OPTIONS["case"].default:
            options["case"] = case
        if all(len(str(v).split()) == 1 for v in given):
            options["span"] = "word"
    g = g.with_options(options)
    score = _Scorer(g, rows, found)
    evidence["pick_rate_before"] = round(score(g), 4)
    for option in (option for option in OPTIONS.values() if option.tried and g.takes(option.name)):
        best, best_score = None, score(g)
        for value in option.trials():
            s = score(g.with_options({option.name: value}))
            if s > best_score + MIN_GAIN:
                best, best_score = value, s
        if best is not None:
            g = g.with_options({option.name: best})
            options[option.name] = best
    if g.kind == "string" and g.span == "word" and g.includes is None:
        g = _kept(g, options, "includes", _gaining(g, score, "includes", DIGIT_WORD))
    runs = g.kind == "string" and g.span == "words" and bool(given)
    if runs:
        g = _kept(g, options, "most_words", max(len(_WORD.findall(str(v))) for v in given))
        g = _kept(g, options, "lines.first", _first_lines(g, score))
        g = _capitals(g, score, options)
    if g.takes("labels"):
        labelling, label_evidence = _labelling(g, rows, found, score)
        if label_evidence:
            evidence["labels"] = label_evidence
        g = g.with_options(labelling)
        options.update({name: value for name, value in labelling.items() if value})
    if g.takes("labels") and g.kind in VALUES:
        marking = dict.fromkeys(g.labels, MARKS)
        evidence["preferred_labels"] = _greedy(
            g, "labels", _contexts(rows, found).most_common(LABEL_CANDIDATES), score, lambda kept: {**marking, **dict.fromkeys(kept, PREFERS)}
        )
        if evidence["preferred_labels"]:
            g = _kept(g, options, "labels", {**marking, **dict.fromkeys(evidence["preferred_labels"], PREFERS)})
    if runs:
        known, evidence["known_values"] = _known_values(g, rows, score)
        g = _kept(g, options, "known_values", known)
    if runs and (g.labels or g.lines.first):
        g = _capitals(g, score, options)
        g = _kept(g, options, "lines.within_line", _gaining(g, score, "lines.within_line", True))
        g = _stops(g, rows, found, score, options, evidence)
    if g.kind == "string" and g.span == "lines" and given:
        g = _learn_lines(g, rows, found, score, options, evidence)
    evidence["pick_rate_after"] = round(score(g), 4)
    return FieldCues(g.name, g.path, spelled(options), evidence=evidence)


def spelled(options: dict[str, Any]) -> dict[str, Any]:
    """Options as ``with_options`` takes them (``lines.first``) as a schema writes them (``"lines": {"first": ...}``)."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        head, _, part = name.partition(".")
        if part:
            out.setdefault(head, {})[part] = value
        else:
            out[name] = value
    return out


def _learn_lines(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: "_Scorer", options: dict[str, Any], evidence: dict[str, Any]
) -> Grounded:
    """A run of lines' options, each kept where it raises the pick rate: where its runs start (``lines.first``, and
    ``starts_on`` a word with a digit, a street's number), a line it must reach (``includes`` the digits of the
    length the gold values write most, a postcode), where it stops (``cut_before``, ``ends_on``, ``shortest``,
    ``to_block_end``). Options that help only together (more top lines, with ``shortest`` and the legal forms that
    end a name below a brand line) are out of reach of one change at a time from the best first guess, so the search
    starts again from each of the ``LINE_STARTS`` best numbers of top lines, and the best end is kept."""
    ended = []
    for lines in [_first_lines(g, score), *_top_lines(g, score)[1:LINE_STARTS]]:
        kept, noted = dict(options), dict(evidence)
        h = _lines_from(_kept(g, kept, "lines.first", lines), rows, found, score, kept, noted)
        ended.append((score(h), h, kept, noted))
    _, g, kept, noted = max(ended, key=lambda end: end[0])
    options.update(kept)
    evidence.update(noted)
    return g


def _lines_from(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: "_Scorer", options: dict[str, Any], evidence: dict[str, Any]
) -> Grounded:
    """``_learn_lines`` from one number of top lines."""
    digits = Counter(n for r in rows for v in r.values if v is not None for n in {len(run) for run in re.findall(r"\d+", str(v))})
    shapes = {"includes": f"[0-9]{{{n}}}" for n, _ in digits.most_common(1)} | {"lines.starts_on": DIGIT_WORD}
    for name, shape in shapes.items():
        g = _kept(g, options, name, _gaining(g, score, name, shape))
    g = _stops(g, rows, found, score, options, evidence)
    for name in ("lines.shortest", "lines.to_block_end"):
        g = _kept(g, options, name, g.takes(name) and _gaining(g, score, name, True))
    trials = (
        shapes
        | {name: options[name] for name in ("lines.cut_before", "lines.ends_on") if name in options}
        | {"lines.shortest": True, "lines.to_block_end": True}
    )
    g = _settled(g, options, score, trials)
    while (
        g.lines.first
        and (lines := _first_lines(g.without("lines.first"), score))
        and score(g.with_options({"lines.first": lines})) > score(g) + MIN_GAIN
    ):
        g = _settled(_kept(g, options, "lines.first", lines), options, score, trials)  # more top lines, once a start is known
    cut, cuts = _cut(g.without("lines.cut_before"), rows, found, score)  # words that help only once the run's start and end are known
    if cut and score(g.with_options({"lines.cut_before": cut})) > score(g) + MIN_GAIN:
        evidence["cuts"] = cuts
        g = _settled(_kept(g, options, "lines.cut_before", cut), options, score, trials | {"lines.cut_before": cut})
    return g


def _settled(g: Grounded, options: dict[str, Any], score: Callable[[Grounded], float], trials: dict[str, Any]) -> Grounded:
    """Each option of ``trials`` tried again, set to its value where it is unset and dropped where it is set, until no
    such change raises the pick rate: options interact (a start on a street's number, no help before the cuts are
    learned, may help after them; an ending learned early may stop helping)."""
    changed = True
    while changed:
        changed = False
        for name, value in trials.items():
            flipped = g.without(name) if name in options else g.with_options({name: value})
            if g.takes(name) and score(flipped) > score(g) + MIN_GAIN:
                g, changed = flipped, True
                if options.pop(name, None) is None:
                    options[name] = value
    return g


def _stops(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: "_Scorer", options: dict[str, Any], evidence: dict[str, Any]
) -> Grounded:
    """Where a run stops (``cut_before``, ``ends_on``), then ``lines.first`` again: cuts and endings may make more top
    lines worth offering."""
    cut, evidence["cuts"] = _cut(g, rows, found, score)
    g = _kept(g, options, "lines.cut_before", cut)
    ending, evidence["endings"], shortest = _ending(g, [v for r in rows for v in r.values if v is not None], score)
    g = _kept(_kept(g, options, "lines.ends_on", ending), options, "lines.shortest", shortest)
    if g.lines.first:
        g = _kept(g, options, "lines.first", _first_lines(g.without("lines.first"), score) or g.lines.first)
    return g


def _capitals(g: Grounded, score: Callable[[Grounded], float], options: dict[str, Any]) -> Grounded:
    """``capitalized`` where it raises the pick rate: tried once a run has starts (top lines), so that the labels learned
    next are weighed with it (a broad label, ``between``, marks fewer wrong runs where a lower-case word starts none),
    and again once labels are learned."""
    if g.capitalized or not g.takes("capitalized"):
        return g
    return _kept(g, options, "capitalized", _gaining(g, score, "capitalized", True))


def _gaining(g: Grounded, score: Callable[[Grounded], float], name: str, value: Any) -> Any:
    """``value`` where setting option ``name`` to it raises the pick rate by ``MIN_GAIN``, else None."""
    return value if score(g.with_options({name: value})) > score(g) + MIN_GAIN else None


def _kept(g: Grounded, options: dict[str, Any], name: str, value: Any) -> Grounded:
    """``g`` with option ``name`` set to ``value``, noted in ``options``, where ``value`` is one (not None, empty or False)."""
    if value is None or value is False or value == [] or value == ():
        return g
    options[name] = value
    return g.with_options({name: value})


def _written_spans(rows: list[Row], found: list[list[list[tuple[int, int]]]]) -> list[tuple[str, list[str]]]:
    """Each gold value the text writes, with the spans of the text that write it."""
    return [(str(v), [r.text[a:b] for a, b in spans]) for r, value_spans in zip(rows, found) for v, spans in zip(r.values, value_spans) if spans]


def _dropped_marks(written: list[tuple[str, list[str]]]) -> str:
    """The punctuation marks that the spans writing the gold values hold and no gold value does, where at least
    ``MARK_SUPPORT`` of those values' spans hold them: the gold's normal form leaves them out (``Acme Inc.``)."""
    kept = {c for v, _ in written for c in v}
    held = Counter(c for _, spans in written for c in {c for span in spans for c in span if unicodedata.category(c).startswith("P")})
    return "".join(sorted(c for c, n in held.items() if c not in kept and n >= max(2, MARK_SUPPORT * len(written))))


def _case(written: list[tuple[str, list[str]]], exact: int, drop: str = "") -> tuple[str, dict[str, int]]:
    """The ``case`` that writes the gold values as the gold spells them, and how many each recasing writes: the one
    recasing that writes the most (``exact`` where none writes more than the text's own case does), so re-cased
    gold (``Acme Inc.`` for ``ACME Inc.``) is decoded in the gold's case, not in one the model picks; ``insensitive``
    (any, the model's pick) only where no one recasing writes ``VERBATIM_SHARE`` of the values some recasing writes."""
    undropped = str.maketrans("", "", drop)
    pairs = [([span.translate(undropped) for span in spans], v) for v, spans in written]
    counts = {"exact": exact if not drop else sum(any(_same(span, v) for span in spans) for spans, v in pairs)}
    for case in ("upper", "lower", "title"):
        (recase,) = RECASINGS[case]
        counts[case] = sum(any(_same(recase(span), v) for span in spans) for spans, v in pairs)
    counts["insensitive"] = sum(any(_same(span.casefold(), v.casefold()) for span in spans) for spans, v in pairs)
    best = max(("exact", "upper", "lower", "title"), key=lambda c: (counts[c], c == "exact"))
    return ("insensitive" if counts[best] < VERBATIM_SHARE * counts["insensitive"] else best), counts


def _same(span: str, value: str) -> bool:
    """Does a span of the text write ``value``, whitespace runs and the marks at either end aside?"""
    return " ".join(span.split()).strip(_MARKS) == " ".join(value.split()).strip(_MARKS)


def _known_values(g: Grounded, rows: list[Row], score: "_Scorer") -> tuple[list[str], dict[str, Any]]:
    """The field's gold values, most often given first, where knowing them raises the pick rate on rows they were not
    learned from: each row is scored with the values the other rows give (leave one out), so a value seen once
    teaches nothing about its own row. A closed class (the states whose law governs a contract) repeats across
    rows and is kept; names that each row writes anew are not."""
    given = [dict.fromkeys(str(v) for v in r.values if v is not None) for r in rows]
    counts = Counter(v for values in given for v in values)
    before = score(g)
    rates = []
    for r, spans, values in zip(rows, score.found, given):
        others = tuple(v for v in counts if counts[v] - (v in values) > 0)
        rates.append(score.row(g.with_options({"known_values": list(others)}), r, spans))
    after = sum(rates) / len(rates) if rates else 0.0
    evidence = {"distinct": len(counts), "pick_rate_left_out": round(after, 4)}
    return ([v for v, _ in counts.most_common()] if after > before + MIN_GAIN else []), evidence


def _ending(g: Grounded, given: list[Any], score: Callable[[Grounded], float]) -> tuple[str | None, dict[str, int], bool]:
    """An ``ends_on`` regex (any case) of the last words that end the gold values of two words or more, added greedily
    while each raises the pick rate (of the ``ENDINGS`` most frequent that end two values at least and start none),
    with how many values each ends: the legal forms that end company names (``Inc.``, ``LLC``), so a run after a
    label stops on the name's end, not a word or two short of it or past it. A word that starts a name too
    (``Studio``) ends none of its runs for sure. Where the field takes ``shortest``, the endings are chosen again with
    it on, and the better of the two is returned with whether it is on: an ending that helps only with ``shortest``
    (a legal form below a brand line) is never kept alone, so neither would be learned one after the other."""
    names = [_NAME_WORD.findall(str(v)) for v in given if len(_NAME_WORD.findall(str(v))) > 1]
    first = {words[0].casefold() for words in names}
    last = Counter(words[-1].casefold() for words in names)
    counted = [(w, n) for w, n in last.most_common() if w not in first][:ENDINGS]
    plain = _greedy_words(g, "lines.ends_on", counted, score)
    if LINES_PARTS["shortest"].misplaced(g.declared, lambda _: True) or g.lines.shortest:
        return (*plain, False)
    shortest = _greedy_words(g, "lines.ends_on", counted, lambda h: score(h.with_options({"lines.shortest": True}) if h.lines.ends_on else h))
    rated = [
        (score(g.with_options({"lines.ends_on": e, "lines.shortest": on}) if e else g), e, kept, on)
        for (e, kept), on in ((plain, False), (shortest, True))
    ]
    _, ending, kept, on = max(rated, key=lambda rated: rated[0])
    return ending, kept, on and ending is not None


def _cut(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: Callable[[Grounded], float]
) -> tuple[str | None, dict[str, int]]:
    """A ``cut_before`` regex of words that no gold value holds, added greedily while each raises the pick rate (of
    the ``FOLLOWERS`` most frequent, each seen in two rows at least), with how many rows each was seen in. Two
    kinds of word are tried: those written just after the gold values, what a document writes after a name
    (``, a Delaware corporation``, a signature's ``By:``), so a run stops where the name does; and the first words
    of the runs the grammar offers that no gold value starts with, a title or a greeting on a letterhead's line
    (``INVOICE``, ``Dear``), so that line starts no run; and, for a run of lines, the words of the lines just above
    and below the gold values, a block's other lines (a company's name and its ``LTD`` above its address, ``TEL`` below). The
    shapes of such words are tried too (``CUT_SHAPES``): another field's label (``Subject:``), an e-mail address, a
    registration number (``12345-X``)."""
    values = [{w.casefold() for w in [*_WORD.findall(str(v)), *str(v).split()]} for r in rows for v in r.values if v is not None]
    inside = set().union(*values)
    seen: Counter[str] = Counter()
    for r, value_spans in zip(rows, found):
        after = {m.start(1) for spans in value_spans for _, b in spans if (m := _FOLLOWER.match(r.text, b))}
        beside = {w for spans in value_spans for a, b in spans for w in _lines_beside(r.text, a, b)} if g.span == "lines" else set()
        seen.update(_cut_words(r.text, after | beside | _wrong_starts(g, r), inside))
    counted = [(w, n) for w, n in seen.most_common() if _writes_few(w, values)]
    return _greedy_words(g, "lines.cut_before", counted[:FOLLOWERS], score)


def _lines_beside(text: str, a: int, b: int) -> list[int]:
    """Where the words start on the lines just above and below ``text[a:b]`` (a block's other lines)."""
    top = text.rfind("\n", 0, a)
    above = text.rfind("\n", 0, max(top, 0)) + 1 if top > 0 else None
    below = text.find("\n", b)
    spans = [(above, top)] if above is not None else []
    spans += [(below + 1, (text.find("\n", below + 1) + 1 or len(text) + 1) - 1)] if below >= 0 else []
    return [m.start() for start, end in spans for m in _WORD.finditer(text, start, end)]


def _wrong_starts(g: Grounded, r: Row) -> set[int]:
    """Where the words start in ``r.text`` that start runs the grammar offers (of words or of lines) and no gold value."""
    if g.span == "lines":
        firsts = {_first_word(json.loads(run)) for run in line_runs(g, r.text)}
    else:
        runs = labelled_runs(g, r.text) if g.span == "words" else None
        firsts = {_first_word(json.loads(f'"{chunks[0]}"')) for chunks in (runs[0] if runs else [])}
    firsts -= {_first_word(str(v)) for v in r.values if v is not None}
    return {m.start() for m in _WORD.finditer(r.text) if m.group().casefold() in firsts}


def _first_word(run: str) -> str:
    m = _WORD.search(run)
    return m.group().casefold() if m else ""


def _cut_words(text: str, starts: set[int], inside: set[str]) -> set[str]:
    """What a cut may try for the words starting at ``starts`` in ``text`` that no gold value holds: each word of
    letters (casefolded), each of ``CUT_SHAPES`` that writes it, and for a word with a digit its shape (``_shape``)
    and its run of digits (``_digit_run``), with the bracket that opens it (``(12345-X)``: a registration number,
    where ``12345-X`` alone has a street number's shape)."""
    found: set[str] = set()
    for start in starts:
        m = _WORD.match(text, start)
        if not m or m.group().casefold() in inside:
            continue
        opener = text[start - 1] if start and text[start - 1] in _OPENERS else ""
        token = opener + _TOKEN.match(text, start).group()
        if any(c.isdigit() for c in token):
            found.update({_shape(token), _shape(token, counted=False), _digit_run(token)})
        else:
            found.add(m.group().casefold())
        found.update(_Shape(shape) for shape in CUT_SHAPES if re.compile(shape).match(text, start))
    return found


def _writes_few(candidate: str, values: list[set[str]]) -> bool:
    """Is ``candidate`` a word, or a shape that writes a word of at most ``SHAPE_SLACK`` of the gold values (``values``,
    each as its words)? A shape that one stray gold value writes (a ``NO:`` key kept in an address) may still cut the
    rest, as the pick rate decides."""
    if not isinstance(candidate, _Shape):
        return True
    written = sum(any(re.fullmatch(candidate, w, re.IGNORECASE) for w in words) for words in values)
    return written <= SHAPE_SLACK * len(values)


def _shape(token: str, counted: bool = True) -> "_Shape":
    """A word with digits as a regex of its shape: its digits counted (or any, where not ``counted``), its letters any,
    its marks as written (``123456-X`` is ``\\d{6}-[^\\W\\d_]+``, ``03-7890 1234``'s first word ``\\d{2}-\\d{4}``,
    uncounted ``\\d+-\\d+``)."""
    parts = []
    for run in re.finditer(r"\d+|[^\W\d_]+|.", token):
        piece = run.group()
        parts.append((rf"\d{{{len(piece)}}}" if counted else r"\d+") if piece.isdigit() else r"[^\W\d_]+" if piece.isalpha() else re.escape(piece))
    return _Shape("".join(parts))


def _digit_run(token: str) -> "_Shape":
    """A word with digits as the class of words that hold a run of as many digits or more (``AB1234567-X``,
    ``(1234567K)`` and ``001234567-K`` all hold one of 7): registration and phone numbers written in many shapes."""
    longest = max(len(run) for run in re.findall(r"\d+", token))
    return _Shape(rf"[^\W_]*\d{{{longest},}}[^\W_]*")


def _greedy_words(g: Grounded, option: str, counted: list[tuple[str, int]], score: Callable[[Grounded], float]) -> tuple[str | None, dict[str, int]]:
    """``option`` as a regex (any case) of the words and shapes of ``counted`` that ``_greedy`` keeps, and the kept ones
    with their counts."""
    kept = _greedy(g, option, counted, score, _any_of)
    return (_any_of(kept) if kept else None), kept


def _greedy(
    g: Grounded, option: str, counted: list[tuple[str, int]], score: Callable[[Grounded], float], value: Callable[[dict[str, int]], Any]
) -> dict[str, int]:
    """The candidates of ``counted`` (each with how many values or rows it was seen by, the most first; of those seen
    by two at least) that ``option`` is set to, as ``value`` writes them, chosen greedily: each step adds the one that
    raises the pick rate most, the most often seen of equals, while one raises it by ``MIN_GAIN``; with how often
    each was seen. Candidates overlap (a shape writes words tried alone too), so each is scored with those kept."""
    pool = {candidate: n for candidate, n in counted if n >= 2}
    kept: dict[str, int] = {}
    current = score(g)
    while pool:
        tried = {candidate: score(g.with_options({option: value({**kept, candidate: n})})) for candidate, n in pool.items()}
        best = max(tried, key=lambda candidate: tried[candidate])
        if tried[best] <= current + MIN_GAIN:
            break
        kept[best], current = pool.pop(best), tried[best]
    return kept


def _any_of(kept: dict[str, int]) -> str:
    patterns = (w if isinstance(w, _Shape) else re.escape(w) for w in kept)
    return "(?i:" + "|".join(sorted(patterns, key=len, reverse=True)) + ")"


class _Shape(str):
    """A cut's candidate that is a regex already (``CUT_SHAPES``, ``_shape``), not a word to escape."""


def _first_lines(g: Grounded, score: Callable[[Grounded], float]) -> int | None:
    """The ``lines.first`` (1 to ``TOP_LINES``) that raises the pick rate most, the fewest where two tie:
    a letterhead's name is written on the first line or two of most documents, and runs from there are
    the choice wherever no label is written (a label learned after it still marks the rows that write one)."""
    best = _top_lines(g, score)[0]
    return best if score(g.with_options({"lines.first": best})) > score(g) + MIN_GAIN else None


def _top_lines(g: Grounded, score: Callable[[Grounded], float]) -> list[int]:
    """The numbers of top lines (1 to ``TOP_LINES``), the best first, the fewest of equals."""
    rates = {n: score(g.with_options({"lines.first": n})) for n in range(1, TOP_LINES + 1)}
    return sorted(rates, key=lambda n: (-rates[n], n))


class _Scorer:
    """The mean pick rate of a field's variants on the gold rows."""

    def __init__(self, g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]]):
        self.rows, self.found = rows, found

    def __call__(self, g: Grounded) -> float:
        rates = [self.row(g, r, spans) for r, spans in zip(self.rows, self.found)]
        return sum(rates) / len(rates) if rates else 0.0

    def row(self, g: Grounded, r: Row, spans: list[list[tuple[int, int]]]) -> float:
        if g.kind == "string" and g.span == "words":
            known = known_spans(g, r.text)
            if known:
                return _values_rate({_folded(r.text[a:b]) for a, b in known}, r.values)
            runs = labelled_values(g, r.text)
            if runs is not None or g.only_labelled:
                return _values_rate({_folded(run) for run in runs or ()}, r.values)
            return _starts_rate(_word_starts(g, r.text), r.values, spans)
        if g.kind == "string" and g.span == "lines":
            return _ordered_rate(list(dict.fromkeys(_folded(json.loads(run)) for run in line_runs(g, r.text))), r.values)
        if g.kind == "string":
            offered = words(g, r.text, narrowed=True)
        else:
            offered = members(g, r.text) if g.kind == "enum" else preferred(g, candidates(g, r.text), r.text)
        return _pick_rate(set(offered), [_spelled(g, v) for v in r.values], g.nullable)


def _folded(value: Any) -> str:
    return " ".join(str(value).casefold().split())


def _values_rate(offered: set[str], gold: list[Any]) -> float:
    """``_starts_rate`` where the grammar offers a run of words as a set of values (``known_values``, the runs after a
    label), compared casefolded, as ``eval`` compares them."""
    given = {_folded(v) for v in gold if v is not None}
    if not given:
        return _rate(1, 1, len(offered) + 1)
    return _rate(len(given & offered), len(given), len(offered))


def _ordered_rate(offered: list[str], gold: list[Any]) -> float:
    """``_values_rate`` of runs of lines offered in the text's order (by first line, then by last), weighed by that
    order as a greedy decoder picks: it copies from the top, and takes the first run the grammar offers in most
    rows where it offers several (docs/history/ACCURACY.md has the measurement), so the ``i``-th run is weighed
    ``FIRST_RUN_BIAS ** i``, and an option that puts the gold value first is worth more than one that offers fewer
    runs above it."""
    given = {_folded(v) for v in gold if v is not None}
    if len(given) != 1 or not offered:
        return _values_rate(set(offered), gold)
    weights = [FIRST_RUN_BIAS**i for i in range(len(offered))]
    return sum(w for w, run in zip(weights, offered) if run in given) / sum(weights)


def _spelled(g: Grounded, value: Any) -> str | None:
    """A gold value as the grammar spells its candidates (a ``span: word`` string as itself)."""
    if value is None:
        return None
    if g.kind == "string":
        return str(value)
    if g.kind in ("date", "quantity", "enum"):
        return json.dumps(str(value), ensure_ascii=False)
    return json_number(Decimal(str(value)))


def _pick_rate(offered: set[str], gold: list[str | None], nullable: bool) -> float:
    if not gold:
        return _rate(1, 1, len(offered) + 1) if nullable else 0.0
    return _rate(sum((v is None and nullable) or v in offered for v in gold), len(gold), len(offered) + nullable)


def _word_starts(g: Grounded, text: str) -> set[int] | int:
    """Where a run of words may start: after a label, on a top line, else anywhere (returned as the count of words)."""
    starts = after_labels(text, g.labels, g.rivals) if g.labels else []
    if g.only_labelled:
        return set(starts)
    starts = starts or (line_starts(text, g) if g.lines.first else [])
    return set(starts) if starts else len(_WORD.findall(text))


def _starts_rate(starts: set[int] | int, gold: list[Any], spans: list[list[tuple[int, int]]]) -> float:
    given = [v for v in gold if v is not None]
    choices = starts if isinstance(starts, int) else len(starts)
    if not given:
        return _rate(1, 1, choices + 1)
    if isinstance(starts, int):
        hits = sum(bool(s) for s in spans)
    else:
        hits = sum(any(a in starts for a, _ in s) for s in spans)
    return _rate(hits, len(given), choices)


def _rate(hits: int, wanted: int, choices: int) -> float:
    """The pick rate of a row whose grammar offers ``choices`` values, ``hits`` of its ``wanted`` gold values among them."""
    return hits / max(choices, wanted, 1)


def _labelling(g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: "_Scorer") -> tuple[dict[str, Any], dict[str, Any]]:
    """``labels``, and ``only_labelled`` where it helps, with the labels' evidence. Two searches: the labels that raise
    the pick rate where a row they are not written in offers all its values, then ``only_labelled`` on them where
    that raises it further; and, for a field that may be null, the labels that raise it from a field that is always
    null, where a row they are not written in gives null. The second keeps only labels precise enough to beat null,
    and may keep none: a contract writes many periods, most of them not its term, and where the gold's terms are
    mostly null and no label marks the real ones well, the field is null. The better of the two is kept."""
    labels, evidence = _learn_labels(g, rows, found, score)
    best: dict[str, Any] = {"labels": labels} if labels else {}
    if not g.takes("only_labelled"):
        return best, evidence
    if labels and score(g.with_options({**best, "only_labelled": True})) > score(g.with_options(best)) + MIN_GAIN:
        best["only_labelled"] = True
    strict, strict_evidence = _learn_labels(g.with_options({"only_labelled": True}), rows, found, score)
    if score(g.with_options({"labels": strict, "only_labelled": True})) > score(g.with_options(best)) + MIN_GAIN:
        best, evidence = {"labels": strict, "only_labelled": True}, strict_evidence
    return best, evidence


def _contexts(rows: list[Row], found: list[list[list[tuple[int, int]]]]) -> Counter[str]:
    """The label candidates written just before the gold values (``label_contexts``), each counted once a row: what
    labels and preferred labels are learned from (a receipt's ``total rounded`` below its ``total``)."""
    seen: Counter[str] = Counter()
    for r, spans in zip(rows, found):  # in text order, so that ties are broken the same way every run
        seen.update(list(dict.fromkeys(label for s in spans for start, _ in s for label in label_contexts(r.text, start, LONGEST_LABEL))))
    return seen


def _learn_labels(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: Callable[[Grounded], float]
) -> tuple[list[str], dict[str, Any]]:
    """Labels chosen greedily by the pick rate, and for each: rows it marks the gold in, rows it is written in, an example.
    With ``only_labelled`` on ``g``, a row no chosen label is written in offers null alone."""
    contexts = _contexts(rows, found)
    keys: set[str] = set()
    example: dict[str, str] = {}
    for r, spans in zip(rows, found):
        for start, end in (span for s in spans for span in s):
            for label in label_contexts(r.text, start, LONGEST_LABEL):
                example.setdefault(label, " ".join(r.text[max(0, start - 60) : end + 20].split()))
                if keyed(r.text, start):
                    keys.add(label)
    least = max(LABEL_ROWS, LABEL_SUPPORT * len(rows))
    pool = [label for label, n in contexts.most_common() if n >= least or (label in keys and n >= LABEL_ROWS)][:LABEL_CANDIDATES]
    if not pool:
        return [], {}
    marks = {label: [_marked(g.with_options({"labels": [label]}), r) for r in rows] for label in pool}

    def union_score(labels: list[str]) -> float:
        rates = []
        for i, (r, spans) in enumerate(zip(rows, found)):
            marked = set().union(*(marks[label][i] for label in labels)) if labels else set()
            rates.append(_union_rate(g, r, spans, marked))
        return sum(rates) / len(rates)

    chosen: list[str] = []
    current = union_score([]) if g.only_labelled else score(g)
    while len(chosen) < MOST_LABELS:
        scored = [(union_score([*chosen, label]), label) for label in pool if label not in chosen]
        if not scored:
            break
        best, label = max(scored, key=lambda t: (t[0], -pool.index(t[1])))
        if best <= current + MIN_GAIN:
            break
        chosen.append(label)
        current = best
    if chosen and not g.only_labelled and score(g.with_options({"labels": chosen})) <= score(g) + MIN_GAIN:
        return [], {}
    evidence = {}
    for label in chosen:
        marked_gold = sum(_marks_gold(g, r, spans, marks[label][i]) for i, (r, spans) in enumerate(zip(rows, found)))
        evidence[label] = {"marks_gold_in_rows": marked_gold, "written_before_gold_in_rows": contexts[label], "example": example[label]}
    return chosen, evidence


def _marked(g: Grounded, r: Row) -> set[Any]:
    """What one label marks in a row: the run starts after it (strings), or the spellings of the values it marks."""
    if g.kind == "string" and g.span == "words":
        return set(after_labels(r.text, g.labels))
    if g.kind == "string":
        return set(words(g, r.text, narrowed=True)) if after_labels(r.text, g.labels) else set()
    found = written_values(g.without("labels", "only_labelled"), r.text)
    return {_spelled_key(g, v) for v in labelled(found, r.text, g.labels)}


def _spelled_key(g: Grounded, key: Any) -> str:
    return json.dumps(key) if g.kind in ("date", "quantity") else json_number(key)


def _union_rate(g: Grounded, r: Row, spans: list[list[tuple[int, int]]], marked: set[Any]) -> float:
    if g.kind == "string" and g.span == "words":
        return _starts_rate(marked or (set() if g.only_labelled else _word_starts(g.without("labels"), r.text)), r.values, spans)
    if g.only_labelled:
        offered = marked
    else:
        offered = marked or set(words(g, r.text) if g.kind == "string" else candidates(g.without("labels"), r.text))
    return _pick_rate(offered, [_spelled(g, v) for v in r.values], g.nullable)


def _marks_gold(g: Grounded, r: Row, spans: list[list[tuple[int, int]]], marked: set[Any]) -> bool:
    if g.kind == "string" and g.span == "words":
        return any(a in marked for s in spans for a, _ in s)
    return any(_spelled(g, v) in marked for v in r.values if v is not None)
