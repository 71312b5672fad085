"""The grounded fields whose values are a short list: where a decoder may choose a whole value by its likelihood.

A grounded number, date or enum member is one of the few the row's text
writes (``grammar.candidates``, ``grammar.members``); a ``span: word`` string
one of its words, a ``span: lines`` string one of the runs of its whole lines. Each such field of the root
object gives one choice: the text the output writes just before the value
(its key, ``"total":``), the values as the grammar writes them, and the fixed
text that comes after each (the next key, or the closing brace), so that a
scorer also weighs where the value ends.

Pure, like ``grammar``: schema + text -> (text before, values, text after)
triples, in output order; the decoder's ``LikelihoodChoice`` takes them as they are.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from .declaration import Grounded, grounded_fields
from .grammar import candidates, line_run_starts, members, preferred, text_lines, words

#: The most lines a ``span: lines`` option joins.
MAX_LINES = 8


def grounded_choices(schema: dict[str, Any], text: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(text before the value, values, text after the value) for each choosable field of the root object, in key order.

    Fields after one that may hold an object or an array are left to the
    decoder: a key inside it could be taken for theirs."""
    fields = {g.path: g for g in grounded_fields(schema)}
    properties = list((schema.get("properties") or {}).items())
    required = set(schema.get("required", []))
    choices = []
    for i, (key, sub) in enumerate(properties):
        g = fields.get((key,))
        if g is None and not _scalar(sub):
            break
        if g is None:
            continue
        after = json.dumps(key, ensure_ascii=False) + ":"
        follow = _follower(properties, required, i)
        values = list(_values(g, text))
        if g.nullable:
            values.append("null")
        if follow is None and g.kind in ("number", "integer"):
            continue  # where the number ends would go unscored: 1 would beat 1.50
        if len(values) > 1:
            choices.append((after, tuple(values), follow or ""))
    return choices


def _values(g: Grounded, text: str) -> Iterator[str]:
    if g.kind == "enum":
        yield from members(g, text)
    elif g.kind == "string":
        if g.span != "words":  # a run of words is one of too many to score: the decoder writes it token by token
            yield from (json.dumps(v, ensure_ascii=False) for v in g.allow)
            yield from line_runs(g, text) if g.span == "lines" else (json.dumps(w, ensure_ascii=False) for w in words(g, text, narrowed=True))
    else:
        yield from preferred(g, candidates(g, text), text)


def line_runs(g: Grounded, text: str) -> Iterator[str]:
    """Every run of up to ``MAX_LINES`` whole lines that fits the field's length bounds and that ``includes``,
    ``ends_on``, ``first_lines`` and ``cut_before`` allow, as a JSON string."""
    lines, cut = text_lines(text, g)
    starts = line_run_starts(g, lines, cut)
    joiner = " " if g.whitespace == "normalize" else "\n"
    low, high = g.schema.get("minLength", 1), g.schema.get("maxLength", float("inf"))
    seen = set()
    for start in range(len(lines)):
        for end in range(start, min(start + MAX_LINES, len(lines))):
            value = joiner.join(lines[start : end + 1])
            if len(value) > high or not lines[end] or (end > start and cut[end - 1]):
                break
            if starts is not None and not any(first == start and least <= end <= most for first, least, most in starts):
                continue
            if len(value) >= low and value not in seen:
                seen.add(value)
                yield json.dumps(value, ensure_ascii=False)


def _follower(properties: list[tuple[str, Any]], required: set[str], i: int) -> str | None:
    """The text the grammar writes after key ``i``'s value: the next key (when it must be written) or the brace.

    The key stops short of its closing quote: ``","date`` tokenizes as the output would write it, and the
    model then writes ``":"`` as one token, as it would anyway."""
    if i + 1 == len(properties):
        return "}"
    following = properties[i + 1][0]
    return "," + json.dumps(following, ensure_ascii=False)[:-1] if following in required else None


def _scalar(schema: Any) -> bool:
    kinds = schema.get("type") if isinstance(schema, dict) else None
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return bool(kinds) and all(k in ("string", "number", "integer", "boolean", "null") for k in kinds) or "enum" in (schema or {})
