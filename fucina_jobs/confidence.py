"""Per-value confidence: how sure the model was of each value it wrote.

The decoder records the probability of every token it selects
(``Sampler.next``); the engine maps each token to its characters in the
output text (``token_spans``). Here each value (a JSON leaf, or a regex's
named group) collects the tokens that overlap its characters; its confidence
is their mean probability, and their minimum is kept beside it. The mean ranks
right and wrong values better (``docs/CONFIDENCE.md``: the minimum marks long
values down for their length). A record's confidence is its least certain
value. Pure functions: no model, no files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

#: A string literal, or a number, true, false or null: the JSON leaves.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
#: The path of a JSON document that is not an object; the sink stores such a record as ``{"value": ...}``.
ROOT = "value"


@dataclass(frozen=True)
class Leaf:
    """One value: its path (``vendor``, ``items[0].name``, a regex group's name) and its text's character span.

    A JSON value's span is its literal, quotes included."""

    path: str
    start: int
    end: int


@dataclass
class Confidence:
    """One output's confidence: the record's (its least certain value's mean) and each value's min and mean."""

    record: float | None = None
    field_min: dict[str, float] = field(default_factory=dict)
    field_mean: dict[str, float] = field(default_factory=dict)


def leaves(text: str) -> list[Leaf]:
    """Every leaf value of the JSON ``text``, in text order; ``ValueError`` when it is not JSON."""
    found: list[Leaf] = []
    start = _skip(text, 0)
    end = _skip(text, _value(text, start, "" if text[start : start + 1] == "{" else ROOT, found))
    if end != len(text):
        raise ValueError(f"extra text after the JSON value at character {end}")
    return found


def _skip(text: str, pos: int) -> int:
    return _WHITESPACE.match(text, pos).end()


def _expect(text: str, pos: int, char: str) -> int:
    if text[pos : pos + 1] != char:
        raise ValueError(f"expected {char!r} at character {pos}")
    return pos + 1


def _value(text: str, pos: int, path: str, found: list[Leaf]) -> int:
    """Scan the value at ``pos``, appending its leaves; return the position after it."""
    opener = text[pos : pos + 1]
    if opener in ("{", "["):
        closer = "}" if opener == "{" else "]"
        pos = _skip(text, pos + 1)
        index = 0
        while text[pos : pos + 1] != closer:
            if index:
                pos = _skip(text, _expect(text, pos, ","))
            if opener == "{":
                key = _STRING.match(text, pos)
                if key is None:
                    raise ValueError(f"expected a key at character {pos}")
                name = json.loads(key.group())
                pos = _skip(text, _expect(text, _skip(text, key.end()), ":"))
                child = f"{path}.{name}" if path else name
            else:
                child = f"{path}[{index}]"
            pos = _skip(text, _value(text, pos, child, found))
            index += 1
        return pos + 1
    literal = _STRING.match(text, pos) or _SCALAR.match(text, pos)
    if literal is None:
        raise ValueError(f"expected a JSON value at character {pos}")
    found.append(Leaf(path, pos, literal.end()))
    return literal.end()


def token_spans(tokens: Sequence[int], decode: Callable[[list[int]], str]) -> list[tuple[int, int]]:
    """Each token's character span in ``decode(tokens)``.

    Decodes a short window per token rather than every prefix, so the cost
    stays linear. A character whose bytes are split over several tokens
    belongs to all of them: until its last byte arrives the window decodes to
    a replacement character, and those tokens share the span of that character.
    """
    spans: list[tuple[int, int]] = []
    offset = 0  # characters of the text decoded so far
    window = 0  # where the decode window starts; a few tokens of context keep leading spaces right
    pending = 0  # tokens waiting for the rest of a split character
    for i in range(len(tokens)):
        before = decode(list(tokens[window : i - pending]))
        after = decode(list(tokens[window : i + 1]))
        if after.endswith("\ufffd") and i + 1 < len(tokens):
            pending += 1
            continue
        end = offset + len(after) - len(before)
        spans += [(offset, end)] * (pending + 1)
        offset, pending = end, 0
        window = max(0, i - 3)
    return spans


def output_values(text: str, kind: str | None, regex: re.Pattern | None = None) -> list[Leaf] | None:
    """The values of an output, by constraint kind: a JSON output's leaves, a regex's named groups,
    or None for a Lark output (one value: the whole text). An output that does not parse has none."""
    if kind in (None, "json_schema"):
        try:
            return leaves(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python's stack: it will be a reject
            return []
    if kind == "regex":
        match = regex.fullmatch(text) if regex is not None else None
        return [Leaf(name, *match.span(name)) for name in regex.groupindex if match.start(name) >= 0] if match else []
    return None


def confidence(text: str, spans: Sequence[tuple[int, int]], probs: Sequence[float], values: Sequence[Leaf] | None) -> Confidence:
    """Min and mean token probability per value of ``text``; the record's is its lowest value mean.

    ``values`` None means the whole output is one value (a Lark job): the
    record's confidence is then the mean over all its tokens. An output
    without values (it will be a reject) gets no confidence."""
    if values is None:
        return Confidence(sum(probs) / len(probs) if probs else None)
    result = Confidence()
    for leaf in values:
        start, end = leaf.start, leaf.end
        if text[start : start + 1] == '"' and end - start > 2:  # a string's characters, not its quotes (often merged with the key's)
            start, end = start + 1, end - 1
        chosen = [p for (s, e), p in zip(spans, probs) if s < end and e > start]
        if chosen:
            result.field_min[leaf.path] = min(chosen)
            result.field_mean[leaf.path] = sum(chosen) / len(chosen)
    result.record = min(result.field_mean.values(), default=None)
    return result


#: The most confidence a value gets that does not look like its field's gold (``x-grounded.shape``). Why 0.05: below
#: the mean token probability of nearly every value a model writes with a grammar's help, so the review page, least
#: certain first, shows such a value before the values the model was unsure of for its own reasons.
MISFIT_CONFIDENCE = 0.05


def capped(result: Confidence, misfits: Sequence[str]) -> Confidence:
    """``result`` with the values at ``misfits`` (paths) held to at most ``MISFIT_CONFIDENCE``: a value grounded in
    the text that does not look like its field's values slipped past the soft filter, and a person should see it
    first. The record's confidence is its least certain value's, as before."""
    if not misfits or result.record is None:
        return result
    means = {p: min(m, MISFIT_CONFIDENCE) if p in misfits else m for p, m in result.field_mean.items()}
    mins = {p: min(m, MISFIT_CONFIDENCE) if p in misfits else m for p, m in result.field_min.items()}
    return Confidence(min(means.values(), default=None), mins, means)
