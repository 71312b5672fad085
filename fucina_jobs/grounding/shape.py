"""A field's value shape (``x-grounded.shape``): what every value of the field looks like, as its gold shows it.

A grounded value is written in the text, and still may be no value of its field: a function word (``to``, ``them``)
is written in every document, a lone ``|`` or ``1`` in most. ``learn`` (``learning/shape.py``) finds what every
gold value of a field has; the candidates (``candidates.py``) drop the values that lack it, softly: where none
would be left, the field keeps them all. A decoded value that still lacks it gets a low confidence (``misfits``).

The keys: ``letter`` (the value holds a letter), ``least_chars`` (it has at least this many characters),
``not_only`` (it is not made only of these words, casefolded), ``magnitude`` (a number: ``[least, most]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterator, Mapping

__all__ = ["KEYS", "Shape", "kept", "misfits", "valid", "words"]

#: The keys of ``x-grounded.shape``, each with what it must be (for ``options.py``'s check and messages).
KEYS = {
    "letter": "true",
    "least_chars": "a whole number, at least 1",
    "not_only": "a list of words",
    "magnitude": "[least, most], two positive numbers",
}

#: A word of a value, as ``not_only`` reads it: a run of letters or of digits.
_WORD = re.compile(r"[^\W\d_]+|\d+")


def words(value: str) -> list[str]:
    """The words of ``value``, casefolded, as ``not_only`` compares them."""
    return _WORD.findall(value.casefold())


@dataclass(frozen=True)
class Shape:
    """A field's value shape; empty (falsy) where nothing is declared."""

    letter: bool = False
    least_chars: int | None = None
    not_only: frozenset[str] = frozenset()
    magnitude: tuple[Decimal, Decimal] | None = None

    def __bool__(self) -> bool:
        return self != Shape()

    def fits(self, value: Any) -> bool:
        """Does ``value`` (a string, a number, or null) look like the field's values? Null always does."""
        if value is None or isinstance(value, bool):
            return True
        if isinstance(value, (int, float, Decimal)):
            least, most = self.magnitude or (None, None)
            return least is None or least <= Decimal(str(value)) <= most
        text = str(value)
        if self.letter and not any(c.isalpha() for c in text):
            return False
        if self.least_chars is not None and len(text.strip()) < self.least_chars:
            return False
        found = words(text)
        return not (self.not_only and found and all(w in self.not_only for w in found))


def valid(value: Any) -> bool:
    """Is ``value`` a shape as a schema writes it: an object of ``KEYS``, each of its kind?"""
    if not isinstance(value, dict) or not set(value) <= set(KEYS):
        return False
    checks = {
        "letter": lambda v: v is True,
        "least_chars": lambda v: type(v) is int and v >= 1,
        "not_only": lambda v: isinstance(v, list) and all(isinstance(w, str) and words(w) == [w] for w in v),
        "magnitude": lambda v: isinstance(v, list) and len(v) == 2 and all(_positive(n) for n in v) and v[0] <= v[1],
    }
    return all(checks[key](v) for key, v in value.items())


def _positive(n: Any) -> bool:
    return isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0


def kept(value: Mapping[str, Any]) -> Shape:
    """The ``Shape`` a schema's ``shape`` object declares."""
    magnitude = value.get("magnitude")
    return Shape(
        letter=bool(value.get("letter")),
        least_chars=value.get("least_chars"),
        not_only=frozenset(value.get("not_only", ())),
        magnitude=(Decimal(str(magnitude[0])), Decimal(str(magnitude[1]))) if magnitude else None,
    )


def misfits(fields: list[Any], record: Any) -> list[str]:
    """The values of ``record`` that do not fit their grounded field's shape (``fields``: ``Grounded``), by their
    path as per-value confidence names them (``vendor``, ``items[0].name``)."""
    return [where for g in fields if g.shape for where, value in _values(record, g.path, "") if not g.shape.fits(value)]


def _values(node: Any, path: tuple[str, ...], where: str) -> Iterator[tuple[str, Any]]:
    """Each value at ``path`` in ``node`` (``[]``: each item of a list), with its confidence path."""
    if not path:
        yield where, node
    elif path[0] == "[]" and isinstance(node, list):
        for i, item in enumerate(node):
            yield from _values(item, path[1:], f"{where}[{i}]")
    elif isinstance(node, dict) and path[0] in node:
        yield from _values(node[path[0]], path[1:], f"{where}.{path[0]}" if where else path[0])
