"""Documents longer than the model's context, cut into overlapping chunks (``dataset.chunking``).

A chunk is a character range of the row's ``dataset.text_field``. ``Chunker``
knows the job's prompt and the model's context, so it knows how many tokens of
text a row's prompt has room for: the context, less the prompt without its
text (system message, template) and ``decoding.max_tokens``. ``cut`` fills each
chunk up to that budget and ends it at its last blank line, or where it has none,
at the strongest boundary past its first quarter (a line break, else a sentence
end, else a space). A cut at a blank line splits no value (nor a receipt of a
report, a page, a section), and the next chunk starts there.
After a weaker cut, the next chunk starts at the strongest boundary within
``overlap_tokens`` before it, the earliest of that strength, so that a value the
cut splits (a name over two lines, a receipt longer than the chunk's rest) is
whole in the next chunk. Only a run of text longer than a chunk with no space in
it is cut mid-word.

Chunks of a row decode as prompts of the replica's batch like any other row's
(``replica.py``); the writer validates each, merges them (``merging.py``) and
writes the row once. This module is pure but for the tokenizer it is given.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..engines import encode_chat
from ..grounding.declaration import ITEM_UNITS
from ..config import ChunkingConfig

#: Where a chunk may start, strongest first: the position after the match.
PARAGRAPH = 3
_BOUNDARIES = (
    (PARAGRAPH, ITEM_UNITS["paragraph"]),  # a blank line: paragraphs, pages, one document of several
    (2, re.compile(r"\n\s*")),  # a line break
    (1, re.compile(r"[.!?。！？][\"'”’)\]]*\s+")),  # a sentence end
    (0, re.compile(r"\s+")),  # between two words
)
#: Tokens kept free of the budget: a chunk's tokens counted inside the whole text can differ by a few
#: from its tokens inside the prompt, where its first and last words meet the template's.
SLACK = 16
#: A budget smaller than this leaves no room for a useful chunk.
MIN_BUDGET = 32


class ChunkingError(ValueError):
    """The prompt leaves no room for text: the message says what to shorten."""


@dataclass(frozen=True)
class Chunk:
    """Characters ``start:end`` of a row's text; ``index`` counts from 0 in text order."""

    index: int
    start: int
    end: int


def chunk_id(row_id: str, index: int) -> str:
    """A chunk's prompt id. The unit separator (U+001F) keeps it apart from any row id a dataset writes."""
    return f"{row_id}\x1fchunk{index}"


