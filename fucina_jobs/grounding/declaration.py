"""Which fields of a JSON schema are grounded, read from the ``x-grounded`` keyword.

A property says ``"x-grounded": true`` (or an options object) to mean: its
value must be found in the row's source text. Strings are verbatim spans,
numbers are numbers the text writes, ``format: date`` strings are dates it
writes, and enum members are those the text writes (or one of their declared
``spellings``, such as ``€`` for ``EUR``). JSON Schema validators and llguidance ignore unknown ``x-`` keywords,
so a grounded schema stays an ordinary schema everywhere else.
"""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from .currencies import SIGNS
from . import old_spellings
from .options import ARRAY, ARRAY_OPTIONS, ITEM_UNITS, KEYWORD, LINES_PARTS, OPTIONS, RECASINGS, Declared, GroundingError, Option, read
from .paths import field_name
from .shape import Shape


@dataclass(frozen=True, kw_only=True)
class Lines:
    """The keys of ``lines`` (``options.LINES_PARTS``): where a run of words or of whole lines starts and stops."""

    first: int | None = None
    starts_on: str | None = None
    ends_on: str | None = None
    shortest: bool = False
    cut_before: str | None = None
    to_block_end: bool = False
    within_line: bool = False


@dataclass(frozen=True)
class Grounded:
    """One grounded field: where it is (``path`` names properties by key and array items by ``"[]"``), what kind of
    value it holds (string, number, integer, date, enum, or quantity: a string with ``units``), its schema, and an
    attribute per option of ``options.OPTIONS``, holding what the option keeps of the declared value (a tuple for a
    list; ``labels`` keeps the labels that mark, ``preferred_labels`` those of weight 2). ``rivals``: the other
    fields' labels (``grounded_fields``): where one of them is written, longer, around a label, it is theirs."""

    path: tuple[str, ...]
    kind: str
    schema: dict[str, Any] = field(compare=False)
    _: KW_ONLY
    span: str = "words"
    labels: tuple[str, ...] = ()
    preferred_labels: tuple[str, ...] = ()
    only_labelled: bool = False
    lines: Lines = Lines()
    includes: str | None = None
    capitalized: bool = False
    most_words: int | None = None
    known_values: tuple[str, ...] = ()
    shape: Shape = Shape()
    whitespace: str = "normalize"
    case: str = "exact"
    drop_marks: str = ""
    amount: bool = False
    units: tuple[str, ...] = ()
    day_first: bool | None = None
    spellings: tuple[tuple[str, tuple[str, ...]], ...] = ()
    allow: tuple[Any, ...] = ()
    rounding: Decimal | None = None
    pick: str | None = None
    prefer_members: bool = False
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
        """What in a text shows an enum member: the member itself and its declared spellings; where the field declares
        none, a currency code's signs (``currencies.SIGNS``)."""
        return (member, *(dict(self.spellings) if self.spellings else SIGNS).get(member, ()))

    @property
    def nullable(self) -> bool:
        return _nullable(self.schema)

    @property
    def members(self) -> list[str]:
        """An enum's members but null."""
        return [m for m in self.schema.get("enum", ()) if m is not None]

    @property
    def name(self) -> str:
        return field_name(self.path)

    @property
    def declared(self) -> Declared:
        """The property as the options table sees it: a string by its span (a quantity is a run of words)."""
        kind = "string" if self.kind == "quantity" else self.kind
        return Declared(kind, self.span if kind == "string" else kind, tuple(self.schema.get("enum", ())), self.nullable)

    def takes(self, option: str) -> bool:
        """Could this field take ``option`` (``lines.first`` for a key of ``lines``): does it apply to its kind (a
        string's span), with the options it needs?"""
        head, _, part = option.partition(".")
        if part and not self.takes(head):
            return False
        return _option(option).misplaced(self.declared, self.given) is None

    def given(self, option: str) -> bool:
        """Is ``option`` (``lines.first`` for a key of ``lines``) declared, not left at its default?"""
        return _kept_attributes(self, option) != _kept_attributes(Grounded(self.path, self.kind, self.schema), option)

    def with_options(self, options: Mapping[str, Any]) -> Grounded:
        """This field with ``options`` (as a schema writes them, e.g. a list of labels; ``lines.first`` for a key of
        ``lines``) in place of its own."""
        lines = {part: value for name, value in options.items() if (part := name.partition(".")[2])}
        changed = _attributes({name: value for name, value in options.items() if "." not in name})
        if lines:
            changed["lines"] = replace(changed.get("lines", self.lines), **{p: LINES_PARTS[p].kept(v) for p, v in lines.items()})
        return replace(self, **changed)

    def without(self, *options: str) -> Grounded:
        """This field with ``options`` back at their defaults."""
        return self.with_options({name: _option(name).default for name in options})


def _option(name: str) -> Option:
    """The option ``name`` names (``lines.first``: a key of ``lines``)."""
    head, _, part = name.partition(".")
    return OPTIONS[head].parts[part] if part else OPTIONS[head]


def _attributes(options: Mapping[str, Any]) -> dict[str, Any]:
    """``Grounded``'s attributes for options as a schema writes them (``read``'s kept values, for ``_declared``)."""
    out = {}
    for name, value in options.items():
        kept = OPTIONS[name].kept(value)
        if name == "labels":
            out["labels"], out["preferred_labels"] = kept
        elif name == "lines":
            out["lines"] = Lines(**kept)
        else:
            out[name] = kept
    return out


def _kept_attributes(g: Grounded, option: str) -> Any:
    head, _, part = option.partition(".")
    if part:
        return getattr(g.lines, part)
    return (g.labels, g.preferred_labels) if head == "labels" else getattr(g, head)


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
    declarations = list(_all_declarations(schema, ()))
    old_spellings.warn_once({"/".join(p): node[KEYWORD] for p, node in declarations if isinstance(node[KEYWORD], dict)}, "a schema")
    found = _with_rivals(list(_walk(schema, ())))
    reachable = {id(g.schema) for g in found} | {id(node) for node, _ in _arrays(schema, ()).values()}
    stray = next((p for p, node in declarations if id(node) not in reachable), None)
    if stray is not None:
        raise GroundingError(f"{'/'.join(stray)}: {KEYWORD} only applies under properties or array items, not inside anyOf, oneOf, allOf or $defs")
    return found


def _with_rivals(fields: list[Grounded]) -> list[Grounded]:
    """Each field with the labels of the others: fields of one schema compete for the labels a text writes."""
    labels = {g.path: {*g.labels, *g.preferred_labels} for g in fields}
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
        if not isinstance(options, dict):
            raise GroundingError(f"{_where(path)}: {KEYWORD} on an array must be an object of options ({', '.join(ARRAY_OPTIONS)}), not {options!r}")
        read_ = read(options, Declared(ARRAY, ARRAY), _where(path), ARRAY_OPTIONS)
        found[path] = (node, Units(read_["items"], read_["every"]))
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
    options = old_spellings.modern(options, where)
    kind = _kind(node, where)
    target = options.get("span", OPTIONS["span"].default) if kind == "string" else kind
    read(options, Declared(kind, target, tuple(node.get("enum", ())), _nullable(node)), where, OPTIONS)
    kept = _attributes({name: options.get(name, option.default) for name, option in OPTIONS.items()})
    return Grounded(path, "quantity" if kept["units"] else kind, node, **kept)


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


def _where(path: tuple[str, ...]) -> str:
    """A walk path as the JSON pointer into the schema, e.g. ``properties/lines/items/properties/sku``."""
    return "/".join(part for p in path for part in (("items",) if p == "[]" else ("properties", p))) or "<root>"
