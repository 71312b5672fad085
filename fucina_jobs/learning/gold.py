"""Gold rows checked against the job's schema before anything is learned from them: ``learn`` never fails in silence.

A gold key the schema lacks (``party`` for its ``parties``), or a schema field no gold row gives, teaches that
field nothing, and the job then writes it empty in every record: ``mismatches`` names each, and ``learn`` stops on
them unless told to go on. A gold value of the wrong type (``"total": "lots"`` for a number) or one the schema
refuses (outside its enum, under its minimum) would teach cues for a value the job can never write, or stop the
learning midway: ``valid_gold`` leaves each out of learning and says so, checked by the validator that checks the
job's records. Every line names the gold file, the row's id and the field.
"""

from __future__ import annotations

import difflib
import logging
from collections import Counter
from typing import Any, Iterable, Iterator, Mapping

from jsonschema.exceptions import ValidationError, best_match

from ..grounding.paths import field_name

log = logging.getLogger(__name__)

#: Lines shown per field for the values left out of learning; the others are counted in one more line.
SHOWN = 5

FieldPath = tuple[str, ...]


def mismatches(schema: dict[str, Any], gold: Mapping[str, dict[str, Any]], source: str) -> list[str]:
    """One line for each gold field ``schema`` lacks, with the first row that gives it, and for each schema field no
    row of ``gold`` gives (where the object that holds it is given), each with the closest name on the other side.
    A field inside an object or a list's items is named by its path (``parties[].name``)."""
    held: set[FieldPath] = set()
    given: set[FieldPath] = set()
    unknown: dict[FieldPath, list[str]] = {}
    for row_id, label in gold.items():
        for path, keys, properties in _objects(label, schema, ()):
            held.add(path)
            for key in keys:
                if key in properties:
                    given.add((*path, key))
                else:
                    unknown.setdefault((*path, key), []).append(row_id)
    fields = list(_fields(schema, ()))
    missing = [path for path in fields if path[:-1] in held and path not in given]
    lines = []
    for path, ids in unknown.items():
        close = _closest(path, fields)
        lines.append(
            f"{source} id={ids[0]}: gold field '{field_name(path)}' is not in the schema ({len(ids)} of {len(gold)} rows give it)"
            + (f"; did you mean '{close}'?" if close else "")
        )
    for path in missing:
        close = _closest(path, unknown)
        lines.append(f"{source}: no gold row gives schema field '{field_name(path)}'" + (f"; is it the gold's '{close}'?" if close else ""))
    return lines


def _objects(label: Any, node: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, dict[str, Any], dict[str, Any]]]:
    """Each object of ``label`` that the schema ``node`` describes by its properties: its path, itself, those properties."""
    properties = node.get("properties")
    if isinstance(label, dict) and isinstance(properties, dict):
        yield path, label, properties
        for key, value in label.items():
            if isinstance(properties.get(key), dict):
                yield from _objects(value, properties[key], (*path, key))
    elif isinstance(label, list) and isinstance(node.get("items"), dict):
        for item in label:
            yield from _objects(item, node["items"], (*path, "[]"))


def _fields(node: dict[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    """The path of every property of the schema ``node``, nested ones after the one that holds them."""
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            yield (*path, key)
            yield from _fields(sub, (*path, key))
    if isinstance(node.get("items"), dict):
        yield from _fields(node["items"], (*path, "[]"))


def _closest(path: FieldPath, others: Iterable[FieldPath]) -> str | None:
    """The name of the field among ``others`` beside ``path`` (in the same object) whose name is closest to its own."""
    close = difflib.get_close_matches(path[-1], [other[-1] for other in others if other[:-1] == path[:-1]], n=1)
    return field_name((*path[:-1], close[0])) if close else None


def valid_gold(validator: Any, gold: Mapping[str, dict[str, Any]], source: str) -> dict[str, dict[str, Any]]:
    """``gold`` (labels by row id, read from ``source``) less each field value the schema's jsonschema ``validator``
    refuses: of the wrong type, outside its enum, under its minimum. Each is logged, one line a value and ``SHOWN`` a
    field at most, then counted; the rest of its row is kept, so that one bad total costs no other field its row."""
    kept: dict[str, dict[str, Any]] = {}
    refused: dict[str, list[tuple[str, ValidationError]]] = {}
    for row_id, label in gold.items():
        errors = _refused(validator, label)
        kept[row_id] = {key: value for key, value in label.items() if key not in errors}
        for key, error in errors.items():
            refused.setdefault(key, []).append((row_id, error))
    for key, errors in refused.items():
        for row_id, error in errors[:SHOWN]:
            log.warning("%s", _refusal(source, row_id, key, error))
        if len(errors) > SHOWN:
            log.warning("%s: gold field '%s': and %d more values refused, left out of learning", source, key, len(errors) - SHOWN)
    if refused:
        kinds = Counter(error.validator == "type" for errors in refused.values() for _, error in errors)
        rows = len({row_id for errors in refused.values() for row_id, _ in errors})
        log.warning(
            "%s: %d gold values of %d rows left out of learning: %d of the wrong type, %d refused by the schema",
            source,
            kinds.total(),
            rows,
            kinds[True],
            kinds[False],
        )
    return kept


def _refused(validator: Any, label: dict[str, Any]) -> dict[str, ValidationError]:
    """The most telling error of each field of ``label`` that ``validator`` refuses. The object's own errors (a key
    missing, or one the schema lacks) are ``mismatches``'."""
    errors: dict[str, list[ValidationError]] = {}
    for error in validator.iter_errors(label):
        if error.absolute_path:
            errors.setdefault(str(error.absolute_path[0]), []).append(error)
    return {key: best_match(found) for key, found in errors.items()}


def _refusal(source: str, row_id: str, key: str, error: ValidationError) -> str:
    """One left-out value as a line: where it is, and what is wrong with it."""
    what = "has the wrong type" if error.validator == "type" else "is refused by the schema"
    where = "/".join(str(part) for part in error.absolute_path)
    at = f" at {where}" if where != key else ""
    return f"{source} id={row_id}: gold field '{key}' {what}{at}: {error.message}; left out of learning"
