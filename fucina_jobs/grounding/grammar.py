"""Source text + JSON schema -> one llguidance Lark grammar whose grounded fields can only copy the text.

The object is written out in the schema's key order as compact JSON. Fields
without grounding stay ``%json {subschema}``; a grounded string is a run of
whole words (``span: word``: one word; ``span: lines``: a run of whole lines) of the (JSON-escaped) source,
``%regex {"substring_chunks": ...}``, that neither starts nor ends with
whitespace or a lone punctuation mark; a
grounded number, date or enum member is one of those the source writes
(``values``). A grounded field the source gives nothing to hold is ``null``
where its schema allows null; otherwise ``grounded_lark`` raises
``NothingToGround``, and the row is rejected before it is decoded. Objects and
arrays are written out only where a grounded field sits below them.
``exclude`` takes values away from a field's candidates and ``pinned`` holds
fields to one value (a repair's: docs/RULES.md). The builder is pure: it knows
nothing of models, jobs or speculation.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import re
import unicodedata
from decimal import Decimal
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, NamedTuple

from .declaration import Grounded, Units, grounded_arrays, grounded_fields, unit_spans, whole_words
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

#: With ``includes``, ``ends_on`` or ``first_lines``, the most lines a run of lines (``span: lines``) takes past the
#: line it must reach (the one that writes the word, or its first line), and the farthest an included line may be from its start.
#: Why 7: the gold addresses of the 625 dev receipts span at most 5 lines, their postcode at most 4 lines below the
#: first and 3 above the last; 7 leaves room for a longer block, and every line of reach is one more nested
#: optional piece in the grammar, for each start.
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
#: The most pieces of a run of words nested in one terminal (``_Builder.prefixes``). Why 16: llguidance (1.9)
#: refuses a Lark grammar nested past 29 groups (``lark grammar too deeply nested``); 16 pieces nest 15 groups and
#: the tail's own, well inside it.
NESTED_MOST = 16
#: A list of grounded strings whose labels leave at most this many values is spelled out as the lists naming each once.
DISTINCT_MOST = 4
#: A grounded string is never empty: the least characters it takes where the schema says fewer or nothing.
_LEAST_CHARS = 1
#: A rounding line, in the languages of receipts (``ROUNDING ADJ``, ``Rundung``, ``arrondi``, ``redondeo``, ``öresavrundning``).
_ROUNDING = re.compile(r"(?i)\b(round|rundung|gerundet|arrondi|redondeo|arrotond|afrond)|avrundning")
#: What may sit around an excluded run of words and leave it the same value (``Halden Robotics,``).
_AROUND = r"/[\s,.;:!?-]*/"
#: Escapes stay whole, so a span never ends inside ``\\"`` and breaks the JSON string.
_CHUNK = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\w+|\s|.", re.DOTALL)
#: Marks that join the parts of one word (``K.K.``, ``3-8-2``, ``O'Brien``, ``A/C``, ``AT&T``): a run of words
#: neither starts nor ends between them (``Kitagawa Tool Works K.`` is no value).
_JOIN = re.compile(r"[.\-/'&]")
#: A grounded string neither starts nor ends with whitespace or a lone punctuation mark (``- ACME``,
#: ``LOT 6,``+space), and so holds something else; the text's own line breaks, JSON-escaped, count
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
        out the repeat a greedy model falls into, the first name again or a run around it (``Mark T. Bobak ("Bobak")``),
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
        self.rules.append(f"{name}: " + " | ".join(_literal(_escaped(v)) for v in written))
        return name

    def after_labels(self, g: Grounded) -> str | None:
        """With ``labels`` (or ``first_lines``) on a run of words: a terminal for the runs ``labelled_runs`` finds, each
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
        """With ``includes``, ``ends_on``, ``first_lines`` or ``to_block_end`` on a run of lines: a terminal for the
        runs they allow (``line_run_starts``), spelled out line by line; None where they narrow nothing. A run starts
        on one of the ``first_lines`` lines, holds a line that writes an included word (where the text writes one
        that such a start can reach: at most ``RUN_LINES`` lines on), takes up to ``RUN_LINES`` lines past it (or
        ends on an ``ends_on`` line, or on its block's last line with ``to_block_end``), and never crosses a line of
        only marks (``***``, ``----``) or one that ``cut_before`` cut. Each start is a chain of nested optional
        lines: a "contains" regex intersected with a long text's substrings exhausts llguidance's lexer (``too many
        expressions constructed``)."""
        lines, cut = text_lines(self.text, g)
        starts = line_run_starts(g, lines, cut)
        if not starts:
            return None
        runs, separator = [], _literal(_escaped(" " if g.whitespace == "normalize" else "\n"))
        for recase in g.recasings:
            pieces = [_literal(_escaped(recase(line))) for line in lines]
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
        ``includes`` or ``first_lines`` spell out). Other runs of lines leave them to the schema check and to the likelihood choice, whose
        options fit them: counting characters across a long text's lines made llguidance build more lexer states
        than it allows (``too many expressions constructed``)."""
        low, high = max(g.schema.get("minLength", _LEAST_CHARS), _LEAST_CHARS), g.schema.get("maxLength", "")
        return f" & /.{{{low},{high}}}/" if g.span == "words" or counted else ""

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name


def candidates(g: Grounded, text: str) -> list[str]:
    """The JSON spellings of the numbers, dates or quantities ``text`` writes that the field's schema admits."""
    if g.kind in ("date", "quantity"):
        return sorted(_spelled(g, set(written_values(g, text)) | set(g.allow)))
    values = set(written_values(g, text)) | {Decimal(str(v)) for v in g.allow}
    return sorted(_spelled(g, (v for v in values if _admits(g, v))), key=lambda s: (len(s), s))


