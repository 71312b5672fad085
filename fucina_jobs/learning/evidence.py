"""Where a gold value is written in its document: the evidence every learned cue is counted from.

A user's gold is normalised (``Acme Inc.`` for ``ACME, Inc.``, ``2025-04-18`` for ``the 18th day of
April, 2025``, ``3 years`` for ``three (3) years``), so a value is looked for the way grounding reads
its kind: a string as the same run of words in any case and punctuation, a date or a number among the
values the text writes, a count of units among the counts it writes. Nothing here knows a schema's
domain; it reads text with the grounding's own readers.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ..grounding.declaration import Grounded
from ..grounding.candidates import written_values

Span = tuple[int, int]
_WORD = re.compile(r"\w+")


def occurrences(g: Grounded, value: Any, text: str) -> list[Span]:
    """Every span of ``text`` that writes the gold ``value`` of field ``g``, in text order; [] where none does."""
    if value is None:
        return []
    if g.kind == "string":
        return word_runs(str(value), text)
    if g.kind == "enum":
        return []
    key = _value_key(g, value)
    return [] if key is None else sorted(written_values(g.without("labels"), text).get(key, []))


def _value_key(g: Grounded, value: Any) -> Any:
    """The gold value as grounding's readers key it: an ISO date or a count as text, a number as a ``Decimal``."""
    if g.kind in ("date", "quantity"):
        return str(value)
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def word_runs(value: str, text: str) -> list[Span]:
    """Where ``text`` writes the words of ``value`` one after another, in any case and whatever marks or spaces
    stand between them (``ACME, Inc.`` writes ``Acme Inc.``)."""
    wanted = [w.casefold() for w in _WORD.findall(value)]
    if not wanted:
        return []
    words = [(m.group().casefold(), m.start(), m.end()) for m in _WORD.finditer(text)]
    n = len(wanted)
    return [(words[i][1], words[i + n - 1][2]) for i in range(len(words) - n + 1) if all(words[i + k][0] == wanted[k] for k in range(n))]


def verbatim(value: str, text: str) -> bool:
    """Does ``text`` write ``value`` exactly, whitespace runs aside?"""
    return " ".join(value.split()) in " ".join(text.split())


def label_contexts(text: str, start: int, longest: int) -> list[str]:
    """The label candidates written just before ``start``: the last 1..``longest`` words before it on its line
    (on the line above, where the value starts its line), lower-cased, each word starting with a letter.

    A rate written before an amount is passed over (``Sales tax (8.5%)`` gives ``tax`` and ``sales tax``).
    ``Governed by the laws of the State of Oregon`` gives ``of``, ``state of``, ``the state of``, ``of the state of``, ``laws of the
    state of`` for ``Oregon``; the marks between a label and its value (``Date:``, ``#``) are left out, as the
    grammar reads a label's value past them."""
    line_start = text.rfind("\n", 0, start) + 1
    before = re.sub(r"[\W_]*$", "", _RATE_END.sub("", text[line_start:start]))
    if not before.strip() and line_start > 0:
        above = text[: line_start - 1].rstrip()
        before = re.sub(r"[\W_]*$", "", above[above.rfind("\n") + 1 :])
    words = before.split()
    found = []
    for k in range(1, min(longest, len(words)) + 1):
        tail = words[-k:]
        if not all(_LABEL_WORD.fullmatch(w) for w in tail) or not tail[-1][-1].isalnum():
            closing = _CLOSING.search(tail[0]) if k > 1 else None  # the words after it made the k - 1 candidate
            if closing:  # ``("Company"), and`` gives ``), and``: the close of a definition written before a value
                found.append(" ".join([closing.group(), *tail[1:]]).lower())
            break
        found.append(" ".join(tail).lower())
    return found


def keyed(text: str, start: int) -> bool:
    """Is the value at ``start`` written after a key, a label and its colon, on its line or ending the line above
    (``Kunde: Nadia Brunner``, ``Bill To:`` above a name)? A key is a label in any language, seen once or not."""
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start].rstrip()
    if not before and line_start > 0:
        before = text[: line_start - 1].rstrip()
    return before.endswith(":")


#: A rate written between a label and its amount (``Sales tax (8.5%) $44.84``, ``BTW 21% € 181,65``), and the marks
#: after it: the words before it are the label.
_RATE_END = re.compile(r"\(?\d+(?:[.,]\d+)?\s*%[\W_]*$")
#: A word a label is made of: it starts with a letter.
_LABEL_WORD = re.compile(r"[^\W\d_][\w'&.-]*")
#: The closing bracket, and the marks after it, that end a word (``(“ACME”),`` ends on ``),``).
_CLOSING = re.compile(r"[)\]][^\w\s]*$")
