"""Source text + JSON schema -> one llguidance Lark grammar whose grounded fields can only copy the text.

The object is written out in the schema's key order as compact JSON. Fields
without grounding stay ``%json {subschema}``; a grounded string is a run of
whole words of the (JSON-escaped) source, ``%regex {"substring_chunks": ...}``;
a grounded number, date or enum member is one of those the source writes (``values``).
Objects and arrays are written out only where a grounded field sits below
them. The builder is pure: it knows nothing of models, jobs or speculation.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from .declaration import Grounded, Units, grounded_arrays, grounded_fields, unit_spans
from .values import dates_in, json_number, normalize_whitespace, numbers_in, written

#: Escapes stay whole, so a span never ends inside ``\\"`` and breaks the JSON string.
_CHUNK = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\w+|\s|.", re.DOTALL)


def grounded_lark(schema: dict[str, Any], text: str) -> str:
    """The Lark grammar for one row: ``schema``'s JSON with its grounded fields held to ``text``."""
    return _Builder(schema, text).grammar()


class _Builder:
    def __init__(self, schema: dict[str, Any], text: str, rules: list[str] | None = None):
        self.root, self.text = schema, text
        self.fields = {g.path: g for g in grounded_fields(schema)}
        self.arrays = grounded_arrays(schema)
        self.rules: list[str] = [] if rules is None else rules  # a paragraph's builder adds to its document's rules
        self.sources: dict[tuple[str, str], str] = {}  # (whitespace, case) -> the terminal of the text's spans

    def grammar(self) -> str:
        start = self.value(self.root, ())
        return "\n".join([f"start: {start}", *self.rules]) + "\n"

    def value(self, schema: dict[str, Any], path: tuple[str, ...]) -> str:
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
        item = self.value(schema["items"], (*path, "[]"))
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        more = f'("," {item})*' if high is None and low <= 1 else f'("," {item}){{{max(low - 1, 0)},{"" if high is None else high - 1}}}'
        body = f"{item} {more}" if high != 0 else ""
        return self.rule(f'"[" {body} "]"' if low > 0 or not body else f'"[" ({body})? "]"')

    def units(self, schema: dict[str, Any], path: tuple[str, ...], units: Units) -> str:
        """Items in text order, each from a later paragraph (line) than the one before, its grounded values that paragraph's.

        ``after{i}``: the items from unit ``i`` on, at least one; so an array holds at most one item per unit, and a
        greedy model cannot repeat an item until its token budget runs out. With ``every``, one item for every unit."""
        pieces = [self.text[start:end] for start, end in unit_spans(self.text, units.unit)]
        items = [_Builder(self.root, piece, self.rules).value(schema["items"], (*path, "[]")) for piece in pieces]
        if units.every:
            return self.rule(" ".join(['"["', ' "," '.join(items), '"]"']))
        after = ""
        for item in reversed(items):
            more = self.rule(f'"]" | "," {after}') if after else '"]"'
            after = self.rule(f"{item} {more}" + (f" | {after}" if after else ""))
        low = schema.get("minItems", 0)
        return self.rule(f'"[" {after}' if low > 0 and after else f'"[" ({after} | "]")' if after else '"[]"')

    def grounded(self, g: Grounded) -> str:
        if g.kind == "enum":
            choices = [_literal(json.dumps(m, ensure_ascii=False)) for m in g.schema["enum"] if m in g.allow or written(self.text, g.evidence(m), g.case)]
        elif g.kind == "string":
            choices = [f'"\\"" {self.span(g)} "\\""'] if self.text.strip() else []
            choices += [_literal(json.dumps(v, ensure_ascii=False)) for v in g.allow]
        else:
            choices = [_literal(v) for v in self.candidates(g)]
        if not choices:  # the text writes nothing this field could hold: the post-check rejects the row
            return self.json(g.schema)
        if g.nullable:
            choices.append('"null"')
        return self.rule(" | ".join(choices))

    def span(self, g: Grounded) -> str:
        """A terminal for the spans of the text this string may be, within its length bounds."""
        key = (g.whitespace, g.case)
        if key not in self.sources:
            text = normalize_whitespace(self.text) if g.whitespace == "normalize" else self.text
            variants = [text] if g.case == "exact" else list(dict.fromkeys([text, text.lower(), text.upper(), text.title()]))
            name = f"SOURCE{len(self.rules)}"
            self.rules.append(f"{name}: " + " | ".join(f"%regex {json.dumps({'substring_chunks': _chunks(v)}, ensure_ascii=False)}" for v in variants))
            self.sources[key] = name
        low, high = max(g.schema.get("minLength", 1), 1), g.schema.get("maxLength", "")
        name = f"SPAN{len(self.rules)}"
        self.rules.append(f"{name}: {self.sources[key]} & /.{{{low},{high}}}/")
        return name

    def candidates(self, g: Grounded) -> list[str]:
        """The JSON spellings of the numbers or dates the text writes that the field's schema admits."""
        if g.kind == "date":
            return [json.dumps(d) for d in sorted(set(dates_in(self.text)) | set(g.allow))]
        values = numbers_in(self.text, g.amount) | {Decimal(str(v)) for v in g.allow}
        return sorted({json_number(v) for v in values if _admits(g, v)}, key=lambda s: (len(s), s))

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name


def _chunks(text: str) -> list[str]:
    return _CHUNK.findall(json.dumps(text, ensure_ascii=False)[1:-1])


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _admits(g: Grounded, value: Decimal) -> bool:
    s = g.schema
    if g.kind == "integer" and value != value.to_integral_value():
        return False
    bounds = [("minimum", value.__ge__), ("maximum", value.__le__), ("exclusiveMinimum", value.__gt__), ("exclusiveMaximum", value.__lt__)]
    return all(ok(Decimal(str(s[key]))) for key, ok in bounds if isinstance(s.get(key), (int, float)))