def written_values(g: Grounded, text: str) -> dict[Any, list[tuple[int, int]]]:
    """The numbers (dates, counts) the text writes that a number (date, count) field admits -> their spans; with
    ``labels``, only the labelled ones, where the text labels any (with ``only_labelled``, none where it labels
    none, or where there are no labels). Offsets are into the NFC form of ``text``."""
    found, text = _found(g, text)
    marked = labelled(found, text, g.labels, g.rivals) if g.labels else {}
    return marked or ({} if g.only_labelled else found)


def _found(g: Grounded, text: str) -> tuple[dict[Any, list[tuple[int, int]]], str]:
    """Every number (date) the text writes that the field admits -> its spans, and the text they are in (NFC)."""
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
    no tax, not for one that writes ``BTW 21% € 124,61``); those that one of ``prefer_labels`` marks, where any is
    left (a receipt's ``TOTAL ROUNDED`` below its ``TOTAL``); with ``rounding``, where the text writes a rounding
    line, none that a multiple of the step left is within a step of (``177.22`` beside ``177.20``: cash paid is
    rounded); of those, with ``largest`` (``smallest``), the largest (smallest) alone, the latest (earliest) of dates. All are preferences, not facts: a rule's repair
    excludes the value held where it breaks a rule (inv-022's ``Items total`` before its discount), and the next
    one is held then, an allowance last."""
    found, text = _found(g, text) if (g.allow and g.labels) or g.prefer_labels else ({}, text)
    if g.allow and g.labels:
        marked = _spelled(g, labelled(found, text, g.labels, g.rivals))
        values = [v for v in values if v in marked] or values
    if g.prefer_labels:
        marked = _spelled(g, labelled(found, text, g.prefer_labels, g.rivals))
        values = [v for v in values if v in marked] or values
    if g.rounding and _ROUNDING.search(text):
        values = _rounded(values, g.rounding)
    key = str if g.kind == "date" else Decimal
    if values and (g.largest or g.smallest):
        return [max(values, key=key) if g.largest else min(values, key=key)]
    return values


def _rounded(values: list[str], step: Decimal) -> list[str]:
    """``values`` less those a multiple of ``step`` among them is within a step of (an amount before its rounding)."""
    multiples = [Decimal(v) for v in values if Decimal(v) % step == 0]
    return [v for v in values if Decimal(v) % step == 0 or not any(abs(m - Decimal(v)) < step for m in multiples)]


def words(g: Grounded, text: str, narrowed: bool = False) -> list[str]:
    """The distinct words of ``text`` (``span: word``) that fit the string's length bounds, in order: each a
    maximal run without whitespace, less the punctuation marks at its ends (``(HP-55021),`` is ``HP-55021``);
    ``narrowed``: of those that match ``includes``, where the text writes such words, the ones right after a
    label, where there are any. A label may end inside a word (``Facture n°562044387``): the rest is the word."""
    low, high = g.schema.get("minLength", _LEAST_CHARS), g.schema.get("maxLength", len(text))
    recase = g.recasings

    def fits(found: Iterable[str]) -> list[str]:
        return [w for w in dict.fromkeys(f(word) for word in found for f in recase) if w and low <= len(w) <= high]

    fitting = fits(_strip_marks(w) for w in text.split())
    if not narrowed:
        return fitting
    labelled = fits(_strip_marks(text[start:].split()[0]) for start in after_labels(text, g.labels, g.rivals))
    if writes_included(g, text):
        fitting, labelled = ([w for w in found if writes_included(g, w)] for found in (fitting, labelled))
    return labelled or ([] if g.only_labelled else fitting)


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
    """The runs of whole lines that ``includes``, ``ends_on``, ``first_lines``, ``to_block_end`` and ``starts_on``
    allow, as (first line, the line it must reach, the last line it may reach); None where they narrow nothing.
    ``includes`` (``ends_on``) narrows only where a start that ``first_lines`` allows reaches (ends on) such a line
    within the string's ``maxLength``. No run goes past a line of only marks or a line that ``cut_before`` cut
    (``cut``): that is where a run's block ends, and with ``to_block_end`` a run not held by ``ends_on`` reaches it,
    where it can. With ``starts_on``, a block's runs start on its first start that writes such a word."""
    if g.includes is None and g.ends_on is None and g.first_lines is None and not g.to_block_end and g.starts_on is None:
        return None
    joiner, high = " " if g.whitespace == "normalize" else "\n", g.schema.get("maxLength")

    def fits(a: int, b: int) -> bool:  # lines a..b joined, within maxLength
        return high is None or len(_escaped(joiner.join(lines[a : b + 1]))) <= high

    marks = [not any(c.isalnum() for c in line) for line in lines]
    included, ending = g.included(), whole_words(g.ends_on)
    starts: list[_Start] = []
    for first in range(min(len(lines), g.first_lines or len(lines))):
        if marks[first] or not fits(first, first):
            continue
        end = next((i for i in range(first + 1, len(lines)) if marks[i] or cut[i - 1]), len(lines))  # the run's block
        reach = range(first, min(end, first + 1 + RUN_LINES))
        holds = [k for k in reach if included is not None and included.search(lines[k]) and fits(first, k)]
        least = holds[0] if holds else first
        most = min(end - 1, least + RUN_LINES)
        ends = [k for k in range(least, most + 1) if ending is not None and ending.search(lines[k]) and fits(first, k)]
        if g.to_block_end and not ends and end - 1 <= most and fits(first, end - 1):
            least = end - 1  # the run must reach its block's last line
        starts += [_Start(first, k, k, bool(holds), True, end) for k in ends] or [_Start(first, least, most, bool(holds), False, end)]
    for narrows, pattern in (("holds", included), ("ends", ending)):
        if pattern is not None and any(getattr(s, narrows) for s in starts):
            starts = [s for s in starts if getattr(s, narrows)]
    if g.shortest and ending is not None:
        starts = _shortest(starts, lines, ending)
    if g.starts_on is not None:
        starts = _first_in_block(starts, lines, whole_words(g.starts_on))
    if g.first_lines is None and not g.to_block_end and g.starts_on is None and not any(s.holds or s.ends for s in starts):
        return None  # includes or ends_on alone, and no run can hold such a line: every run
    return [(s.first, s.least, s.most) for s in starts] or None


#: The most lines a value ``line_runs`` lists joins: a run longer than a letterhead's block is no field's value.
RUN_MOST_LINES = 8


def line_runs(g: Grounded, text: str) -> Iterator[str]:
    """Every run of up to ``RUN_MOST_LINES`` whole lines that fits the field's length bounds and that ``includes``,
    ``ends_on``, ``first_lines`` and ``cut_before`` allow, as a JSON string: the values a ``span: lines`` field
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
    first line with a number (``3RD FLR, AEON TAMAN MALURI SC`` above ``CHERAS, 55100 KUALA LUMPUR``), not on a
    brand line above it (``MYDIN MART SRI MUDA``); left to choose among the block's lines, a model starts on the
    postcode's line."""
    firsts: dict[int, int] = {}
    for start in starts:  # in text order
        if starting.search(lines[start.first]):
            firsts.setdefault(start.block, start.first)
    return [s for s in starts if firsts.get(s.block) == s.first] if firsts else starts


def _shortest(starts: list[_Start], lines: list[str], ending: re.Pattern) -> list[_Start]:
    """Of the runs that end on an ``ends_on`` line, for each such line the shortest that writes a word besides what
    ``ends_on`` matches and what brackets hold (``KMF FOODICIOUS SDN BHD (1132106-H)`` alone, below a brand line;
    ``POPULAR BOOK`` then ``CO. (M) SDN BHD``, both lines); the other runs as they are."""
    firsts: dict[int, list[int]] = {}
    for start in starts:
        if start.ends:
            firsts.setdefault(start.least, []).append(start.first)
    chosen = {end: next((f for f in sorted(fs, reverse=True) if _names(" ".join(lines[f : end + 1]), ending)), min(fs)) for end, fs in firsts.items()}
    return [s for s in starts if not s.ends or s.first == chosen[s.least]]


def _names(run: str, ending: re.Pattern) -> bool:
    """Does ``run`` write a word besides what ``ending`` matches and what brackets hold? A run that starts inside
    brackets (``ALAM) SDN BHD`` below ``... ENTERPRISE (SETIA``) names nothing: its start is no name's."""
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
    """With ``labels`` (or ``first_lines``) on a run of words: the runs that start with the first word after a label
    (with one of the text's first lines, where it writes no label), as JSON-escaped pieces per start and recasing, of
    at most ``most_words`` words, up to the string's ``maxLength`` (``LABELLED_CHARS`` without one) and, with
    ``cut_before``, up to the first word it matches (none from a start it matches); and, with ``ends_on``, the runs
    (escaped) that end on such a word. None where neither narrows anything, or no run is left. No run crosses a column
    gap, three spaces or more between two words of a line: laid-out text puts the letterhead and the customer's block
    side by side (``Peter-Behrens-Platz 2    SimFin Analytics GmbH``); with ``within_line``, none crosses a line break."""
    if not g.labels and not g.first_lines:
        return None
    normalize = g.whitespace == "normalize"
    flat = normalize_whitespace(text) if normalize else text
    starts = _capitalized(g, text, after_labels(text, g.labels, g.rivals))  # read in the text's own lines
    offsets = normalized_offsets(text) if normalize else None
    if starts and offsets:
        starts = sorted({offsets[start] for start in starts})
    starts = starts or _capitalized(g, flat, line_starts(text, g))
    breaks = [*COLUMN_GAP.finditer(text), *(LINE_BREAK.finditer(text) if g.within_line else ())]
    gaps = sorted(offsets[m.end()] - 1 if offsets else m.start() for m in breaks) + [len(flat)]
    cutter = whole_words(g.cut_before)
    rests = []
    for start in starts:
        cut = cutter.search(flat, start) if cutter else None
        stop = min(cut.start() if cut else len(flat), gaps[bisect.bisect_right(gaps, start)])
        rests.append(_kept(flat[start:stop].rstrip(_CUT_ENDS)) if stop < len(flat) else flat[start:])
    ending = whole_words(g.ends_on)
    chains, ended = [], []
    for recase in g.recasings:
        for rest in rests:
            chunks, room, words_left = [], g.schema.get("maxLength", LABELLED_CHARS), g.most_words or len(rest)
            for chunk in _word_chunks(_escaped(recase(rest))):
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
    start with a digit (a name's word, ``99¢ Only Stores``), not a sentence's next word (``date of the latter``,
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
    """With ``first_lines`` on a run of words: where each of the text's first lines that may start a value starts
    (a letterhead's name starts its line), in the text as the field reads it; none without the option. A line
    that ``cut_before`` cuts at its start neither starts a run nor counts: an invoice's title and its number and
    date lines come before the letterhead in many layouts."""
    if not g.first_lines:
        return []
    read = normalize_whitespace(text) if g.whitespace == "normalize" else text
    starts, at = [], 0
    for piece in [piece for piece in text_lines(text, g)[0] if piece][: g.first_lines]:
        found = read.find(piece, at)
        if found < 0:
            break
        starts.append(found + len(piece) - len(piece.lstrip()))
        at = found + len(piece)
    return starts


def writes_included(g: Grounded, text: str) -> bool:
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


def _chunks(text: str, g: Grounded, recase: Callable[[str], str]) -> list[list[str]]:
    """The JSON-escaped text cut into the pieces whose runs a span may be: words, spaces and single
    marks; or (``span: lines``) whole lines, each one piece, between the separators that join them
    (one space where whitespace is normalised, as the text is read then; else the line break), in
    blocks that end where ``cut_before`` cut a line."""
    if g.span == "words":
        text = normalize_whitespace(text) if g.whitespace == "normalize" else text
        return [_word_chunks(_escaped(recase(text)))]
    separator = _escaped(" " if g.whitespace == "normalize" else "\n")
    blocks: list[list[str]] = [[]]
    for line, ends in zip(*text_lines(text, g)):
        blocks[-1] += [_escaped(recase(line)), separator] if line else []
        if ends:
            blocks.append([])
    return [block[:-1] for block in blocks if block]


def text_lines(text: str, g: Grounded) -> tuple[list[str], list[bool]]:
    """The text's lines that hold anything but whitespace, as a ``span: lines`` value joins them, and for each
    whether ``cut_before`` cut it: such a line stops before the first word the regex matches (less the marks that
    opened it, ``(``; empty where it starts the line), and no run of lines goes past it."""
    lines = [normalize_whitespace(line) if g.whitespace == "normalize" else line for line in text.splitlines() if line.strip()]
    cutter = whole_words(g.cut_before)
    found = [cutter.search(line) if cutter else None for line in lines]
    kept = [_kept(line[: m.start()].rstrip(_CUT_ENDS)) if m else line for line, m in zip(lines, found)]
    return kept, [m is not None for m in found]


def _kept(head: str) -> str:
    """What is left of a cut line: up to a bracket it opens and does not close, whose rest was cut (``(CO.`` of
    ``DION REALTIES SDN BHD (CO. NO:20154-T)``); nothing where a letter or a mark alone is left (``T:`` before a
    phone number)."""
    opened = head.rfind("(")
    if opened > head.rfind(")"):
        head = head[:opened].rstrip(_CUT_ENDS)
    return head if len(head.strip()) >= _LEAST_KEPT else ""


def _word_chunks(escaped: str) -> list[str]:
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


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _same_thing(value: str) -> list[str]:
    """Lark terms for the spans an excluded string takes away: any span that contains it, and each run of its words."""
    whole, runs = _word_runs(value)
    return [f"/[\\s\\S]*/ {_literal(whole)} /[\\s\\S]*/", *(f"{_AROUND} {_literal(run)} {_AROUND}" for run in runs)]


def _takes_away(value: str) -> Callable[[str], bool]:
    """What ``_same_thing(value)`` takes away, as a test of a candidate: does it hold ``value``, or is it a run of its
    words? (One pattern per value, for the many candidates a list of runs tests against it.)"""
    whole, runs = _word_runs(value)
    run = re.compile(rf"{_AROUND[1:-1]}(?:{'|'.join(map(re.escape, runs))}){_AROUND[1:-1]}")
    return lambda candidate: whole in (spelled := _escaped(candidate)) or run.fullmatch(spelled) is not None


def _names_again(items: tuple[str, ...]) -> bool:
    """Does a later item of ``items`` hold an earlier one, or is it a run of its words (``_takes_away``)?"""
    return any(any(map(_takes_away(first), items[i + 1 :])) for i, first in enumerate(items))


def _word_runs(value: str) -> tuple[str, list[str]]:
    """``value`` JSON-escaped, and each run of its words (as ``_word_chunks`` cuts it)."""
    chunks = _word_chunks(_escaped(value))
    ends = [i for i, c in enumerate(chunks) if not c.isspace()]
    return "".join(chunks), ["".join(chunks[i : j + 1]) for i in ends for j in ends if j >= i]


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _admits(g: Grounded, value: Decimal) -> bool:
    s = g.schema
    if g.kind == "integer" and value != value.to_integral_value():
        return False
    bounds = [("minimum", value.__ge__), ("maximum", value.__le__), ("exclusiveMinimum", value.__gt__), ("exclusiveMaximum", value.__lt__)]
    return all(ok(Decimal(str(s[key]))) for key, ok in bounds if isinstance(s.get(key), (int, float)))
