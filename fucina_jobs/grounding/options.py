"""The options of ``x-grounded``, as one table: each option once, with what it applies to, the values it takes, its
default and its doc line.

Everything else reads the table. ``Grounded`` (``declaration.py``) has one attribute per option, holding what the
option's ``Value`` keeps of the declared value; ``read`` checks a declaration against the table, with one-line errors
that name the property, the option, the value and what is allowed; docs/GROUNDING.md's options table is
``doc_table()`` (``python -m fucina_jobs.grounding.options docs/GROUNDING.md`` rewrites it; a test checks that it is
current); ``learn`` tries the options marked ``tried``. Adding an option is one row here, plus its behaviour in
the grammar (and the check or spans, where it changes what a value is) and its tests.

The options come in groups by what they do: where a value may be, how the text is read, which of the candidates
left is preferred, and, on an array, which block of the text each item is read from. An option may be an object
whose keys are options of their own (``lines``: ``LINES_PARTS``), checked, documented and learned one by one, and
named ``lines.first`` wherever one is meant. Former names are read by ``old_spellings.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import unicodedata
from dataclasses import KW_ONLY, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from . import shape

KEYWORD = "x-grounded"
#: How a value may recase its span of the text: ``case`` -> the recasings the grammar offers (``exact``: none; the
#: others, learned from gold that is re-cased: one of them each; ``insensitive``: any of them).
RECASINGS = {
    "exact": (str,),
    "upper": (str.upper,),
    "lower": (str.lower,),
    "title": (str.title,),
    "insensitive": (str, str.lower, str.upper, str.title),
}
#: What one item of a grounded array (``"x-grounded": {"items": UNIT}``) is read from, and where one ends.
ITEM_UNITS = {"paragraph": re.compile(r"\n[ \t\r\f\v]*\n\s*"), "line": re.compile(r"\n")}


class GroundingError(ValueError):
    """An ``x-grounded`` declaration is malformed or sits where it cannot apply."""


# What an option applies to: a property's kind, or for a string, its span; and an array.
NUMBER, INTEGER, DATE, ENUM = "number", "integer", "date", "enum"
WORDS, WORD, LINES = "words", "word", "lines"
ARRAY = "array"
STRINGS = (WORDS, WORD, LINES)
NUMBERS = (NUMBER, INTEGER)
VALUES = (NUMBER, INTEGER, DATE)  # the kinds whose candidates are values the text writes
LABELLED = (*VALUES, WORDS, WORD)  # where a label marks a value: after it, or below it
FIELDS = (*VALUES, ENUM, *STRINGS)
#: A need met by the property itself, not by another option: it may be null.
NULLABLE = "nullable"


class Declared(NamedTuple):
    """The property an option is declared on: its kind (``string`` for any span), what options see of it (its kind,
    or a string's span), its enum's members, and whether it may be null."""

    kind: str
    target: str
    members: tuple[Any, ...] = ()
    nullable: bool = False

    @property
    def values(self) -> str:
        """What its values are called in a message."""
        return "members of the enum" if self.kind == ENUM else f"{self.kind} values"


@dataclass(frozen=True)
class Value:
    """What an option takes: how a message and the docs say it (``{values}``: the property's values), whether a
    declared value is one, the values ``learn`` can try one by one, and what ``Grounded`` keeps of it."""

    says: str
    fits: Callable[[Any, Declared], bool]
    choices: tuple[Any, ...] = ()
    keep: Callable[[Any], Any] = lambda value: value


class Needs(NamedTuple):
    """What an option needs besides: one of ``any_of`` given too (an option's name, or ``NULLABLE``), on ``on``."""

    any_of: tuple[str, ...]
    on: tuple[str, ...] = (*FIELDS, ARRAY)

    def says(self) -> str:
        where = "" if set(self.on) >= set(FIELDS) else f" on {_scope(self.on)}"
        return "on a property that may be null" if self.any_of == (NULLABLE,) else f"with {_or(self.any_of)}{where}"

    def missed(self) -> str:
        return "on a property that may not be null" if self.any_of == (NULLABLE,) else f"without {_or(self.any_of)}"


class Group(NamedTuple):
    """Options that do the same kind of thing, as the docs present them."""

    title: str
    about: str


@dataclass(frozen=True)
class Option:
    """One ``x-grounded`` option: its name, group, the values it takes and its default (as a schema writes them),
    what it applies to and needs, its doc line, an example for messages, whether ``learn`` tries its values one by
    one by the pick rate (``tried``), and whether an array's declaration must give it (``required``)."""

    name: str
    group: Group
    value: Value
    default: Any
    _: KW_ONLY
    on: tuple[str, ...]
    doc: str
    needs: tuple[Needs, ...] = ()
    example: str = ""
    tried: bool = False
    required: bool = False
    parts: Mapping[str, "Option"] | None = None  # an object's keys, each an option of its own

    def kept(self, value: Any) -> Any:
        """What ``Grounded`` keeps of a declared value (None stays None; an object: its keys' kept values, by name)."""
        if self.parts is not None:
            return {name: part.kept(value.get(name, part.default)) for name, part in self.parts.items()}
        return None if value is None else self.value.keep(value)

    def trials(self) -> list[Any]:
        """The values ``learn`` tries instead of the default."""
        return [choice for choice in self.value.choices if not _same(choice, self.default)]

    def misplaced(self, on: Declared, given: Callable[[str], bool]) -> str | None:
        """Why this option cannot sit on ``on`` (the end of a message: `` on a number property``), with ``given``
        saying which other options are given; None where it can."""
        if on.target not in self.on:
            return f" on {_one(on.target)}"
        missing = next((n for n in self.needs if on.target in n.on and not any(on.nullable if o == NULLABLE else given(o) for o in n.any_of)), None)
        return None if missing is None else " " + missing.missed()

    def rule(self, on: Declared) -> str:
        """What this option must be, said of ``on`` for a message."""
        says = self.value.says.format(values=on.values)
        scope = _scope(self.on)
        return "".join(
            [says, f" (e.g. {self.example})" if self.example else "", f", on {scope} only" if scope else "", *(f", {n.says()}" for n in self.needs)]
        )


def _same(value: Any, default: Any) -> bool:
    """Is a declared value the default itself (``0`` is not ``false``)?"""
    return type(value) is type(default) and value == default


def _readable_regex(pattern: str) -> bool:
    """Can both Python and llguidance read ``pattern``? llguidance reads no look-arounds and no anchors."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return pattern != "" and not re.search(r"\(\?[=!<]|(?<![\\\[])\^|(?<!\\)\$", pattern)


def _strings(value: Any, declared: Declared) -> bool:
    return isinstance(value, list) and all(isinstance(w, str) and w.strip() for w in value)


def _spellings(value: Any, declared: Declared) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= set(declared.members)
        and all(isinstance(v, list) and all(isinstance(w, str) and w for w in v) for v in value.values())
    )


def _fits(value: Any, declared: Declared) -> bool:
    """Is ``value`` one the property may hold: a number of its kind, an ISO date, a member, a non-empty string?"""
    kind = declared.kind
    if kind in NUMBERS:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (kind == NUMBER or float(value).is_integer())
    if kind == DATE:
        try:
            return isinstance(value, str) and dt.date.fromisoformat(value).isoformat() == value
        except ValueError:
            return False
    return isinstance(value, str) and value != "" and (kind != ENUM or value in declared.members)


def one_of(*choices: str) -> Value:
    """A value that is one of ``choices``, which ``learn`` could try each."""
    return Value("one of " + ", ".join(choices), lambda value, declared: isinstance(value, str) and value in choices, choices)


def count(unit: str) -> Value:
    """A whole number of ``unit``, at least one."""
    return Value(f"a whole number of {unit}, at least 1", lambda value, declared: type(value) is int and value >= 1)


#: What a label's weight says (``"labels": {"total": 1, "total rounded": 2}``). Why two weights: a label either marks
#: the values a field may take, or, among those left, the ones preferred (a receipt's ``total rounded`` below its ``total``).
MARKS, PREFERS = 1, 2


def weighed(value: list[str] | dict[str, int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A ``labels`` value as (the labels that mark, the labels that prefer): a list's labels all mark."""
    if isinstance(value, dict):
        return tuple(k for k, w in value.items() if w == MARKS), tuple(k for k, w in value.items() if w == PREFERS)
    return tuple(value), ()


def _weighed(value: Any, declared: Declared) -> bool:
    if isinstance(value, list):
        return _strings(value, declared)
    return (
        isinstance(value, dict)
        and all(isinstance(k, str) and k.strip() and type(w) is int and w in (MARKS, PREFERS) for k, w in value.items())
        and (declared.target in VALUES or PREFERS not in value.values())
    )


BOOL = Value("true or false", lambda value, declared: isinstance(value, bool), (True, False))
REGEX = Value("a regex without look-arounds or anchors", lambda value, declared: isinstance(value, str) and _readable_regex(value))
LABELS = Value(
    "a list of non-empty strings, or an object of them to a weight, 1 or 2 (2 on number, integer or date properties)", _weighed, keep=weighed
)
STRING_LIST = Value("a list of non-empty strings", _strings, keep=tuple)
VALUE_LIST = Value("a list of {values}", lambda value, declared: isinstance(value, list) and all(_fits(v, declared) for v in value), keep=tuple)
SPELLING_MAP = Value("an object of enum members to lists of non-empty strings", _spellings, keep=lambda v: tuple((k, tuple(w)) for k, w in v.items()))
STEP = Value(
    "a positive number",
    lambda value, declared: isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
    keep=lambda value: Decimal(str(value)),
)
SHAPE = Value(
    "an object of " + ", ".join(f"{key} ({says})" for key, says in shape.KEYS.items()), lambda value, declared: shape.valid(value), keep=shape.kept
)
PUNCTUATION = Value(
    "a string of punctuation marks", lambda value, declared: isinstance(value, str) and all(unicodedata.category(c).startswith("P") for c in value)
)

WHERE = Group(
    "Where a value may be",
    "The grammar offers only the spans or values in such a place; most of these narrow only where the text has one (a "
    "label, a word the regex matches), so a document laid out another way still gets a record. The post-check looks "
    "through the whole text.",
)
READ = Group(
    "How the text is read", "What the text's spans, numbers, dates and spellings are taken to write: the grammar, the check and the spans agree."
)
PREFER = Group(
    "Which candidate is preferred",
    "Of the candidates left, the grammar holds these: preferences, not facts, so a rule's repair (docs/RULES.md) may "
    "exclude the value held, and the next one is held then.",
)
ITEMS = Group("Arrays", "On an array: which block of the text each item is read from.")


def _table(*options: Option) -> dict[str, Option]:
    return {option.name: option for option in options}


#: The keys of ``lines``: where a run of words (``span: words``) or of whole lines (``span: lines``) starts and stops.
LINES_PARTS = _table(
    Option(
        "first",
        WHERE,
        count("lines"),
        None,
        on=(WORDS, LINES),
        doc="a run starts on one of the text's (an item's paragraph's) first N lines; a run of words, where the text writes none of its `labels`",
        example="3",
    ),
    Option(
        "starts_on",
        WHERE,
        REGEX,
        None,
        on=(LINES,),
        doc="each block's runs start on its first line that writes a word this regex matches, of the starts the other options allow",
        example="[^\\W_]*[0-9][^\\W_]*",
    ),
    Option(
        "ends_on",
        WHERE,
        REGEX,
        None,
        on=(WORDS, LINES),
        doc="only the runs that end on a line (a word) this regex matches, where a run the other options allow can",
        needs=(Needs(("labels", "lines.first"), (WORDS,)),),
        example="SDN|BHD",
    ),
    Option(
        "shortest",
        WHERE,
        BOOL,
        False,
        on=(LINES,),
        doc="of the runs that end on an `ends_on` line, for each such line only the shortest that names more than the ending",
        needs=(Needs(("lines.ends_on",)),),
    ),
    Option(
        "cut_before",
        WHERE,
        REGEX,
        None,
        on=(WORDS, LINES),
        doc="a line (a run of words) stops before the first word this regex matches, and no run goes past it; a start it matches starts none",
        example="TEL|FAX",
    ),
    Option(
        "to_block_end",
        WHERE,
        BOOL,
        False,
        on=(LINES,),
        doc="a run ends on its block's last line (before a line of marks or a cut), where it can reach it",
    ),
    Option(
        "within_line",
        WHERE,
        BOOL,
        False,
        on=(WORDS,),
        doc="a run takes no word of the next line: it ends where its line does, or before",
        needs=(Needs(("labels", "lines.first"), (WORDS,)),),
    ),
)


#: A grounded field's options, by group; ``span`` first, since what the others apply to depends on it.
OPTIONS = _table(
    Option(
        "span",
        WHERE,
        one_of(WORDS, WORD, LINES),
        WORDS,
        on=STRINGS,
        doc="a run of whole words of the text; one word less the marks at its ends (`word`: an identifier); a run of whole lines (`lines`: an address)",
    ),
    Option(
        "labels",
        WHERE,
        LABELS,
        [],
        on=LABELLED,
        doc="where the text writes one of these labels, only a value a label marks: the number or date after it (or below it), the words that "
        "start after it; a label of weight 2 (numbers and dates) only prefers: of the candidates left, those it marks, where it marks any",
        example='{"total": 1, "total rounded": 2}',
    ),
    Option(
        "only_labelled",
        WHERE,
        BOOL,
        False,
        on=LABELLED,
        doc="where the text writes none of the `labels` (with none given: always), the field is null, not any value the text writes",
        needs=(Needs((NULLABLE,)),),
    ),
    Option(
        "lines",
        WHERE,
        Value("an object of " + ", ".join(LINES_PARTS), lambda value, declared: isinstance(value, dict)),
        {},
        on=(WORDS, LINES),
        doc="where a run of words or lines may start and stop among the text's lines: the keys below",
        example='{"first": 3, "cut_before": "TEL|FAX"}',
        parts=LINES_PARTS,
    ),
    Option(
        "includes",
        WHERE,
        REGEX,
        None,
        on=(WORD, LINES),
        doc="where the text writes a word this regex matches whole, only such a word, or a run of lines that reaches a line writing one",
        example="[0-9]{5}",
    ),
    Option(
        "capitalized",
        WHERE,
        BOOL,
        False,
        on=(WORDS,),
        doc="a run after a label or on a top line starts on a word the text writes with a capital letter or a digit: a name, not a sentence's next word",
        needs=(Needs(("labels", "lines.first"), (WORDS,)),),
    ),
    Option(
        "most_words",
        WHERE,
        count("words"),
        None,
        on=(WORDS,),
        doc="a run takes at most this many words, after a label and where the text writes none alike",
        example="2",
    ),
    Option(
        "known_values",
        WHERE,
        STRING_LIST,
        (),
        on=(WORDS,),
        doc="where the text writes some of these values (any case and spacing), the value is one of those spans: of those a label marks, where it writes a label",
        example='["New York"]',
    ),
    Option(
        "shape",
        WHERE,
        SHAPE,
        {},
        on=(*NUMBERS, *STRINGS),
        doc="the candidates the text writes are only those that look like the field's gold (`learn` writes it): with a letter, at least "
        "`least_chars` long, not made only of `not_only` words, a number within `magnitude`; where none would be left, all of them. "
        "Free runs of words (no labels, no known values) are not listed, and stay as they are",
        example='{"letter": true, "least_chars": 3, "not_only": ["the", "to"], "magnitude": [10, 50000]}',
    ),
    Option(
        "whitespace",
        READ,
        one_of("normalize", "exact"),
        "normalize",
        on=STRINGS,
        doc="`normalize`: runs of whitespace, line breaks included, match one space; `exact`: the text's own",
    ),
    Option(
        "case",
        READ,
        one_of(*RECASINGS),
        "exact",
        on=(*STRINGS, ENUM),
        doc="`upper`, `lower`, `title`: the value is its span in that case; `insensitive`: in the text's case or any of those",
    ),
    Option(
        "drop_marks",
        READ,
        PUNCTUATION,
        "",
        on=STRINGS,
        doc="the value is its span without these punctuation marks (`Palm Inc.` for `Palm, Inc.`)",
        example='","',
    ),
    Option(
        "amount",
        READ,
        BOOL,
        False,
        on=NUMBERS,
        doc="only numbers written as money: by a currency sign, code or letter symbol, or with two decimals; never a percentage",
        tried=True,
    ),
    Option(
        "units",
        READ,
        STRING_LIST,
        [],
        on=(WORDS,),
        doc="the value is a count of one of these units, written `N unit`: `three (3) years` is `3 years` (a quantity)",
        example='["year", "month"]',
    ),
    Option(
        "day_first",
        READ,
        BOOL,
        None,
        on=(DATE,),
        doc="`04/12/2017` is 4 December (`true`) or 12 April (`false`); unset: as the text's dates that read one way read, else both",
        tried=True,
    ),
    Option(
        "spellings",
        READ,
        SPELLING_MAP,
        {},
        on=(ENUM,),
        doc="member -> the other ways a text writes it (`€` for `EUR`); unset: an ISO 4217 code's signs (`grounding/currencies.py`)",
    ),
    Option(
        "allow",
        PREFER,
        VALUE_LIST,
        [],
        on=FIELDS,
        doc="values held although the text does not write them (`0` for a tax); with `labels`, only where no label marks a value",
    ),
    Option(
        "rounding",
        PREFER,
        STEP,
        None,
        on=(NUMBER,),
        doc="a cash rounding step: where the text writes a rounding line, no candidate that a multiple of the step left is within a step of",
        example="0.05",
    ),
    Option(
        "pick",
        PREFER,
        one_of("largest", "smallest"),
        None,
        on=(*NUMBERS, DATE),
        doc="only the largest (smallest) candidate left, the latest (earliest) of dates: a total is the largest amount labelled total, a due date the latest date",
        tried=True,
    ),
    Option(
        "prefer_members",
        PREFER,
        BOOL,
        False,
        on=(ENUM,),
        doc="where the text writes some members themselves, only those, not the ones it shows by a spelling alone (`$1,450.00 CAD`: CAD)",
    ),
)
#: A grounded array's options.
ARRAY_OPTIONS = _table(
    Option(
        "items",
        ITEMS,
        one_of(*ITEM_UNITS),
        None,
        on=(ARRAY,),
        doc="each item is read from one paragraph (line) of the text, a later one than the item before, its grounded values that paragraph's",
        required=True,
    ),
    Option(
        "every", ITEMS, BOOL, False, on=(ARRAY,), doc="an item for every paragraph (line) that writes what an item's required grounded fields need"
    ),
)


def read(given: Mapping[str, Any], on: Declared, where: str, table: Mapping[str, Option]) -> dict[str, Any]:
    """The options of ``table`` that ``given`` (a declaration's object) declares on ``on``, as ``Grounded`` keeps them,
    defaults for the rest (an object option's keys likewise, as a dict); ``GroundingError`` with a one-line message
    where an option is unknown or not allowed."""

    def declares(name: str) -> bool:
        head, _, part = name.partition(".")
        value = given.get(head, table[head].default if head in table else None)
        if part:
            value, default = (value.get(part) if isinstance(value, dict) else None), table[head].parts[part].default
        else:
            default = table[head].default
        return value is not None and not _same(value, default)

    return _read(given, on, where, table, declares, "")


def _read(
    given: Mapping[str, Any], on: Declared, where: str, table: Mapping[str, Option], declares: Callable[[str], bool], prefix: str
) -> dict[str, Any]:
    unknown = set(given) - set(table)
    if unknown:
        raise GroundingError(
            f"{where}: {KEYWORD}{'.' if prefix else ''}{prefix.rstrip('.')} has unknown option(s) {sorted(unknown)}; known: {', '.join(table)}"
        )
    for option in table.values():
        if option.required and option.name not in given:
            raise _error(where, prefix, option, on, "given")
        value = given.get(option.name, option.default)
        if _same(value, option.default):
            continue
        problem = "" if not option.value.fits(value, on) else option.misplaced(on, declares)
        if problem is not None:
            raise _error(where, prefix, option, on, _json(value) + problem)
        if option.parts:
            _read(value, on, where, option.parts, declares, f"{prefix}{option.name}.")
    return {name: option.kept(given.get(name, option.default)) for name, option in table.items()}


def _error(where: str, prefix: str, option: Option, on: Declared, instead: str) -> GroundingError:
    return GroundingError(f"{where}: {KEYWORD}.{prefix}{option.name} must be {option.rule(on)}; not {instead}")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _or(names: Iterable[str]) -> str:
    names = list(names)
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def _scope(on: Iterable[str]) -> str:
    """What an option applies to, in words: ``number or integer properties``, ``a string of span: words or lines``;
    empty where it applies to every field."""
    on = set(on)
    if on >= set(FIELDS) or on == {ARRAY}:
        return ""
    kinds = [kind for kind in (NUMBER, INTEGER, DATE, ENUM) if kind in on] + (["string"] if on >= set(STRINGS) else [])
    spans = [span for span in STRINGS if span in on] if not on >= set(STRINGS) else []
    parts = ([f"{_or(kinds)} properties"] if kinds else []) + ([f"a string of span: {_or(spans)}"] if spans else [])
    return " or ".join(parts)


def _one(target: str) -> str:
    """One property of a target, in words: ``a number property``, ``a string of span: lines``."""
    if target in STRINGS:
        return f"a string of span: {target}"
    return f"{'an' if target[0] in 'aeiou' else 'a'} {target} property"


def doc_table(tables: Iterable[Mapping[str, Option]] = (OPTIONS, ARRAY_OPTIONS)) -> str:
    """docs/GROUNDING.md's options tables, one per group, in the table's order."""
    out: list[str] = []
    options = [option for table in tables for option in table.values()]
    for group in dict.fromkeys(option.group for option in options):
        out += [
            f"**{group.title}.** {group.about}",
            "",
            *_HEADER,
        ]
        out += [_doc_row(option) for option in options if option.group == group]
        out.append("")
        for option in (option for option in options if option.group == group and option.parts):
            out += [f"**The keys of `{option.name}`.** Each applies where the table says, as an option of its own would.", "", *_HEADER]
            out += [_doc_row(part, f"{option.name}.") for part in option.parts.values()]
            out.append("")
    return "\n".join(out)


_HEADER = ("| option | applies to | value | default | what it does |", "| --- | --- | --- | --- | --- |")


def _doc_row(option: Option, prefix: str = "") -> str:
    value = option.value.says.format(values="the property's values")
    if option.value.choices and all(isinstance(c, str) for c in option.value.choices):
        value = "one of " + ", ".join(f"`{c}`" for c in option.value.choices)
    value += f" (e.g. `{option.example}`)" if option.example else ""
    on = "; ".join([_scope(option.on) or ("an array" if option.on == (ARRAY,) else "any property"), *(n.says() for n in option.needs)])
    cells = [f"`{prefix}{option.name}`", on, value, _doc_default(option), option.doc]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _doc_default(option: Option) -> str:
    if option.required:
        return "required"
    if option.default in (None, ""):
        return "none"
    return f"`{option.default}`" if isinstance(option.default, str) else f"`{_json(option.default)}`"


#: Where docs/GROUNDING.md's options tables start and end.
DOC_MARKERS = ("<!-- options table: python -m fucina_jobs.grounding.options docs/GROUNDING.md writes it -->\n", "<!-- end of the options table -->")


def rewrite_doc(path: Path) -> None:
    """Write ``doc_table()`` between ``DOC_MARKERS`` in the markdown file at ``path``."""
    text = path.read_text(encoding="utf-8")
    start, end = (text.index(marker) for marker in DOC_MARKERS)
    path.write_text(text[: start + len(DOC_MARKERS[0])] + doc_table() + "\n" + text[end:], encoding="utf-8")


if __name__ == "__main__":
    rewrite_doc(Path(sys.argv[1]))
