"""Learning a field's value shape (``x-grounded.shape``) from its gold values: what every one of them has.

A grounded field is offered every value of its kind the text writes; a small model, unsure, takes a function word
for a name or a stray ``1`` for an amount. The gold says what the field's values look like: each property here is
kept only where *every* gold value has it, from at least ``SHAPE_VALUES`` of them, so a shape refuses nothing the
gold ever held. The words a value may not be made only of are found in the learning documents themselves (the
words most of them write, which no gold value of the field holds), not in a list for one language.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any

from ..grounding.declaration import Grounded
from ..grounding.shape import words
from .cues import Row

#: Why 5: a property that half of a field's values have is still shared by 5 values drawn at random in one try of 32;
#: fewer values would learn such chance properties as facts of the field, and a newcomer labels 5 or 6 rows.
SHAPE_VALUES = 5
#: A value shorter than this share of the shortest gold value is not the field's. Why a half: names, towns and
#: references of one field differ in length by about twice between the short and the long ones (``Ann``,
#: ``Christine``), so half the shortest of five or more leaves the short ones, and still refuses a letter or two.
LENGTH_FACTOR = 0.5
#: A word is common where it is written in more than this share of the learning documents (``most`` of them).
COMMON_SHARE = 0.5
#: Why 100: a value made only of a kind's commonest words is what ``not_only`` refuses; past the hundred commonest, a
#: word is as likely a term of the kind as a function word, and the learned file stays short enough to review.
MOST_COMMON_WORDS = 100
#: The gold's range of amounts is widened by this factor each way. Why 10: five to fifty gold amounts show the
#: order of magnitude of a field, not its ends; one order each way keeps an amount ten times smaller or larger than
#: any seen, and refuses a page number or a count where amounts run in the thousands.
WIDEN = 10
#: A magnitude is learned only where the gold's largest value is at most this many times its smallest: past it, the
#: field's values are of no one magnitude, and a range would refuse little.
MOST_SPREAD = 10_000


def learn_shape(g: Grounded, rows: list[Row]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shape every gold value of ``g`` has on ``rows`` (as ``x-grounded.shape`` writes it), and its evidence:
    the values seen, and per property what shows it; ({}, {}) where there are too few values or nothing is shared."""
    given = [v for r in rows for v in r.values if v is not None]
    if len(given) < SHAPE_VALUES:
        return {}, {}
    if g.kind in ("number", "integer"):
        shape, evidence = _magnitude([Decimal(str(v)) for v in given if isinstance(v, (int, float)) and not isinstance(v, bool)], len(given))
    elif g.kind == "string":
        shape, evidence = _string_shape([str(v) for v in given], [r.text for r in rows])
    else:
        return {}, {}
    return (shape, {"values": len(given), **evidence}) if shape else ({}, {})


def _magnitude(values: list[Decimal], given: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``magnitude``: the gold's range widened by ``WIDEN``, where every gold value is a positive number and the
    range is bounded (``MOST_SPREAD``)."""
    if len(values) < given or not values or min(values) <= 0 or max(values) > MOST_SPREAD * min(values):
        return {}, {}
    least, most = min(values), max(values)
    return {"magnitude": [_number(least / WIDEN), _number(most * WIDEN)]}, {"magnitude": {"gold": [_number(least), _number(most)], "share": 1.0}}


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _string_shape(values: list[str], texts: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    shape: dict[str, Any] = {}
    evidence: dict[str, Any] = {}
    if all(any(c.isalpha() for c in v) for v in values):
        shape["letter"] = True
        evidence["letter"] = {"share": 1.0}
    shortest = min(len(v.strip()) for v in values)
    if math.floor(shortest * LENGTH_FACTOR) >= 2:  # a least of one character says nothing a grounded string does not
        shape["least_chars"] = math.floor(shortest * LENGTH_FACTOR)
        evidence["least_chars"] = {"shortest": shortest, "factor": LENGTH_FACTOR}
    common = _common_words(texts, {w for v in values for w in words(v)})
    if common:
        shape["not_only"] = common
        evidence["not_only"] = {"documents": len(set(texts)), "share": COMMON_SHARE, "words": len(common)}
    return shape, evidence


def _common_words(texts: list[str], gold_words: set[str]) -> list[str]:
    """The words (casefolded, letters only) written in more than ``COMMON_SHARE`` of the distinct ``texts`` that no
    gold value holds, the ``MOST_COMMON_WORDS`` most written, in alphabetical order."""
    documents = list(dict.fromkeys(texts))
    seen = Counter(w for text in documents for w in {w for w in words(text) if w.isalpha()})
    common = [(n, w) for w, n in seen.items() if n > COMMON_SHARE * len(documents) and w not in gold_words]
    return sorted(w for _, w in sorted(common, key=lambda nw: (-nw[0], nw[1]))[:MOST_COMMON_WORDS])
