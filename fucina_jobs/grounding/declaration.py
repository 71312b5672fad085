"""Which fields of a JSON schema are grounded, read from the ``x-grounded`` keyword.

A property says ``"x-grounded": true`` (or an options object) to mean: its
value must be found in the row's source text. Strings are verbatim spans,
numbers are numbers the text writes, ``format: date`` strings are dates it
writes, and enum members are those the text writes (or one of their declared
``spellings``, such as ``€`` for ``EUR``). JSON Schema validators and llguidance ignore unknown ``x-`` keywords,
so a grounded schema stays an ordinary schema everywhere else.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from decimal import Decimal
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, NamedTuple

KEYWORD = "x-grounded"
#: What one item of a grounded array (``"x-grounded": {"items": UNIT}``) is read from, and where one ends.
ITEM_UNITS = {"paragraph": re.compile(r"\n[ \t\r\f\v]*\n\s*"), "line": re.compile(r"\n")}
_WHITESPACE = ("normalize", "exact")
#: How a value may recase its span of the text: ``case`` -> the recasings the grammar offers (``exact``: none; the
#: others, learned from gold that is re-cased: one of them each; ``insensitive``: any of them).
RECASINGS = {
    "exact": (str,),
    "upper": (str.upper,),
    "lower": (str.lower,),
    "title": (str.title,),
    "insensitive": (str, str.lower, str.upper, str.title),
}
_CASE = tuple(RECASINGS)
_SPAN = ("words", "word", "lines")
_VALUES = ("number", "integer", "date")  # the kinds whose candidates are values the text writes: numbers and dates
_OPTIONS = (
    "whitespace",
    "case",
    "span",
    "allow",
    "amount",
    "spellings",
    "labels",
    "includes",
    "first_lines",
    "ends_on",
    "shortest",
    "cut_before",
    "to_block_end",
    "starts_on",
    "prefer_labels",
    "largest",
    "rounding",
    "day_first",
    "prefer_members",
    "units",
    "only_labelled",
    "most_words",
    "drop_marks",
    "known_values",
)


class GroundingError(ValueError):
    """An ``x-grounded`` declaration is malformed or sits where it cannot apply."""


@dataclass(frozen=True)
class Grounded:
    """One grounded field: where it is, what kind of value it holds, and its options.

    ``path`` names properties by key and array items by ``"[]"``.
    """

    path: tuple[str, ...]
    kind: str  # string | number | integer | date | enum | quantity (a string with ``units``)
    schema: dict[str, Any] = field(compare=False)
    whitespace: str = "normalize"  # normalize: runs of whitespace, line breaks included, match one space
    case: str = "exact"  # insensitive: the value may be recased; upper, lower, title: it is, so (``RECASINGS``)
    span: str = "words"  # strings: a run of whole words of the text; one word (word); a run of whole lines (lines)
    allow: tuple[Any, ...] = ()  # values accepted although the text does not write them, e.g. 0 for tax
    amount: bool = False  # numbers: only those written as money (currency sign or code, or two decimals; no percentages)
    spellings: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)  # enum member -> how texts write it
    labels: tuple[str, ...] = ()  # only values written right after one of these labels, where the text labels any
    includes: str | None = None  # span: lines and word: only values holding a word this regex matches whole, where the text writes one
    first_lines: int | None = None  # span: lines and words: only runs that start on one of the text's (an item's paragraph's) first N lines
    ends_on: str | None = None  # span: lines (words): only runs whose last line writes (that end on) a word this regex matches, where one can
    shortest: bool = False  # span: lines, with ends_on: the shortest run to each such line that names more than it
    cut_before: str | None = None  # span: lines (words): a line (a run after a label) stops before the first word this regex matches
    to_block_end: bool = False  # span: lines: a run ends on its block's last line (before marks or a cut), where it can
    starts_on: str | None = None  # span: lines: a run starts on its block's first line that writes a word this regex matches, where one can
    prefer_labels: tuple[str, ...] = ()  # numbers and dates: only the values left that one of these labels marks, where any is left
    largest: bool = False  # numbers: only the largest value left (of the labelled ones, with labels); a rule's repair may exclude it
    rounding: Decimal | None = (
        None  # numbers: cash rounding's step; where the text writes a rounding line, of two values left closer than it, its multiple
    )
    day_first: bool | None = None  # dates: 04/12/2017 is 4 December (True) or April 12 (False); None: both
    prefer_members: bool = False  # enums: where the text writes members themselves, not those it shows by a spelling only
    units: tuple[str, ...] = ()  # strings: the value is a count of one of these units, normalised to ``N unit`` (``three (3) years``: 3 years)
    only_labelled: bool = False  # with labels, nullable fields: where the text writes none of the labels, the field is null
    most_words: int | None = None  # span: words strings: a run takes at most this many words
    drop_marks: str = ""  # strings: the value is its span without these punctuation marks (``Palm Inc.`` for ``Palm, Inc.``)
    known_values: tuple[str, ...] = ()  # span: words strings: where the text writes some of these (any case), one of those spans
    #: The other fields' labels (``grounded_fields``): where one of them is written, longer, around a label, it is theirs.
    rivals: tuple[str, ...] = field(default=(), compare=False)

    @property
    def recasings(self) -> tuple[Callable[[str], str], ...]:
        """How the grammar may write the text's spans: as written, or recased (``case``), less ``drop_marks``."""
        if not self.drop_marks:
            return RECASINGS[self.case]
        marks = re.compile(rf"\s*[{re.escape(self.drop_marks)}]")
        return tuple(lambda text, f=f: f(marks.sub("", text)) for f in RECASINGS[self.case])

    @property
    def folds_case(self) -> bool:
        """Is a value compared with the text whatever its case? Everywhere ``case`` lets it differ from the text's."""
        return self.case != "exact"

    def included(self) -> re.Pattern | None:
        """``includes`` as a Python pattern that finds such a word (a run of letters and digits) in a text."""
        return whole_words(self.includes)

    def evidence(self, member: str) -> tuple[str, ...]:
        """What in a text shows an enum member: the member itself and its declared spellings."""
        return (member, *self.spellings.get(member, ()))

    @property
    def nullable(self) -> bool:
        return _nullable(self.schema)

    @property
    def members(self) -> list[str]:
        """An enum's members but null."""
        return [m for m in self.schema.get("enum", ()) if m is not None]

    @property
    def name(self) -> str:
        return ".".join(self.path).replace(".[]", "[]")