def cut(text: str, token_starts: Sequence[int], budget: int, overlap: int) -> list[Chunk]:
    """``text`` in chunks of at most ``budget`` tokens (``token_starts``: each token's first character, ascending),
    consecutive ones sharing up to ``overlap`` tokens; one chunk when the whole text fits."""
    tokens = _Tokens(token_starts, len(text))
    boundaries = _boundaries(text)
    overlap = min(overlap, budget // 2)
    chunks: list[Chunk] = []
    start = 0
    while tokens.between(start, len(text)) > budget:
        limit = tokens.position(tokens.index(start) + budget)  # the furthest end within the budget
        quarter = tokens.position(tokens.index(start) + budget // 4)
        end = (
            _strongest(boundaries, start + 1, limit, latest=True, floor=PARAGRAPH)
            or _strongest(boundaries, quarter, limit, latest=True)
            or _strongest(boundaries, start + 1, quarter, latest=True)
            or limit
        )
        chunks.append(Chunk(len(chunks), start, end))
        strength = _strength(boundaries, end)
        back = max(tokens.position(tokens.index(end) - overlap), start + 1)
        start = _strongest(boundaries, back, end - 1, latest=False, floor=strength) if overlap and strength < PARAGRAPH else None
        start = start or end
    chunks.append(Chunk(len(chunks), start, len(text)))
    return chunks


class _Tokens:
    """Token counts over character ranges, from each token's first character."""

    def __init__(self, starts: Sequence[int], length: int):
        self.starts, self.length = list(starts), length

    def index(self, position: int) -> int:
        """How many tokens start before ``position``."""
        return bisect.bisect_left(self.starts, position)

    def position(self, index: int) -> int:
        """Where token ``index`` starts (the text's end past the last token)."""
        return self.starts[index] if 0 <= index < len(self.starts) else (self.length if index >= len(self.starts) else 0)

    def between(self, start: int, end: int) -> int:
        return self.index(end) - self.index(start)


def _boundaries(text: str) -> tuple[list[int], list[int]]:
    """Every position a chunk may start at, ascending, and its strength (the strongest boundary ending there)."""
    strength: dict[int, int] = {}
    for level, pattern in _BOUNDARIES:
        for m in pattern.finditer(text):
            if 0 < m.end() < len(text):
                strength[m.end()] = max(strength.get(m.end(), level), level)
    positions = sorted(strength)
    return positions, [strength[p] for p in positions]


def _strength(boundaries: tuple[list[int], list[int]], position: int) -> int:
    """How strong the boundary at ``position`` is; -1 where there is none (a cut inside a word)."""
    positions, levels = boundaries
    i = bisect.bisect_left(positions, position)
    return levels[i] if i < len(positions) and positions[i] == position else -1


def _strongest(boundaries: tuple[list[int], list[int]], low: int, high: int, latest: bool, floor: int = -1) -> int | None:
    """The strongest boundary in ``[low, high]``, at least ``floor`` strong: the latest or the earliest of that strength; None when there is none."""
    positions, levels = boundaries
    i, j = bisect.bisect_left(positions, low), bisect.bisect_right(positions, high)
    if i >= j or max(levels[i:j]) < floor:
        return None
    best = max(levels[i:j])
    found = [p for p, level in zip(positions[i:j], levels[i:j]) if level == best]
    return found[-1] if latest else found[0]


class Chunker:
    """One job's chunking: the text budget a row's prompt leaves, and the row's text cut within it."""

    def __init__(
        self,
        cfg: ChunkingConfig,
        tokenizer: Any,
        *,
        context: int | None,
        system: str | None,
        template: str,
        text_field: str,
        max_tokens: int,
    ):
        self.cfg, self.tokenizer, self.context = cfg, tokenizer, context
        self.system, self.template, self.text_field, self.max_tokens = system, template, text_field, max_tokens

    def budget(self, fields: dict[str, Any], examples: Sequence[tuple[str, str]] = ()) -> int | None:
        """Tokens of text the row's prompt has room for, beside its worked ``examples`` (part of every chunk's prompt);
        None when nothing limits it (no context and no ``max_tokens``)."""
        if self.context is None:
            return self.cfg.max_tokens
        bare = len(encode_chat(self.tokenizer, self.template.format_map({**fields, self.text_field: ""}), self.system, examples))
        room = self.context - bare - self.max_tokens - SLACK
        if room < MIN_BUDGET:
            raise ChunkingError(
                f"the prompt without its {self.text_field} is {bare} tokens: with decoding.max_tokens={self.max_tokens} it leaves "
                f"{max(room, 0)} tokens of the model's context of {self.context} for the text; shorten the system prompt or "
                "template, or lower decoding.max_tokens"
            )
        return min(room, self.cfg.max_tokens) if self.cfg.max_tokens else room

    def chunks(self, fields: dict[str, Any], examples: Sequence[tuple[str, str]] = ()) -> list[Chunk]:
        """The row's text in chunks that fit its budget beside its ``examples``: one chunk when it fits whole."""
        text = str(fields.get(self.text_field, ""))
        budget = self.budget(fields, examples)
        if budget is None:
            return [Chunk(0, 0, len(text))]
        encoded = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
        return cut(text, [start for start, _ in encoded["offset_mapping"]], budget, self.cfg.overlap_tokens)


def gather(outputs: list[dict[str, Any]], chunks: dict[str, tuple[str, Chunk]]) -> list[dict[str, Any]]:
    """A shard's decoded outputs with each chunked row's chunk outputs as one: ``{"row_id", "chunks": [...], "relaxations"}``,
    its chunks in text order, each with its ``chunk``. Outputs of rows decoded whole pass unchanged.

    A chunk that ran out of tokens (``decoding.max_tokens``: a list the model kept filling) is left out of its row's merge
    where another chunk of the row finished: the row's record is the other chunks', and its ``relaxations`` name the chunk
    left out. A document is not lost for one chunk of it; where every chunk ran out, the row stays a ``length`` reject."""
    rows: dict[str, dict[str, Any]] = {}
    gathered = []
    for output in outputs:
        if output["row_id"] not in chunks:
            gathered.append(output)
            continue
        row_id, chunk = chunks[output["row_id"]]
        if row_id not in rows:
            rows[row_id] = {"row_id": row_id, "chunks": [], "relaxations": output["relaxations"], "example_ids": output.get("example_ids", [])}
            gathered.append(rows[row_id])
        rows[row_id]["chunks"].append(output | {"chunk": chunk})
    for row in rows.values():
        row["chunks"].sort(key=lambda output: output["chunk"].index)
        _leave_out_unfinished(row)
    return gathered


def _leave_out_unfinished(row: dict[str, Any]) -> None:
    """The row's chunks that ran out of tokens, out of its merge and named in its ``relaxations``, unless no chunk finished."""
    out = [c for c in row["chunks"] if c.get("finish_reason") == "length"]
    if not out or len(out) == len(row["chunks"]):
        return
    count = len(row["chunks"])
    row["chunks"] = [c for c in row["chunks"] if c not in out]
    row["relaxations"] = [*row["relaxations"]] + [
        f"chunk {c['chunk'].index + 1} of {count} (characters {c['chunk'].start}-{c['chunk'].end}) left out: it ran out of tokens "
        f"after {c.get('generated_tokens', 0)} (decoding.max_tokens)"
        for c in out
    ]
