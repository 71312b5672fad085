"""Field paths: where a value sits in a record, named as the schema names its fields.

A field path is a tuple of property names and ``"[]"``, which stands for every item of an array:
``("parties", "[]", "name")`` is the name of each party. The declaration (``Grounded.path``), the post-check,
the span locator, the run alarm, the learned-cues file and ``learn`` all name fields so, and walk records by
them here, with one walk:

- ``values_at``: the values a record holds at a field path (an array's items fan out; a key the record lacks
  holds none), and ``indexed_at`` the same with each value's own path, as the confidence maps spell it
  (``parties[1].name``);
- ``leaves``: every leaf of a record (a value that is no object or array) with its field path, read from the
  record's own keys and items;
- ``schema_leaves`` and ``schema_node``: a schema's leaf fields, and the node a field path names in it;
- ``field_name``: a field path as the learned file and ``Grounded.name`` write it (``parties[].name``).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

#: The part of a field path that stands for every item of an array.
ITEMS = "[]"

FieldPath = tuple[str, ...]


def field_name(path: FieldPath) -> str:
    """``path`` as a name: ``parties[].name``."""
    return ".".join(path).replace(f".{ITEMS}", ITEMS)


def values_at(value: Any, path: FieldPath) -> Iterator[Any]:
    """The values ``value`` (a record, or a part of one) holds at the field path ``path``."""
    return (found for _, _, found in _walk(value, path, (), "", below=False))


def indexed_at(value: Any, path: FieldPath) -> Iterator[tuple[str, Any]]:
    """(its own path, as the confidence maps spell it: ``parties[1].name``; the value) for each value at ``path``."""
    return ((where, found) for _, where, found in _walk(value, path, (), "", below=False))


def leaves(value: Any, path: FieldPath = ()) -> Iterator[tuple[FieldPath, Any]]:
    """(field path, leaf) for every leaf below ``value``, whose own field path is ``path``: its objects' keys and its
    arrays' items taken as they are, whether or not a schema names them."""
    return ((field, found) for field, _, found in _walk(value, (), path, "", below=True))


def _walk(value: Any, path: FieldPath, field: FieldPath, where: str, *, below: bool) -> Iterator[tuple[FieldPath, str, Any]]:
    """(field path, own path, value) for each value at ``path`` below ``value`` (reached at ``field``, ``where``);
    with ``below``, every leaf under each of those instead. The one walk of a record by field paths."""
    if not path and not (below and isinstance(value, (dict, list))):
        yield field, where, value
        return
    for part, key, child in _children(value, path[0] if path else None):
        own = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key
        yield from _walk(child, path[1:], (*field, part), own, below=below)


def _children(value: Any, part: str | None) -> Iterator[tuple[str, str | int, Any]]:
    """(path part, key or index, child) for each child of ``value`` that ``part`` names: an array's items for
    ``"[]"``, an object's property by its key; for None, every child ``value`` has."""
    if isinstance(value, list) and part in (ITEMS, None):
        for i, item in enumerate(value):
            yield ITEMS, i, item
    elif isinstance(value, dict) and part is None:
        for key, child in value.items():
            yield key, key, child
    elif isinstance(value, dict) and part != ITEMS and part in value:
        yield part, part, value[part]


def schema_leaves(schema: dict[str, Any], path: FieldPath = ()) -> Iterator[tuple[FieldPath, dict[str, Any]]]:
    """(field path, node) for each leaf field of ``schema`` (a node with neither properties nor object items), in
    its key order; a node with properties is read by them, its items aside."""
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            yield from _schema_leaf(sub, (*path, key))


def _schema_leaf(node: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, dict[str, Any]]]:
    if "properties" in node:
        yield from schema_leaves(node, path)
    elif isinstance(node.get("items"), dict):
        yield from _schema_leaf(node["items"], (*path, ITEMS))
    else:
        yield path, node


def schema_node(schema: dict[str, Any], path: Sequence[str]) -> dict[str, Any] | None:
    """The node of ``schema`` that the field path ``path`` names, or None where the schema has none there."""
    node: Any = schema
    for part in path:
        node = node.get("items") if part == ITEMS else (node.get("properties") or {}).get(part)
        if not isinstance(node, dict):
            return None
    return node