def _nullable(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return (isinstance(kind, list) and "null" in kind) or kind == "null" or None in node.get("enum", ())


def whole_words(pattern: str | None) -> re.Pattern | None:
    """``pattern`` as a Python pattern that matches only whole words: no letter or digit glued to either end."""
    return re.compile(rf"(?<![^\W_])(?:{pattern})(?![^\W_])") if pattern else None


def grounded_fields(schema: Any) -> list[Grounded]:
    """Every grounded field of ``schema``, in key order; raise ``GroundingError`` naming a bad one."""
    if not isinstance(schema, dict):
        return []
    found = _with_rivals(list(_walk(schema, ())))
    reachable = {id(g.schema) for g in found} | {id(node) for node, _ in _arrays(schema, ()).values()}
    stray = next((p for p, node in _all_declarations(schema, ()) if id(node) not in reachable), None)
    if stray is not None:
        raise GroundingError(f"{'/'.join(stray)}: {KEYWORD} only applies under properties or array items, not inside anyOf, oneOf, allOf or $defs")
    return found


def _with_rivals(fields: list[Grounded]) -> list[Grounded]:
    """Each field with the labels of the others: fields of one schema compete for the labels a text writes."""
    labels = {g.path: {*g.labels, *g.prefer_labels} for g in fields}
    return [replace(g, rivals=tuple(sorted(set().union(*(v for p, v in labels.items() if p != g.path)) - labels[g.path]))) for g in fields]


class Units(NamedTuple):
    """How a grounded array's items sit in the text: one per ``unit`` (paragraph or line) at most, or one for ``every`` unit."""

    unit: str
    every: bool = False


def grounded_arrays(schema: Any) -> dict[tuple[str, ...], Units]:
    """Arrays declared ``"x-grounded": {"items": "paragraph"}`` (or ``"line"``; ``"every": true``), path -> their units.

    Each item is read from one paragraph (line) of the text, a later one than the item before (with ``every``: the
    next one, so every paragraph is an item), and its grounded values are that paragraph's."""
    return {path: units for path, (_, units) in _arrays(schema, ()).items()} if isinstance(schema, dict) else {}


def unit_spans(text: str, unit: str) -> list[tuple[int, int]]:
    """The paragraphs (or lines) of ``text`` that hold anything but whitespace, as ``(start, end)``."""
    spans, start = [], 0
    for m in ITEM_UNITS[unit].finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _arrays(node: dict[str, Any], path: tuple[str, ...]) -> dict[tuple[str, ...], tuple[dict, Units]]:
    found = {}
    if _is_array(node) and node.get(KEYWORD) not in (None, False):
        options = node[KEYWORD]
        if (
            not isinstance(options, dict)
            or not {"items"} <= set(options) <= {"items", "every"}
            or options["items"] not in ITEM_UNITS
            or not isinstance(options.get("every", False), bool)
        ):
            raise GroundingError(
                f'{_where(path)}: {KEYWORD} on an array takes {{"items": "paragraph"}} or {{"items": "line"}} '
                f'(each item read from one paragraph or line of the text, in text order) and "every": true '
                f"(an item for every one), not {options!r}"
            )
        found[path] = (node, Units(options["items"], options.get("every", False)))
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            found |= _arrays(sub, (*path, key))
    if isinstance(node.get("items"), dict):
        found |= _arrays(node["items"], (*path, "[]"))
    return found


def _is_array(node: dict[str, Any]) -> bool:
    kinds = node.get("type")
    return "items" in node or kinds == "array" or (isinstance(kinds, list) and "array" in kinds)


def _walk(node: dict[str, Any], path: tuple[str, ...]) -> Iterator[Grounded]:
    if node.get(KEYWORD) not in (None, False) and not _is_array(node):
        yield _declared(node, path)
        return
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            yield from _walk(sub, (*path, key))
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], (*path, "[]"))


