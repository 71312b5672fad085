"""Learning a field's ``x-grounded`` options from gold rows: the grammar's narrowing, chosen by what it scores.

A grounded field's grammar offers the model the values its text writes; options narrow that choice
(``labels``: only the values after one of these words; ``day_first``; ``largest``; ...). Which options
help a schema is a fact about its documents, which the user's gold shows. For every field this module
scores candidate options on the gold rows by the **pick rate**: the chance that a model choosing
uniformly among what the grammar offers takes the gold value (1/len(offered) where the gold is offered,
0 where it is not; null counts as one more choice of a nullable field). It keeps the options that raise
it, so a cue is kept only where the rows show that it helps, and each comes with its counts.

The options and their defaults are the table's (``grounding/options.py``): those it marks ``tried`` are tried
value by value on the fields they apply to, and ``labels`` and ``only_labelled`` are learned where a field can take them
(``Grounded.takes``). Runs of words (``most_words``, ``first_lines``) are learned for strings, not for quantities, whose
candidates are counts.

Label candidates are the words written just before the gold values, or those words after the close of a defined
name (``), and``; ``evidence.label_contexts``); they
are added greedily, each step taking the label that raises the pick rate most, until none raises it by
``MIN_GAIN``. The search scores a set of labels as the union of what each marks alone (one reading per
row and label), and the chosen set is scored again exactly.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import KW_ONLY, dataclass, field
from decimal import Decimal
from typing import Any, Callable, Sequence

from ..grounding.declaration import Grounded, leaves
from ..grounding.grammar import candidates, known_spans, labelled_values, line_starts, members, preferred, words, written_values
from ..grounding.options import OPTIONS, RECASINGS
from ..grounding.values import after_labels, json_number, labelled
from .evidence import label_contexts, occurrences, verbatim

#: The longest label candidate, in words (``laws of the state of``).
LONGEST_LABEL = 5
#: A label candidate is written before the gold value in at least this share of the rows (and 2 rows).
LABEL_SUPPORT = 0.1
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
#: The words written just after gold values tried as ``cut_before`` words, the most frequent first.
FOLLOWERS = 8
#: ``first_lines`` is tried where the gold values start on one of the text's first this many lines.
TOP_LINES = 15

_WORD = re.compile(r"\w+")
#: The word written after a value, past the spaces and marks between (``Nike, Inc., an Oregon corporation``).
_FOLLOWER = re.compile(r"[\W_]*?(\w+)")
_MARKS = ".,;:!?()[]{}\"'"


@dataclass
class Row:
    """One gold row: its document and the gold values of one field (a list for an array's items)."""

    text: str
    values: list[Any]


@dataclass
class FieldCues:
    """What was learned for one field: its options and the evidence for each."""

    name: str
    path: tuple[str, ...]
    options: dict[str, Any]
    _: KW_ONLY
    evidence: dict[str, Any] = field(default_factory=dict)
    array: dict[str, int] = field(default_factory=dict)  # an item's array: its minItems and maxItems in the gold


def field_rows(g: Grounded, gold: Sequence[tuple[str, Any]]) -> list[Row]:
    """The rows of ``gold`` ((text, label) pairs) as one field's rows: its gold values at its path."""
    return [Row(text, [v for v in leaves(label, g.path)]) for text, label in gold if _has_path(label, g.path)]


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
        if all(len(_WORD.findall(str(v))) == 1 for v in given):
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
    if g.takes("labels"):
        labelling, label_evidence = _labelling(g, rows, found, score)
        if label_evidence:
            evidence["labels"] = label_evidence
        g = g.with_options(labelling)
        options.update({name: value for name, value in labelling.items() if value})
    if g.kind == "string" and g.span == "words" and given:
        known, evidence["known_values"] = _known_values(g, rows, score)
        if known:
            g = g.with_options({"known_values": known})
            options["known_values"] = known
    if g.kind == "string" and g.span == "words" and given:
        options["most_words"] = max(len(_WORD.findall(str(v))) for v in given)
        g = g.with_options({"most_words": options["most_words"]})
    if g.kind == "string" and g.span == "words" and not g.labels:
        lines = _first_lines(rows, found)
        if lines and score(g.with_options({"first_lines": lines})) > score(g) + MIN_GAIN:
            g = g.with_options({"first_lines": lines})
            options["first_lines"] = lines
    if g.kind == "string" and g.span == "words" and (g.labels or g.first_lines) and given:
        cut, evidence["cuts"] = _cut(g, rows, found, score)
        if cut:
            g = g.with_options({"cut_before": cut})
            options["cut_before"] = cut
        ending, evidence["endings"] = _ending(g, given, score)
        if ending:
            g = g.with_options({"ends_on": ending})
            options["ends_on"] = ending
    evidence["pick_rate_after"] = round(score(g), 4)
    return FieldCues(g.name, g.path, options, evidence=evidence)


def _written_spans(rows: list[Row], found: list[list[list[tuple[int, int]]]]) -> list[tuple[str, list[str]]]:
    """Each gold value the text writes, with the spans of the text that write it."""
    return [(str(v), [r.text[a:b] for a, b in spans]) for r, value_spans in zip(rows, found) for v, spans in zip(r.values, value_spans) if spans]


def _dropped_marks(written: list[tuple[str, list[str]]]) -> str:
    """The punctuation marks that the spans writing the gold values hold and no gold value does, where at least
    ``MARK_SUPPORT`` of those values' spans hold them: the gold's normal form leaves them out (``Palm Inc.``)."""
    kept = {c for v, _ in written for c in v}
    held = Counter(c for _, spans in written for c in {c for span in spans for c in span if unicodedata.category(c).startswith("P")})
    return "".join(sorted(c for c, n in held.items() if c not in kept and n >= max(2, MARK_SUPPORT * len(written))))


def _case(written: list[tuple[str, list[str]]], exact: int, drop: str = "") -> tuple[str, dict[str, int]]:
    """The ``case`` that writes the gold values as the gold spells them, and how many each recasing writes: the one
    recasing that writes the most (``exact`` where none writes more than the text's own case does), so re-cased
    gold (``Aol Inc.`` for ``AOL Inc.``) is decoded in the gold's case, not in one the model picks; ``insensitive``
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


def _ending(g: Grounded, given: list[Any], score: Callable[[Grounded], float]) -> tuple[str | None, dict[str, int]]:
    """An ``ends_on`` regex (any case) of the last words that end the gold values, added greedily while each raises the
    pick rate (of the ``ENDINGS`` most frequent that end two values at least), with how many values each ends: the
    legal forms that end company names (``Inc.``, ``LLC``), so a run after a label stops on the name's end, not a word
    or two short of it or past it."""
    last = Counter(str(v).split()[-1].casefold() for v in given if str(v).split())
    return _greedy_words(g, "ends_on", last.most_common(ENDINGS), score)


def _cut(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: Callable[[Grounded], float]
) -> tuple[str | None, dict[str, int]]:
    """A ``cut_before`` regex (any case) of the words written just after the gold values that no gold value holds,
    added greedily while each raises the pick rate (of the ``FOLLOWERS`` most frequent that follow two values at
    least), with how many values each follows: what a document writes after a name (``, a Delaware corporation``,
    a signature's ``By:``), so a run after a label stops where the name does."""
    inside = {w.casefold() for r in rows for v in r.values if v is not None for w in _WORD.findall(str(v))}
    after = Counter()
    for r, value_spans in zip(rows, found):
        after.update({m.group(1).casefold() for spans in value_spans for _, b in spans if (m := _FOLLOWER.match(r.text, b))})
    return _greedy_words(g, "cut_before", [(w, n) for w, n in after.most_common() if w not in inside][:FOLLOWERS], score)


def _greedy_words(g: Grounded, option: str, counted: list[tuple[str, int]], score: Callable[[Grounded], float]) -> tuple[str | None, dict[str, int]]:
    """``option`` as a regex (any case) of the words of ``counted`` (each with how many values it was seen by, the most
    first) that raise the pick rate, added one by one while each does, of those seen by two values at least."""
    kept: dict[str, int] = {}
    current = score(g)
    for word, n in counted:
        if n < 2:
            break
        tried = score(g.with_options({option: _any_of({**kept, word: n})}))
        if tried > current + MIN_GAIN:
            kept[word], current = n, tried
    return (_any_of(kept) if kept else None), kept


def _any_of(words: dict[str, int]) -> str:
    return "(?i:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + ")"


def _first_lines(rows: list[Row], found: list[list[list[tuple[int, int]]]]) -> int | None:
    """The fewest top lines on which the gold values start in every row that writes them, where that is few."""
    deepest = 0
    for row, spans in zip(rows, found):
        starts = [s[0][0] for s in spans if s]
        if starts:
            deepest = max(deepest, len([line for line in row.text[: min(starts)].split("\n") if line.strip()]))
    return deepest + 1 if 0 < deepest + 1 <= TOP_LINES else None


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
        return 1.0 / (len(offered) + 1)
    return len(given & offered) / max(len(offered), len(given))


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
        return 1.0 / (len(offered) + 1) if nullable else 0.0
    choices = len(offered) + nullable
    return sum((v is None and nullable) or v in offered for v in gold) / max(choices, len(gold), 1)


def _word_starts(g: Grounded, text: str) -> set[int] | int:
    """Where a run of words may start: after a label, on a top line, else anywhere (returned as the count of words)."""
    starts = after_labels(text, g.labels, g.rivals) if g.labels else []
    if g.only_labelled:
        return set(starts)
    starts = starts or (line_starts(text, g) if g.first_lines else [])
    return set(starts) if starts else len(_WORD.findall(text))


def _starts_rate(starts: set[int] | int, gold: list[Any], spans: list[list[tuple[int, int]]]) -> float:
    given = [v for v in gold if v is not None]
    choices = starts if isinstance(starts, int) else len(starts)
    if not given:
        return 1.0 / (choices + 1)
    if isinstance(starts, int):
        hits = sum(bool(s) for s in spans)
    else:
        hits = sum(any(a in starts for a, _ in s) for s in spans)
    return hits / max(choices, len(given), 1)


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


def _learn_labels(
    g: Grounded, rows: list[Row], found: list[list[list[tuple[int, int]]]], score: Callable[[Grounded], float]
) -> tuple[list[str], dict[str, Any]]:
    """Labels chosen greedily by the pick rate, and for each: rows it marks the gold in, rows it is written in, an example.
    With ``only_labelled`` on ``g``, a row no chosen label is written in offers null alone."""
    contexts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for r, spans in zip(rows, found):
        seen: dict[str, None] = {}  # in text order, so that ties are broken the same way every run
        for s in spans:
            for start, end in s:
                for label in label_contexts(r.text, start, LONGEST_LABEL):
                    seen[label] = None
                    example.setdefault(label, " ".join(r.text[max(0, start - 60) : end + 20].split()))
        contexts.update(list(seen))
    least = max(2, LABEL_SUPPORT * len(rows))
    pool = [label for label, n in contexts.most_common() if n >= least][:LABEL_CANDIDATES]
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
