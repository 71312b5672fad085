"""A schema's learned cues: the ``x-grounded`` options a schema's gold rows support, per field, with their evidence.

``learn`` tries each leaf field (``learn_fields``) and keeps the cues that raise its pick rate (``kept``); ``entries``
gives them as the entries of the learned-cues file, whose format, reading and merging under a schema's own options
live in ``grounding/learned_file.py``, where a run reads them without the learner.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Sequence

from ..grounding.declaration import KEYWORD, Grounded, grounded_fields
from ..grounding.learned_file import entry
from ..grounding.paths import field_name, schema_leaves, values_at
from .cues import MIN_GAIN, FieldCues, Row, field_rows, learn_field
from .shape import learn_shape

#: A gold value that is a count of a unit (``3 years``, ``18 months``, ``55.5 months``).
COUNT_VALUE = re.compile(r"\d+(?:\.\d+)? ([^\W\d_]+)")
#: A field the schema does not ground is grounded where its gold is written in at least this share of the rows that give one.
GROUNDED_SHARE = 0.6
#: A string field is a count of units where at least this share of its gold values are written ``N unit``.
COUNT_SHARE = 0.9
_LEAF_TYPES = ("string", "number", "integer")
#: An array's learned ``minItems`` is the most items at least this share of its gold lists hold, ``maxItems`` the fewest
#: that as many hold at most: one odd list in twenty sets neither.
ITEMS_SHARE = 0.95


def learn(schema: dict[str, Any], gold: Sequence[tuple[str, Any]]) -> list[FieldCues]:
    """The cues for each field of ``schema`` that ``gold`` ((text, label) pairs) supports, in the schema's key order."""
    return kept(learn_fields(schema, gold))


def learn_fields(schema: dict[str, Any], gold: Sequence[tuple[str, Any]]) -> list[FieldCues]:
    """Every leaf field of ``schema`` with the cues ``gold`` ((text, label) pairs) supports, or, in ``left``, why it
    keeps none and is left to the model: a user whose field learns nothing is told why, not left to guess.

    Every string, number, integer and date field is tried, and every enum the schema grounds: one the schema grounds
    keeps its grounding, one it does not is grounded only where its gold is written in ``GROUNDED_SHARE`` of its
    rows. A string whose gold values are counts of units (``3 years``) is grounded as one (``units``), since
    documents write it in words (``three (3) years``). The fields never tried come last."""
    probe, probed = _probe(schema, gold)
    fields = []
    for g in grounded_fields(probe):
        rows = field_rows(g, gold)
        cues = learn_field(g, rows)
        if g.path in probed:
            cues.options = {**probed[g.path], **cues.options}
        if g.path[-1:] == ("[]",):
            cues.array = _item_counts(g.path[:-1], gold)
        cues.left = _left(cues, g.path in probed)
        _add_shape(cues, g, rows, grounded=cues.left is None or g.path not in probed)
        fields.append(cues)
    tried = {cues.path for cues in fields}
    return fields + [FieldCues(field_name(path), path, {}, left=_untried(node)) for path, node in schema_leaves(schema) if path not in tried]


def _add_shape(cues: FieldCues, g: Grounded, rows: list[Row], *, grounded: bool) -> None:
    """Give ``cues`` the value shape its gold shows (``learning/shape.py``), with its evidence, where the field is
    ``grounded`` (by its cues, or by the schema itself): a shape narrows a grounded field's candidates, and grounds
    nothing by itself."""
    shape, evidence = learn_shape(g, rows)
    if shape and grounded:
        cues.options["shape"], cues.evidence["shape"], cues.left = shape, evidence, None


def kept(fields: list[FieldCues]) -> list[FieldCues]:
    """The fields of ``learn_fields`` that keep cues."""
    return [cues for cues in fields if cues.left is None]


