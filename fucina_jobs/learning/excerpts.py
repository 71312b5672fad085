"""Gold rows as worked examples: each document cut to the passages that write its label's values.

A job's nearest worked examples (``prompt.examples_nearest``) come from the same gold rows its cues
are learned from. A contract runs to tens of thousands of characters; what teaches the model is the
few places where it writes its parties, its date, its governing law, each with its label around it.
So a long document is cut to a window of ``CONTEXT_CHARS`` around every value it writes, windows that
overlap joined, the rest left out with a ``[...]`` line, and a short one is kept whole.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..grounding.declaration import Grounded
from ..grounding.paths import values_at
from .evidence import occurrences

#: A document at most this long is an example whole; a longer one is cut to the passages around its values.
EXCERPT_CHARS = 2000
#: Characters kept on either side of a value the document writes: its label before it, the words after it.
CONTEXT_CHARS = 300
#: What stands for a passage left out between two kept ones.
GAP = "\n[...]\n"


def excerpt(text: str, label: Any, fields: Sequence[Grounded]) -> str:
    """``text`` cut to the passages that write ``label``'s values of the grounded ``fields`` (whole where it is short)."""
    if len(text) <= EXCERPT_CHARS:
        return text
    spans = sorted(s for g in fields for value in values_at(label, g.path) for s in occurrences(g, value, text)[:1])
    windows: list[list[int]] = []
    for start, end in spans:
        low, high = max(0, start - CONTEXT_CHARS), min(len(text), end + CONTEXT_CHARS)
        if windows and low <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], high)
        else:
            windows.append([low, high])
    return GAP.join(_whole_words(text, low, high) for low, high in windows)


def _whole_words(text: str, low: int, high: int) -> str:
    """``text[low:high]`` widened to whole words at both ends, so a passage never starts or ends inside one."""
    while low > 0 and not text[low - 1].isspace():
        low -= 1
    while high < len(text) and not text[high].isspace():
        high += 1
    return text[low:high].strip()
