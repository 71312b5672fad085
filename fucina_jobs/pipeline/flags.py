"""Flags: warnings on valid records that a reviewer should look at.

A record can validate and still be wrong in a way the schema cannot see. A
flag lands in the record's ``flags`` column (a list of strings) and never
turns the record into a reject: the same pattern has honest causes too.

``copied_from_document``: every field of the record equals the same field of
a JSON object written in the row's own document. That is what a prompt
injection looks like (a document carrying a fake answer that the model
obeyed); it is also what a document that is itself a JSON export looks like.
"""

from __future__ import annotations

import json
from typing import Any

COPIED_FROM_DOCUMENT = "copied_from_document"


def record_flags(record: dict[str, Any], document: str) -> list[str]:
    return [COPIED_FROM_DOCUMENT] if record and any(_covers(obj, record) for obj in json_objects(document)) else []


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that starts somewhere in ``text`` (nested ones included)."""
    decoder = json.JSONDecoder()
    found, start = [], text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            found.append(value)
        start = text.find("{", start + 1)
    return found


def _covers(obj: dict[str, Any], record: dict[str, Any]) -> bool:
    return all(key in obj and _same(obj[key], value) for key, value in record.items())


def _same(a: Any, b: Any) -> bool:
    # 1608 and 1608.0 are the same amount; True is not 1.
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b