def _all_declarations(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict]]:
    if isinstance(node, dict):
        if node.get(KEYWORD) not in (None, False):
            yield path, node
        for key, sub in node.items():
            yield from _all_declarations(sub, (*path, key))
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _all_declarations(sub, (*path, str(i)))


def _declared(node: dict[str, Any], path: tuple[str, ...]) -> Grounded:
    where = _where(path)
    options = node[KEYWORD]
    if options is True:
        options = {}
    if not isinstance(options, dict):
        raise GroundingError(f"{where}: {KEYWORD} must be true or an object of options, not {options!r}")
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise GroundingError(f"{where}: {KEYWORD} has unknown option(s) {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    kind = _kind(node, where)
    amount = options.get("amount", False)
    if not isinstance(amount, bool) or (amount and kind not in ("number", "integer")):
        raise GroundingError(f"{where}: {KEYWORD}.amount must be true or false, and only number or integer properties are amounts")
    whitespace = options.get("whitespace", "normalize")
    case = options.get("case", "exact")
    if whitespace not in _WHITESPACE:
        raise GroundingError(f"{where}: {KEYWORD}.whitespace={whitespace!r}; use one of {', '.join(_WHITESPACE)}")
    if case not in _CASE:
        raise GroundingError(f"{where}: {KEYWORD}.case={case!r}; use one of {', '.join(_CASE)}")
    span = options.get("span", "words")
    if span not in _SPAN or (span != "words" and kind != "string"):
        raise GroundingError(f"{where}: {KEYWORD}.span={span!r}; use one of {', '.join(_SPAN)}, on string properties only")
    allow = options.get("allow", [])
    if not isinstance(allow, list) or not all(_fits(v, kind) for v in allow):
        raise GroundingError(f"{where}: {KEYWORD}.allow must be a list of {kind} values, not {allow!r}")
    spellings = options.get("spellings", {})
    members = node.get("enum", [])
    if kind == "enum" and not set(allow) <= set(members):
        raise GroundingError(f"{where}: {KEYWORD}.allow must list members of the enum, not {allow!r}")
    if spellings and (
        kind != "enum"
        or not isinstance(spellings, dict)
        or not set(spellings) <= set(members)
        or not all(isinstance(v, list) and all(isinstance(w, str) and w for w in v) for v in spellings.values())
    ):
        raise GroundingError(f"{where}: {KEYWORD}.spellings must map enum members to lists of non-empty strings")
    labels = options.get("labels", [])
    if (
        not isinstance(labels, list)
        or not all(isinstance(w, str) and w.strip() for w in labels)
        or (labels and kind == "enum")
        or (labels and span == "lines")
    ):
        raise GroundingError(
            f"{where}: {KEYWORD}.labels must be a list of non-empty strings, on number, integer, date or string properties (not span: lines)"
        )
    includes = options.get("includes")
    if includes is not None and (span == "words" or not isinstance(includes, str) or not _regex(includes)):
        raise GroundingError(
            f"{where}: {KEYWORD}.includes must be a regex without look-arounds or anchors (a word the value holds, e.g. [0-9]{{5}}), "
            "on a string of span: lines or span: word"
        )
    first_lines = options.get("first_lines")
    if first_lines is not None and (span == "word" or type(first_lines) is not int or first_lines < 1):
        raise GroundingError(f"{where}: {KEYWORD}.first_lines must be a whole number of lines, at least 1, on a string of span: lines or words")
    ends_on, cut_before = options.get("ends_on"), options.get("cut_before")
    if ends_on is not None and (
        span == "word" or (span == "words" and not (labels or first_lines)) or not isinstance(ends_on, str) or not _regex(ends_on)
    ):
        raise GroundingError(
            f"{where}: {KEYWORD}.ends_on must be a regex without look-arounds or anchors, on a string of span: lines, "
            "or of span: words with labels or first_lines (the runs it ends start after a label or on a top line)"
        )
    shortest = options.get("shortest", False)
    if not isinstance(shortest, bool) or (shortest and ends_on is None):
        raise GroundingError(f"{where}: {KEYWORD}.shortest must be true or false, with ends_on (on a string of span: lines)")
    if cut_before is not None and (span == "word" or kind != "string" or not isinstance(cut_before, str) or not _regex(cut_before)):
        raise GroundingError(f"{where}: {KEYWORD}.cut_before must be a regex without look-arounds or anchors, on a string of span: lines or words")
    to_block_end = options.get("to_block_end", False)
    if not isinstance(to_block_end, bool) or (to_block_end and span != "lines"):
        raise GroundingError(f"{where}: {KEYWORD}.to_block_end must be true or false, on a string of span: lines only")
    starts_on = options.get("starts_on")
    if starts_on is not None and (span != "lines" or not isinstance(starts_on, str) or not _regex(starts_on)):
        raise GroundingError(f"{where}: {KEYWORD}.starts_on must be a regex without look-arounds or anchors, on a string of span: lines only")
    prefer_labels = options.get("prefer_labels", [])
    if (
        not isinstance(prefer_labels, list)
        or not all(isinstance(w, str) and w.strip() for w in prefer_labels)
        or (prefer_labels and kind not in _VALUES)
    ):
        raise GroundingError(f"{where}: {KEYWORD}.prefer_labels must be a list of non-empty strings, on number, integer or date properties only")
    largest = options.get("largest", False)
    if not isinstance(largest, bool) or (largest and kind not in ("number", "integer")):
        raise GroundingError(f"{where}: {KEYWORD}.largest must be true or false, on number or integer properties only")
    rounding = options.get("rounding")
    if rounding is not None and (isinstance(rounding, bool) or not isinstance(rounding, (int, float)) or rounding <= 0 or kind != "number"):
        raise GroundingError(f"{where}: {KEYWORD}.rounding must be a positive number (a cash rounding step, e.g. 0.05), on number properties only")
    day_first = options.get("day_first")
    if day_first is not None and (not isinstance(day_first, bool) or kind != "date"):
        raise GroundingError(f"{where}: {KEYWORD}.day_first must be true or false, on format: date strings only")
    prefer_members = options.get("prefer_members", False)
    if not isinstance(prefer_members, bool) or (prefer_members and kind != "enum"):
        raise GroundingError(f"{where}: {KEYWORD}.prefer_members must be true or false, on enum properties only")
    units = options.get("units", [])
    if not isinstance(units, list) or not all(isinstance(u, str) and u.strip() for u in units) or (units and (kind != "string" or span != "words")):
        raise GroundingError(
            f'{where}: {KEYWORD}.units must be a list of non-empty strings (e.g. ["year", "month"]), on a string of span: words only'
        )
    only_labelled = options.get("only_labelled", False)
    if not isinstance(only_labelled, bool) or (only_labelled and not (labels and _nullable(node))):
        raise GroundingError(f"{where}: {KEYWORD}.only_labelled must be true or false, with labels, on a property that may be null")
    most_words = options.get("most_words")
    if most_words is not None and (type(most_words) is not int or most_words < 1 or kind != "string" or span != "words"):
        raise GroundingError(f"{where}: {KEYWORD}.most_words must be a whole number of words, at least 1, on a string of span: words")
    drop_marks = options.get("drop_marks", "")
    if not isinstance(drop_marks, str) or not all(unicodedata.category(c).startswith("P") for c in drop_marks) or (drop_marks and kind != "string"):
        raise GroundingError(f'{where}: {KEYWORD}.drop_marks must be a string of punctuation marks (e.g. ","), on string properties only')
    known_values = options.get("known_values", [])
    if (
        not isinstance(known_values, list)
        or not all(isinstance(v, str) and v.strip() for v in known_values)
        or (known_values and (kind != "string" or span != "words"))
    ):
        raise GroundingError(
            f'{where}: {KEYWORD}.known_values must be a list of non-empty strings (e.g. ["New York"]), on a string of span: words only'
        )
    spellings = {k: tuple(v) for k, v in spellings.items()}
    return Grounded(
        path,
        "quantity" if units else kind,
        node,
        whitespace,
        case,
        span,
        tuple(allow),
        amount,
        spellings,
        tuple(labels),
        includes,
        first_lines,
        ends_on,
        shortest,
        cut_before,
        to_block_end,
        starts_on,
        tuple(prefer_labels),
        largest,
        None if rounding is None else Decimal(str(rounding)),
        day_first,
        prefer_members,
        tuple(units),
        only_labelled,
        most_words,
        drop_marks,
        tuple(known_values),
    )


def _regex(pattern: str) -> bool:
    """Can both Python and llguidance read ``pattern``? llguidance reads no look-arounds and no anchors."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return pattern != "" and not re.search(r"\(\?[=!<]|(?<![\\\[])\^|(?<!\\)\$", pattern)


def _kind(node: dict[str, Any], where: str) -> str:
    if "const" in node:
        raise GroundingError(f"{where}: {KEYWORD} on a const says nothing more; remove it")
    if "enum" in node:
        if not all(isinstance(v, str) or v is None for v in node["enum"]):
            raise GroundingError(f"{where}: {KEYWORD} on an enum needs string members (and null, if it may be empty)")
        return "enum"
    kinds = node.get("type")
    kinds = [k for k in kinds if k != "null"] if isinstance(kinds, list) else [kinds]
    if len(kinds) == 1 and kinds[0] == "string":
        return "date" if node.get("format") == "date" else "string"
    if len(kinds) == 1 and kinds[0] in ("number", "integer"):
        return kinds[0]
    raise GroundingError(f"{where}: {KEYWORD} applies to string, number, integer, date or enum properties, not type {node.get('type')!r}")


def _fits(value: Any, kind: str) -> bool:
    if kind in ("number", "integer"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (kind == "number" or float(value).is_integer())
    if kind == "date":
        try:
            return isinstance(value, str) and dt.date.fromisoformat(value).isoformat() == value
        except ValueError:
            return False
    return isinstance(value, str) and value != ""


def _where(path: tuple[str, ...]) -> str:
    """A walk path as the JSON pointer into the schema, e.g. ``properties/lines/items/properties/sku``."""
    return "/".join(part for p in path for part in (("items",) if p == "[]" else ("properties", p))) or "<root>"


def leaves(value: Any, path: tuple[str, ...]) -> Iterator[Any]:
    """The values a record holds at a grounded ``path`` (arrays fan out)."""
    if not path:
        yield value
        return
    head, rest = path[0], path[1:]
    if head == "[]":
        for item in value if isinstance(value, list) else []:
            yield from leaves(item, rest)
    elif isinstance(value, dict) and head in value:
        yield from leaves(value[head], rest)
