"""Source text + JSON schema -> one llguidance Lark grammar whose grounded fields can only copy the text.

The object is written out in the schema's key order as compact JSON. Fields
without grounding stay ``%json {subschema}``; a grounded string is a run of
whole words (``span: word``: one word; ``span: lines``: a run of whole lines) of the (JSON-escaped) source,
``%regex {"substring_chunks": ...}``, that neither starts nor ends with
whitespace or a lone punctuation mark; a
grounded number, date or enum member is one of those the source writes
(``candidates``). A grounded field the source gives nothing to hold is ``null``
where its schema allows null; otherwise ``grounded_lark`` raises
``NothingToGround``, and the row is rejected before it is decoded. Objects and
arrays are written out only where a grounded field sits below them.
``exclude`` takes values away from a field's candidates and ``pinned`` holds
fields to one value (a repair's: docs/RULES.md). The builder is pure: it knows
nothing of models, jobs or speculation.
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from typing import Any, Callable, Collection, Mapping

from .candidates import (
    LEAST_CHARS,
    candidates,
    escaped,
    known_written,
    labelled_runs,
    line_run_starts,
    members,
    offered_values,
    preferred,
    refused_runs,
    text_lines,
    word_chunks,
    words,
)
from .declaration import Grounded, Units, grounded_arrays, grounded_fields, unit_spans
from .values import after_labels, normalize_whitespace

#: The most pieces of a run of words nested in one terminal (``_Builder.prefixes``). Why 16: llguidance (1.9)
#: refuses a Lark grammar nested past 29 groups (``lark grammar too deeply nested``); 16 pieces nest 15 groups and
#: the tail's own, well inside it.
NESTED_MOST = 16

#: A list of grounded strings whose labels leave at most this many values is spelled out as the lists naming each once.
DISTINCT_MOST = 4

#: What may sit around an excluded run of words and leave it the same value (``Halden Robotics,``).
_AROUND = r"/[\s,.;:!?-]*/"

#: A grounded string neither starts nor ends with whitespace or a lone punctuation mark (``- ACME``,
#: ``UNIT 6,``+space), and so holds something else; the text's own line breaks, JSON-escaped, count
#: as whitespace too where whitespace is exact. (Written positively: the negation of a regex over a
#: 50 KB document's substrings is too large for llguidance to build.)
_TRIMMED = r"/([^\s\p{P}]|\p{P}+[^\s\p{P}]).*/ & /.*([^\s\p{P}]|[^\s\p{P}]\p{P}+)/"

_NO_ESCAPED_BREAK_AT_AN_END = r"~/\\[nrt].*|.*\\[nrt]/"

#: What a field of each kind needed from the text, for ``NothingToGround``'s message.
_NEEDS: dict[str, Callable[[Grounded], str]] = {
    "enum": lambda g: "none of " + ", ".join(s for m in g.members for s in g.evidence(m)) + " is written",
    "string": lambda g: "the text holds only whitespace and punctuation" if g.span != "word" else "no word fits its length bounds",
    "date": lambda g: "no date is written",
    "quantity": lambda g: f"no count of {' or '.join(g.units)} is written",
    "number": lambda g: f"no {'amount' if g.amount else 'number'} within the schema's bounds is written",
    "integer": lambda g: f"no whole {'amount' if g.amount else 'number'} within the schema's bounds is written",
}


class NothingToGround(ValueError):
    """The text writes nothing that a grounded field could hold, and the field may not be null."""


def grounded_lark(
    schema: dict[str, Any],
    text: str,
    exclude: Mapping[tuple[str, ...], Collection[Any]] | None = None,
    pinned: Mapping[tuple[str, ...], Any] | None = None,
    whole: str | None = None,
) -> str:
    """The Lark grammar for one row: ``schema``'s JSON with its grounded fields held to ``text``.

    ``exclude`` maps a grounded field's path to values it may not take. An
    excluded string also takes away every span that contains it and every run
    of its words, with or without spaces and punctuation around it, which name
    the same thing (``Halden Robotics LLC 44 Mill Street``, ``Halden Robotics ``). A field whose every
    candidate is excluded falls back to its schema. ``pinned`` maps a property's path to the one JSON value
    it is written with, grounded or not: its tokens are forced, so speculation drafts them. ``whole``: the row's
    whole text, where ``text`` is one chunk of it; a nullable field with ``labels`` that the chunk does not write and
    another chunk does is null here, left to the chunk its label marks (merging keeps a value over a null).
    Raises ``NothingToGround`` naming the fields the text leaves nothing for."""
    builder = _Builder(schema, text, exclude or {}, pinned or {}, whole=whole)
    grammar = builder.grammar()
    if builder.unwritten:
        raise NothingToGround("the text writes no value for " + "; ".join(builder.unwritten))
    return grammar


def field_values(g: Grounded, text: str) -> list[Any] | None:
    """The values a grounded number, integer, date or enum field can take in ``text``; None for a string (any span)."""
    if g.kind == "string":
        return None
    return [json.loads(v) for v in (members(g, text) if g.kind == "enum" else candidates(g, text))]


class _Builder:
    def __init__(
        self,
        schema: dict[str, Any],
        text: str,
        exclude: Mapping[tuple[str, ...], Collection[Any]],
        pinned: Mapping[tuple[str, ...], Any],
        *,
        rules: list[str] | None = None,
        whole: str | None = None,
    ):
        self.root, self.text, self.exclude, self.pinned, self.whole = schema, text, exclude, pinned, whole
        self.fields = {g.path: g for g in grounded_fields(schema)}
        self.arrays = grounded_arrays(schema)
        self.rules: list[str] = [] if rules is None else rules  # a paragraph's builder adds to its document's rules
        self.sources: dict[tuple[str, str, str, str], str] = {}  # (whitespace, case, span, drop_marks) -> the terminal of the text's spans
        self.unwritten: list[str] = []  # "field (what it needed)" for each field the text gives nothing to hold

    def grammar(self) -> str:
        start = self.value(self.root, ())
        return "\n".join([f"start: {start}", *self.rules]) + "\n"

    def value(self, schema: dict[str, Any], path: tuple[str, ...]) -> str:
        if path in self.pinned:
            return self.rule(_literal(json.dumps(self.pinned[path], ensure_ascii=False, separators=(",", ":"))))
        if path in self.fields:
            return self.grounded(self.fields[path])
        if not any(p[: len(path)] == path for p in self.fields):
            return self.json(schema)
        if "properties" in schema:
            return self.object(schema, path)
        return self.array(schema, path)

    def json(self, schema: dict[str, Any]) -> str:
        body = dict(schema)
        for defs in ("$defs", "definitions"):
            if defs in self.root and body is not self.root:
                body[defs] = self.root[defs]
        body["x-guidance"] = {"whitespace_flexible": False}
        return self.rule(f"%json {json.dumps(body, ensure_ascii=False)}")

    def object(self, schema: dict[str, Any], path: tuple[str, ...]) -> str:
        """Keys in schema order; optional ones may be left out, with commas only between the written ones."""
        required = set(schema.get("required", []))
        items = [(k in required, f"{_literal(json.dumps(k) + ':')} {self.value(sub, (*path, k))}") for k, sub in schema["properties"].items()]
        # first: the keys from here on, none written yet; rest: the same after one was written.
        first: str | None = None
        rest = ""
        for needed, item in reversed(items):
            if needed:
                first = self.rule(f"{item} {rest}")
            else:
                first = self.rule(f"({item} {rest})?" if first is None else f"{item} {rest} | {first}")
            rest = self.rule(f'"," {item} {rest}' if needed else f'("," {item})? {rest}')
        return f'"{{" {first} "}}"' if first else '"{}"'

    def array(self, schema: dict[str, Any], path: tuple[str, ...]) -> str:
        if path in self.arrays:
            return self.units(schema, path, self.arrays[path])
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        distinct = self.distinct_items((*path, "[]"), low, high)
        if distinct:
            return distinct
        before = len(self.unwritten)
        item = self.value(schema["items"], (*path, "[]"))
        if len(self.unwritten) > before and low == 0:  # the text writes nothing an item's required field could hold: no items
            del self.unwritten[before:]
            return '"[]"'
        more = f'("," {item})*' if high is None and low <= 1 else f'("," {item}){{{max(low - 1, 0)},{"" if high is None else high - 1}}}'
        body = f"{item} {more}" if high != 0 else ""
        return self.rule(f'"[" {body} "]"' if low > 0 or not body else f'"[" ({body})? "]"')

    def distinct_items(self, path: tuple[str, ...], low: int, high: int | None) -> str | None:
        """A list of grounded strings whose labels (or known values) leave a set of values, none of whose later items
        names its first again (holds it, or is a run of its words: ``_takes_away``): a list of names (a contract's
        parties) names each once, and a greedy model, given room, writes the one name it wrote first again, or a run
        around it. A few values (``DISTINCT_MOST``) are spelled out as every list that names each once, within the
        array's item counts; more, as a first value and later runs that do not name it (``other_items``). None where
        the item's own rule serves: any run of the text, no value, values a repair excludes, or fewer values apart
        than ``minItems`` asks for."""
        g = self.fields.get(path)
        if g is None or g.kind != "string" or g.span != "words" or self.exclude.get(path) or high == 0:
            return None
        values = offered_values(g, self.text)
        low_len, high_len = g.schema.get("minLength", 1), g.schema.get("maxLength", len(self.text))
        values = sorted(v for v in values or () if low_len <= len(v) <= high_len)
        most = len(values) if high is None else min(high, len(values))
        if not values or most < low:
            return None
        if len(values) > DISTINCT_MOST:
            return self.other_items(g, values, low, high)
        lists = [p for k in range(max(low, 1), most + 1) for p in itertools.permutations(values, k) if not _names_again(p)]
        spelled = [_literal("[" + ",".join(json.dumps(v, ensure_ascii=False) for v in p) + "]") for p in lists]
        if not spelled and low > 0:  # minItems asks for more names than the values hold apart: the item's own rule
            return None
        return self.rule(" | ".join(spelled + (['"[]"'] if low == 0 else [])))

    def other_items(self, g: Grounded, values: list[str], low: int, high: int | None) -> str | None:
        """Lists that start with one of ``values``, each later item a run of ``g``'s that neither holds that first one nor
        is a run of its words (a terminal per value: the item's span less those, ``_same_thing``), within the array's item
        counts. Spelling every list that names each value once grows as the permutations of tens of runs; this keeps
        out the repeat a greedy model falls into, the first name again or a run around it (``Jane Q. Roe ("Roe")``),
        one rule per value."""
        span, firsts = self.span(g), []
        for value in values:
            first = _literal(json.dumps(value, ensure_ascii=False))
            if high == 1 or all(map(_takes_away(value), values)):  # no run left to follow it: a list of one
                firsts += [first] if low <= 1 else []
                continue
            other = f"OTHER{len(self.rules)}"
            self.rules.append(f"{other}: {span} & ~({' | '.join(dict.fromkeys(_same_thing(value)))})")
            later = f'("," "\\"" {other} "\\"")'
            firsts.append(f"{first} {later}*" if high is None else f"{first} {later}{{{max(low - 1, 0)},{high - 1}}}")
        if not firsts:
            return None
        body = self.rule(" | ".join(firsts))
        return self.rule(f'"[" {body} "]"' if low > 0 else f'"[" ({body})? "]"')

    def units(self, schema: dict[str, Any], path: tuple[str, ...], units: Units) -> str:
        """Items in text order, each from a later paragraph (line) than the one before, its grounded values that paragraph's.

        ``after{i}``: the items from unit ``i`` on, at least one; so an array holds at most one item per unit, and a
        greedy model cannot repeat an item until its token budget runs out. With ``every``, one item for every unit.
        A unit that writes nothing a required grounded field could hold is no item's (it raises nothing)."""
        items = []
        for start, end in unit_spans(self.text, units.unit):
            piece = _Builder(self.root, self.text[start:end], self.exclude, self.pinned, rules=self.rules)
            item = piece.value(schema["items"], (*path, "[]"))
            if not piece.unwritten:  # a paragraph that writes nothing for a required field holds no item
                items.append(item)
        if units.every:
            return self.rule(" ".join(['"["', ' "," '.join(items), '"]"']))
        after = ""
        for item in reversed(items):
            more = self.rule(f'"]" | "," {after}') if after else '"]"'
            after = self.rule(f"{item} {more}" + (f" | {after}" if after else ""))
        low = schema.get("minItems", 0)
        return self.rule(f'"[" {after}' if low > 0 and after else f'"[" ({after} | "]")' if after else '"[]"')

    def grounded(self, g: Grounded) -> str:
        if self.labelled_elsewhere(g):
            return '"null"'
        excluded = self.exclude.get(g.path, ())
        if g.kind == "enum":
            choices = [_literal(m) for m in members(g, self.text) if json.loads(m) not in excluded]
        elif g.kind == "string" and g.span == "word":
            choices = [_literal(json.dumps(w, ensure_ascii=False)) for w in words(g, self.text, narrowed=True) if w not in excluded]
            choices += [_literal(json.dumps(v, ensure_ascii=False)) for v in g.allow if v not in excluded]
        elif g.kind == "string":
            writes = any(not c.isspace() and not unicodedata.category(c).startswith("P") for c in self.text)
            writes = writes and not (g.only_labelled and not after_labels(self.text, g.labels, g.rivals))
            choices = [f'"\\"" {self.span(g, excluded)} "\\""'] if writes else []
            choices += [_literal(json.dumps(v, ensure_ascii=False)) for v in g.allow if v not in excluded]
        else:
            choices = [_literal(v) for v in preferred(g, [v for v in candidates(g, self.text) if json.loads(v) not in excluded], self.text)]
        if not choices and excluded:  # a repair excluded every candidate: the schema's, and the post-check decides
            return self.json(g.schema)
        if g.nullable:
            choices.append('"null"')
        elif not choices:
            self.unwritten.append(f"{g.name} ({_NEEDS[g.kind](g)})")
            return '"null"'  # never decoded: grounded_lark raises
        return self.rule(" | ".join(choices))

    def labelled_elsewhere(self, g: Grounded) -> bool:
        """Is ``g`` nullable, with labels that this chunk of the row does not write and another chunk does?"""
        if not (self.whole and g.labels and g.nullable and self.whole != self.text):
            return False
        return not after_labels(self.text, g.labels, g.rivals) and bool(after_labels(self.whole, g.labels, g.rivals))

    def span(self, g: Grounded, excluded: Collection[Any] = ()) -> str:
        """A terminal for the spans of the text this string may be, within its length bounds, but not ``excluded``."""
        runs = self.line_runs(g) if g.span == "lines" else None
        name = f"SPAN{len(self.rules)}"
        if runs:  # whole lines, none of them only marks: trimmed already, and short enough to count characters in
            bounds = f"{runs}{self.length(g, counted=True)}"
        else:
            trimmed = _TRIMMED if g.whitespace == "normalize" else f"{_TRIMMED} & {_NO_ESCAPED_BREAK_AT_AN_END}"
            narrowed = self.known(g) or self.after_labels(g)
            most = f" & /\\S+(\\s\\S+){{0,{g.most_words - 1}}}/" if g.most_words and not narrowed else ""
            bounds = f"{narrowed or self.source(g)}{most} & {trimmed}{self.length(g)}"
        banned = [term for v in excluded if isinstance(v, str) for term in _same_thing(v)]
        banned += [_literal(escaped(run)) for run in refused_runs(g, self.text)]  # a listed run that does not look like the field's
        self.rules.append(f"{name}: {bounds}" + (f" & ~({' | '.join(dict.fromkeys(banned))})" if banned else ""))
        return name

    def source(self, g: Grounded) -> str:
        """The terminal of the text's spans under ``g``'s options: one per document and set of options."""
        key = (g.whitespace, g.case, g.span, g.drop_marks)
        if key not in self.sources:
            recase = g.recasings
            chunkings = list(dict.fromkeys(tuple(block) for f in recase for block in _chunks(self.text, g, f)))
            name = f"SOURCE{len(self.rules)}"  # unique across a document's paragraph builders
            self.rules.append(f"{name}: " + " | ".join(f"%regex {json.dumps({'substring_chunks': list(c)}, ensure_ascii=False)}" for c in chunkings))
            self.sources[key] = name
        return self.sources[key]

    def known(self, g: Grounded) -> str | None:
        """With ``known_values``: a terminal for the spans of the text that write one of them (``known_spans``), each
        as the text writes it (recased as ``case`` says); None where they narrow nothing."""
        written = known_written(g, self.text)
        if not written:
            return None
        name = f"KNOWN{len(self.rules)}"
        self.rules.append(f"{name}: " + " | ".join(_literal(escaped(v)) for v in written))
        return name

    def after_labels(self, g: Grounded) -> str | None:
        """With ``labels`` (or ``lines.first``) on a run of words: a terminal for the runs ``labelled_runs`` finds, each
        start's as a chain of optional pieces (or, with ``ends_on``, the runs that end on such a word, where any does);
        None where neither narrows anything."""
        found = labelled_runs(g, self.text)
        if found is None:
            return None
        chains, ended = found
        runs = [_literal(run) for run in ended] or [self.prefixes([_literal(c) for c in chunks]) for chunks in chains]
        name = f"LABELLED{len(self.rules)}"
        self.rules.append(f"{name}: " + " | ".join(dict.fromkeys(runs)))
        return name

    def prefixes(self, pieces: list[str]) -> str:
        """The non-empty prefixes of ``pieces`` as nested optional groups (``"a" (" " ("b")?)?``); past ``NESTED_MOST``
        pieces the rest is a terminal of its own, since llguidance's Lark parser refuses deeper nesting (``lark
        grammar too deeply nested``: a 120-character ``maxLength`` after a label)."""
        head, rest = pieces[:NESTED_MOST], pieces[NESTED_MOST:]
        tail = ""
        if rest:
            body = self.prefixes(rest)
            tail = f"TAIL{len(self.rules)}"
            self.rules.append(f"{tail}: {body}")
            tail = f" ({tail})?"
        return "".join(f"{p} (" for p in head[:-1]) + head[-1] + tail + ")?" * (len(head) - 1)

    def line_runs(self, g: Grounded) -> str | None:
        """With ``includes``, ``ends_on``, ``lines.first`` or ``to_block_end`` on a run of lines: a terminal for the
        runs they allow (``line_run_starts``), spelled out line by line; None where they narrow nothing. A run starts
        on one of the ``lines.first`` lines, holds a line that writes an included word (where the text writes one
        that such a start can reach: at most ``RUN_LINES`` lines on), takes up to ``RUN_LINES`` lines past it (or
        ends on an ``ends_on`` line, or on its block's last line with ``to_block_end``), and never crosses a line of
        only marks (``***``, ``----``) or one that ``cut_before`` cut. Each start is a chain of nested optional
        lines: a "contains" regex intersected with a long text's substrings exhausts llguidance's lexer (``too many
        expressions constructed``)."""
        lines, cut = text_lines(self.text, g)
        starts = line_run_starts(g, lines, cut)
        if not starts:
            return None
        runs, separator = [], _literal(escaped(" " if g.whitespace == "normalize" else "\n"))
        for recase in g.recasings:
            pieces = [_literal(escaped(recase(line))) for line in lines]
            for first, least, most in starts:
                needed = f" {separator} ".join(pieces[first : least + 1])
                more = pieces[least + 1 : most + 1]
                runs.append(needed + "".join(f" ({separator} {p}" for p in more) + ")?" * len(more))
        name = f"RUNS{len(self.rules)}"
        self.rules.append(f"{name}: " + " | ".join(dict.fromkeys(runs)))
        return name

    @staticmethod
    def length(g: Grounded, counted: bool = False) -> str:
        """The string's length bounds as a lexeme, for runs of words (and, ``counted``, the runs of lines that
        ``includes`` or ``lines`` spell out). Other runs of lines leave them to the schema check: counting characters
        across a long text's lines made llguidance build more lexer states than it allows (``too many expressions
        constructed``)."""
        low, high = max(g.schema.get("minLength", LEAST_CHARS), LEAST_CHARS), g.schema.get("maxLength", "")
        return f" & /.{{{low},{high}}}/" if g.span == "words" or counted else ""

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name


def _chunks(text: str, g: Grounded, recase: Callable[[str], str]) -> list[list[str]]:
    """The JSON-escaped text cut into the pieces whose runs a span may be: words, spaces and single
    marks; or (``span: lines``) whole lines, each one piece, between the separators that join them
    (one space where whitespace is normalised, as the text is read then; else the line break), in
    blocks that end where ``cut_before`` cut a line."""
    if g.span == "words":
        text = normalize_whitespace(text) if g.whitespace == "normalize" else text
        return [word_chunks(escaped(recase(text)))]
    separator = escaped(" " if g.whitespace == "normalize" else "\n")
    blocks: list[list[str]] = [[]]
    for line, ends in zip(*text_lines(text, g)):
        blocks[-1] += [escaped(recase(line)), separator] if line else []
        if ends:
            blocks.append([])
    return [block[:-1] for block in blocks if block]


def _same_thing(value: str) -> list[str]:
    """Lark terms for the spans an excluded string takes away: any span that contains it, and each run of its words."""
    whole, runs = _word_runs(value)
    return [f"/[\\s\\S]*/ {_literal(whole)} /[\\s\\S]*/", *(f"{_AROUND} {_literal(run)} {_AROUND}" for run in runs)]


def _takes_away(value: str) -> Callable[[str], bool]:
    """What ``_same_thing(value)`` takes away, as a test of a candidate: does it hold ``value``, or is it a run of its
    words? (One pattern per value, for the many candidates a list of runs tests against it.)"""
    whole, runs = _word_runs(value)
    run = re.compile(rf"{_AROUND[1:-1]}(?:{'|'.join(map(re.escape, runs))}){_AROUND[1:-1]}")
    return lambda candidate: whole in (spelled := escaped(candidate)) or run.fullmatch(spelled) is not None


def _names_again(items: tuple[str, ...]) -> bool:
    """Does a later item of ``items`` hold an earlier one, or is it a run of its words (``_takes_away``)?"""
    return any(any(map(_takes_away(first), items[i + 1 :])) for i, first in enumerate(items))


def _word_runs(value: str) -> tuple[str, list[str]]:
    """``value`` JSON-escaped, and each run of its words (as ``word_chunks`` cuts it)."""
    chunks = word_chunks(escaped(value))
    ends = [i for i, c in enumerate(chunks) if not c.isspace()]
    return "".join(chunks), ["".join(chunks[i : j + 1]) for i in ends for j in ends if j >= i]


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