def _left(cues: FieldCues, probed: bool) -> str | None:
    """Why ``cues`` are not kept, or None where they are; ``probed``: the schema does not ground the field itself."""
    given, written = cues.evidence["values"], cues.evidence["written"]
    if not given and (probed or not (cues.options or cues.array)):
        return "no gold row gives it a value"
    if probed and written < GROUNDED_SHARE * given:
        return (
            f"its gold is written in the text for {written} of {given} values ({written / given:.0%}), under the "
            f"{GROUNDED_SHARE:.0%} that grounds a field the schema does not"
        )
    if not (cues.options or cues.array):
        return f"no option raised its pick rate ({cues.evidence['pick_rate_before']:.3f}) by {MIN_GAIN} or more"
    return None


def _untried(node: dict[str, Any]) -> str:
    """Why ``learn`` never tries the leaf field ``node``."""
    what = "a const" if "const" in node else "an enum the schema does not ground" if "enum" in node else f"type {node.get('type')}"
    return f"not tried: cues are learned for string, number, integer and date fields and grounded enums, not {what}"


def _item_counts(path: tuple[str, ...], gold: Sequence[tuple[str, Any]]) -> dict[str, int]:
    """``minItems`` and ``maxItems`` of the array at ``path`` as its gold lists bound them: the most items that
    ``ITEMS_SHARE`` of the lists hold at least, and the fewest that as many hold at most. A small model writes an
    empty list where the gold nearly never has one, and, given room, repeats an item to the end of it; held to
    the gold's counts, it picks among the spans its grounding allows."""
    counts = sorted(len(v) for _, label in gold for v in values_at(label, path) if isinstance(v, list))
    if not counts:
        return {}
    least, most = counts[int(len(counts) * (1 - ITEMS_SHARE))], counts[min(len(counts) - 1, math.ceil(len(counts) * ITEMS_SHARE) - 1)]
    return {"minItems": least, "maxItems": most} if least else {"maxItems": most}


def _probe(schema: dict[str, Any], gold: Sequence[tuple[str, Any]]) -> tuple[dict[str, Any], dict[tuple[str, ...], dict[str, Any]]]:
    """``schema`` with every leaf field grounded (units on counts), and the options given to those it did not ground."""
    probe = copy.deepcopy(schema)
    probed = {}
    for path, node in schema_leaves(probe):
        if not _learnable(node):
            continue
        values = [v for _, label in gold for v in values_at(label, path) if v is not None]
        units = _units(values)
        own = node.get(KEYWORD)
        if own in (None, False):
            probed[path] = {"units": units} if units else {}
            node[KEYWORD] = probed[path] or True
        elif units and isinstance(own, (dict, bool)):
            node[KEYWORD] = {"units": units, **(own if isinstance(own, dict) else {})}
    return probe, probed


def _units(values: list[Any]) -> list[str]:
    """The units of gold values that are counts of units (singular), where nearly all are; [] otherwise."""
    counts = [COUNT_VALUE.fullmatch(v) for v in values if isinstance(v, str)]
    if not values or sum(m is not None for m in counts) < COUNT_SHARE * len(values):
        return []
    return sorted({m.group(1).lower().removesuffix("s") for m in counts if m})


def _learnable(node: dict[str, Any]) -> bool:
    """Is the leaf ``node`` one ``learn`` grounds where the schema does not: a string, number or integer, not an enum?"""
    kinds = node.get("type")
    kinds = [k for k in kinds if k != "null"] if isinstance(kinds, list) else [kinds]
    return len(kinds) == 1 and kinds[0] in _LEAF_TYPES and "enum" not in node and "const" not in node


def entries(cues: list[FieldCues]) -> dict[str, dict[str, Any]]:
    """The cues as the learned-cues file's entries by field name (``grounding.learned_file``): what ``write`` writes,
    ``read`` gives back and ``apply`` merges into a schema."""
    return {c.name: entry(c.path, c.options, c.array, c.evidence) for c in cues}
