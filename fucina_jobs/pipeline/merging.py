"""One record from a chunked row's chunk records, as the JSON schema says (``x-merge`` overrides a field's rule).

| a schema node | default rule | ``x-merge`` may also say |
| --- | --- | --- |
| object with ``properties`` | ``fields``: each property merged by its own rule | ``first``, ``most_confident`` (the whole object from one chunk) |
| array | ``concat``: every chunk's items in text order, an item found twice in an overlap kept once, the first ``maxItems`` | ``all`` (no dedup), ``first``, ``most_confident`` |
| anything else (string, number, boolean, enum, ``anyOf``...) | ``most_confident``: the non-null value the model was surest of | ``first``, ``last`` |

Null and absent values never win over a value. ``first``/``last`` take the first/last
chunk (in text order) that has a value; ``most_confident`` the one whose least certain
leaf has the highest mean token probability (ties: the earlier chunk). Scalars that
disagree are kept as conflicts: the path, the value kept and the alternatives with
their chunks and confidence.

``concat``'s duplicates: two items of consecutive chunks are one item when they share
a grounded value at the same offsets of the row's text (the same occurrence cannot
belong to two items); without located values, when they are equal. Of two duplicates
the one kept is the one farther from the cut that separates the chunks (a copy near
a chunk's edge may have been read from half the item); a dropped copy that disagreed
is a conflict too. An array of names (``uniqueItems``, or items that are grounded
strings: the parties of a contract) keeps each name once, wherever and however often
the chunks write it: two strings whose words are the same but for case, punctuation
and whitespace (``ACME, INC.`` and ``Acme Inc``) are one item, the first one written.

Every merged value remembers where it came from: its chunk, its span in the row's
text (when located) and its confidence, all under the merged record's paths
(``receipts[7].total``). Pure: no model, no files.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Iterator

from ..confidence import ROOT, Confidence
from .chunking import Chunk

KEYWORD = "x-merge"
RULES = {
    "object": ("fields", "first", "most_confident"),
    "array": ("concat", "all", "first", "most_confident"),
    "scalar": ("most_confident", "first", "last"),
}


class MergeError(ValueError):
    """An ``x-merge`` rule that does not exist or does not apply where it is written."""


@dataclass(eq=False)
class Part:
    """One chunk's validated record, with its values' confidence and spans (in the chunk's text) by path."""

    chunk: Chunk
    record: Any
    confidence: Confidence = field(default_factory=Confidence)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Conflict:
    path: str
    kept: Any
    chunk: int
    alternatives: list[tuple[Any, int, float | None]]  # value, chunk, confidence

    def as_row(self) -> dict[str, Any]:
        """The ``merge_conflicts`` column's form: values as JSON text."""
        return {
            "path": self.path,
            "kept": _canonical(self.kept),
            "chunk": self.chunk,
            "alternatives": [{"value": _canonical(v), "chunk": c, "confidence": p} for v, c, p in self.alternatives],
        }


@dataclass
class Merged:
    record: Any
    confidence: Confidence
    chunks: dict[str, int]  # leaf path -> the chunk its value came from
    _: KW_ONLY
    spans: dict[str, tuple[int, int]]  # leaf path -> its span in the row's text, where located
    conflicts: list[Conflict]
    duplicates: int  # items dropped as found twice in an overlap


def check_rules(schema: Any, where: str = "") -> None:
    """Raise ``MergeError`` naming the first ``x-merge`` that is unknown or misplaced (at job start, before any model loads)."""
    if not isinstance(schema, dict):
        return
    if KEYWORD in schema:
        kind = _kind(schema)
        if schema[KEYWORD] not in RULES[kind]:
            raise MergeError(
                f"{where or '<root>'}: {KEYWORD}={schema[KEYWORD]!r} does not apply to {'an' if kind[0] in 'ao' else 'a'} {kind}; "
                f"use one of {', '.join(RULES[kind])}"
            )
    for key, sub in (schema.get("properties") or {}).items():
        check_rules(sub, f"{where}/properties/{key}".lstrip("/"))
    if isinstance(schema.get("items"), dict):
        check_rules(schema["items"], f"{where}/items".lstrip("/"))


def merge(schema: Any, parts: list[Part]) -> Merged:
    """The chunks' records as one record, with the origin of every value."""
    m = _Merge()
    top = "" if all(isinstance(p.record, dict) for p in parts) else ROOT  # confidence's path for a record that is no object
    record = m.node(schema if isinstance(schema, dict) else {}, [_Candidate(p, top, p.record) for p in parts], top)
    return m.result(record, top)


@dataclass(eq=False)
class _Candidate:
    part: Part
    path: str  # where the value sits in its chunk's record
    value: Any

    @property
    def index(self) -> int:
        return self.part.chunk.index


class _Merge:
    def __init__(self) -> None:
        self.origins: dict[str, tuple[Part, str]] = {}  # merged path -> (part, chunk path) of a value taken whole
        self.conflicts: list[Conflict] = []
        self.duplicates = 0

    def node(self, schema: dict[str, Any], candidates: list[_Candidate], path: str) -> Any:
        present = [c for c in candidates if c.value is not None]
        if not present:
            return None
        kind = _kind(schema)
        rule = schema.get(KEYWORD, RULES[kind][0])
        if rule == "fields" and all(isinstance(c.value, dict) for c in present):
            return self.fields(schema, present, path)
        if rule in ("concat", "all") and all(isinstance(c.value, list) for c in present):
            items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
            kept = self.items(items, present, path, dedup=rule == "concat", by_name=rule == "concat" and _names(schema, items))
            return self.room(schema.get("maxItems"), kept, path)
        return self.choose(present, path, "first" if rule in ("fields", "concat", "all") else rule)

    def fields(self, schema: dict[str, Any], candidates: list[_Candidate], path: str) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else {}
        keys = list(properties) + [k for c in candidates for k in c.value if k not in properties]
        merged = {}
        for key in dict.fromkeys(keys):
            holding = [_Candidate(c.part, _child(c.path, key), c.value[key]) for c in candidates if key in c.value]
            if holding:
                merged[key] = self.node(properties.get(key, extra), holding, _child(path, key))
        return merged

    def choose(self, candidates: list[_Candidate], path: str, rule: str) -> Any:
        """One candidate's value, whole: the first, the last or the most confident; disagreeing values are a conflict.

        An empty array or object says the chunk found nothing: it wins only where no chunk found anything."""
        candidates = [c for c in candidates if c.value not in ([], {})] or candidates
        if rule == "most_confident":
            kept = max(candidates, key=lambda c: (_score(c) if _score(c) is not None else -1.0, -c.index))
        else:
            kept = candidates[0] if rule == "first" else candidates[-1]
        others = {}
        for c in candidates:
            if _canonical(c.value) != _canonical(kept.value):
                others.setdefault(_canonical(c.value), (c.value, c.index, _score(c)))
        if others:
            self.conflicts.append(Conflict(path, kept.value, kept.index, list(others.values())))
        return self.take(kept, path)

    def take(self, c: _Candidate, path: str) -> Any:
        self.origins[path] = (c.part, c.path)
        return c.value

    def items(self, schema: dict[str, Any], arrays: list[_Candidate], path: str, dedup: bool, by_name: bool) -> list[tuple[_Candidate, Any]]:
        """Every chunk's items in chunk order; with ``dedup``, an item of the chunk before that is the same item is kept once;
        ``by_name``, a string item is kept once in the whole array (``named``)."""
        kept: list[_Candidate] = []
        names: dict[str, _Candidate] = {}  # a string item's name -> the item kept for it
        for array in arrays:
            fresh = [_Candidate(array.part, _index(array.path, i), v) for i, v in enumerate(array.value)]
            earlier = [k for k in kept if k.index == array.index - 1] if dedup else []
            for item in fresh:
                if by_name and isinstance(item.value, str):
                    self.named(item, names, kept, path)
                    continue
                twin = next((k for k in earlier if _same_item(k, item)), None)
                if twin is None:
                    kept.append(item)
                    continue
                earlier.remove(twin)  # each item matches once: two equal items in one chunk stay two
                self.duplicates += 1
                winner, loser = (item, twin) if _margin(item) > _margin(twin) else (twin, item)
                at = next(i for i, k in enumerate(kept) if k is twin)
                kept[at] = winner
                if _canonical(winner.value) != _canonical(loser.value):
                    self.conflicts.append(Conflict(_index(path, at), winner.value, winner.index, [(loser.value, loser.index, _score(loser))]))
        return [(k, self.node(schema, [k], _index(path, i))) for i, k in enumerate(kept)]

    def room(self, most: Any, items: list[tuple[_Candidate, Any]], path: str) -> list[Any]:
        """The merged items ``maxItems`` has room for, the first written; the rest is a conflict (each chunk held to it)."""
        if isinstance(most, int) and len(items) > most:
            kept, dropped = [k for k, _ in items[:most]], [k for k, _ in items[most:]]
            self.conflicts.append(Conflict(path, [k.value for k in kept], dropped[0].index, [(k.value, k.index, _score(k)) for k in dropped]))
            items = items[:most]
        return [value for _, value in items]

    def named(self, item: _Candidate, names: dict[str, _Candidate], kept: list[_Candidate], path: str) -> None:
        """A string item, kept unless one of the same name is: a list of names (the parties of a contract) names each once,
        however many chunks, or places of one chunk, write it. The first written is kept; a spelling it drops is a conflict."""
        first = names.get(_name(item.value))
        if first is None:
            names[_name(item.value)] = item
            kept.append(item)
            return
        self.duplicates += 1
        if item.value != first.value:
            self.conflicts.append(Conflict(_index(path, kept.index(first)), first.value, first.index, [(item.value, item.index, _score(item))]))

    def result(self, record: Any, top: str) -> Merged:
        confidence, chunks, spans = Confidence(), {}, {}
        for path in _leaf_paths(record, top):
            origin = next((p for p in _prefixes(path) if p in self.origins), None)
            if origin is None:
                continue
            part, at = self.origins[origin]
            source = at + path[len(origin) :]
            chunks[path] = part.chunk.index
            if source in part.confidence.field_mean:
                confidence.field_mean[path] = part.confidence.field_mean[source]
                confidence.field_min[path] = part.confidence.field_min[source]
            if source in part.spans:
                start, end = part.spans[source]
                spans[path] = (part.chunk.start + start, part.chunk.start + end)
        confidence.record = min(confidence.field_mean.values(), default=None)
        return Merged(record, confidence, chunks, spans=spans, conflicts=self.conflicts, duplicates=self.duplicates)


def _kind(schema: dict[str, Any]) -> str:
    kinds = schema.get("type")
    kinds = {kinds} if isinstance(kinds, str) else set(kinds or []) - {"null"}
    if "properties" in schema or kinds == {"object"}:
        return "object"
    if "items" in schema or kinds == {"array"}:
        return "array"
    return "scalar"


def _score(c: _Candidate) -> float | None:
    """A value's confidence: the lowest mean token probability of the leaves below it."""
    means = [p for path, p in c.part.confidence.field_mean.items() if _below(path, c.path)]
    return min(means, default=None)


def _spans_below(c: _Candidate) -> set[tuple[str, int, int]]:
    """The item's located values: (path inside the item, start, end) in the row's text."""
    out = set()
    for path, (start, end) in c.part.spans.items():
        if _below(path, c.path):
            out.add((path[len(c.path) :], c.part.chunk.start + start, c.part.chunk.start + end))
    return out


def _same_item(a: _Candidate, b: _Candidate) -> bool:
    located_a, located_b = _spans_below(a), _spans_below(b)
    if located_a and located_b:
        return bool(located_a & located_b)
    return _canonical(a.value) == _canonical(b.value)


def _names(schema: dict[str, Any], items: dict[str, Any]) -> bool:
    """Does the array list names, each once? Where it says ``uniqueItems``, or its items are grounded strings: a text writes
    a name (a party, a company) wherever it refers to it, so where a copy is found says nothing of how many there are."""
    kinds = items.get("type")
    strings = kinds == "string" or isinstance(kinds, list) and "string" in kinds
    return bool(schema.get("uniqueItems")) or strings and bool(items.get("x-grounded"))


def _name(value: str) -> str:
    """What two spellings of one name share: its words, case folded, without punctuation (``ACME, INC.`` is ``Acme Inc``)."""
    letters = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in value.casefold())
    return " ".join(letters.split())


def _margin(c: _Candidate) -> int:
    """How far the item's located values sit from its chunk's edges: a copy read from half an item sits near one."""
    located = _spans_below(c)
    if not located:
        return -c.index  # unlocated twins are equal: keep the earlier
    chunk = c.part.chunk
    return min(min(s for _, s, _ in located) - chunk.start, chunk.end - max(e for _, _, e in located))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _below(path: str, prefix: str) -> bool:
    """Is ``path`` the value at ``prefix`` or inside it?"""
    return path == prefix or not prefix or path.startswith(prefix) and path[len(prefix)] in ".["


def _prefixes(path: str) -> Iterator[str]:
    """``path`` and every path that holds it, innermost first; the record itself last (``""``)."""
    yield path
    for i in range(len(path) - 1, 0, -1):
        if path[i] in ".[":
            yield path[:i]
    yield ""


def _leaf_paths(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaf_paths(sub, _child(path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _leaf_paths(sub, _index(path, i))
    else:
        yield path


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
