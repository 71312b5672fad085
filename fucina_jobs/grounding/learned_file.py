"""The learned-cues file: its format, and how a job merges it under its schema's own options.

``learn`` (``learning/``) writes one JSON file (``jobs/NAME/learned.json`` by default) that says, per field, the
``x-grounded`` options its gold rows support and the evidence for each (how many rows write the value, which label
marked it in how many rows, an example)::

    {"about": "...", "rows": N, "fields": {NAME: {"path": [...], "x-grounded": {...}, "array": {...}, "evidence": {...}}}}

``path`` names properties by key and array items by ``"[]"``; ``array``, where there is one, holds the keywords
learned for the array that holds the field (``minItems``, ``maxItems``). A job reads the file with
``constraint.learned: PATH`` (``read``, moved under ``constraint.learned_at`` by ``under``): the options are merged
into the schema before anything else reads it (``apply``), under the field's own hand-written options, which win
key by key. The merged schema is the job's constraint, so its digest (and the run's version) changes when the cues
do. The format lives here, beside the declaration it merges into, so that a run reads it without the learner.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Sequence

from . import old_spellings
from .declaration import KEYWORD, GroundingError, grounded_fields
from .paths import schema_node

#: The key of a field's entry that holds the learned keywords of the array the field is an item of (``minItems``, ``maxItems``).
ARRAY = "array"


class LearnedError(ValueError):
    """A learned-cues file cannot be read or does not fit the job's schema."""


def entry(path: Sequence[str], options: dict[str, Any], array: dict[str, int], evidence: dict[str, Any]) -> dict[str, Any]:
    """One field's entry, as the file holds it and ``read`` gives it back: its path, options, array's keywords (where
    any were learned) and evidence."""
    return {"path": list(path), KEYWORD: options, **({ARRAY: array} if array else {}), "evidence": evidence}


def write(path: Path, fields: dict[str, dict[str, Any]], rows: int, source: str) -> None:
    """Write the learned-cues file of ``fields`` (entries by field name), learned from ``rows`` gold rows of
    ``source``: indented, so that a person reviews it and git diffs it."""
    document = {
        "about": (
            f"x-grounded options that `fucina_jobs learn` found in {rows} gold rows ({source}). A job reads them with "
            "constraint.learned; a field's own x-grounded options in the schema win over these, key by key."
        ),
        "rows": rows,
        "fields": fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The learned options per field path (a JSON pointer of property names and ``[]``), checked for shape."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise LearnedError(f"{path}: cannot be read as JSON ({err})") from None
    fields = document.get("fields") if isinstance(document, dict) else None
    if not isinstance(fields, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("path"), list) and isinstance(f.get(KEYWORD), dict) for f in fields.values()
    ):
        raise LearnedError(f'{path}: expected {{"fields": {{NAME: {{"path": [...], "{KEYWORD}": {{...}}}}}}}}, as `fucina_jobs learn` writes it')
    return {name: f for name, f in fields.items()}


def under(learned: dict[str, dict[str, Any]], at: str | None, schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``learned`` with each field's path moved under ``at`` (``receipts/[]``), less the fields ``schema`` has not
    there: cues learned from single receipts, for the items of a report that lists receipts (with fewer fields)."""
    if not at:
        return learned
    prefix = at.strip("/").split("/")
    moved = {name: {**field, "path": [*prefix, *field["path"]]} for name, field in learned.items()}
    return {name: field for name, field in moved.items() if schema_node(schema, field["path"]) is not None}


def merged_options(learned: dict[str, Any], own: Any, where: str) -> dict[str, Any]:
    """A field's learned options under its own (``true`` or an object), both in today's spelling: its own win key by
    key, and within ``lines`` key by key too."""
    learned = old_spellings.modern(learned, where)
    own = old_spellings.modern(own, where) if isinstance(own, dict) else {}
    both = [options.get("lines") for options in (learned, own)]
    lines = {"lines": {**both[0], **both[1]}} if all(isinstance(part, dict) for part in both) else {}
    return {**learned, **own, **lines}


def apply(schema: dict[str, Any], learned: dict[str, dict[str, Any]], where: str) -> dict[str, Any]:
    """``schema`` with the learned options merged in under each field's own; ``LearnedError`` names a field the
    schema has no longer, or options it cannot take."""
    old_spellings.warn_once({name: field[KEYWORD] for name, field in learned.items()}, where)
    merged = copy.deepcopy(schema)
    for name, field in learned.items():
        node = schema_node(merged, field["path"])
        if node is None:
            raise LearnedError(f"{where}: field {name} is not in the schema; run `fucina_jobs learn` for this schema, or set constraint.learned=null")
        if isinstance(node.get(KEYWORD), dict):
            old_spellings.warn_once({name: node[KEYWORD]}, f"{where}: the schema")
        try:
            node[KEYWORD] = merged_options(field[KEYWORD], node.get(KEYWORD), f"field {name}")
        except GroundingError as err:
            raise LearnedError(f"{where}: {err}") from None
        array = schema_node(merged, field["path"][:-1]) if field.get(ARRAY) else None
        if array is not None:
            array.update({k: v for k, v in field[ARRAY].items() if k not in array})
    try:
        grounded_fields(merged)
    except GroundingError as err:
        raise LearnedError(f"{where}: {err}") from None
    return merged
