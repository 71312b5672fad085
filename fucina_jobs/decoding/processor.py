"""The logit-processor seam: what a sampler may ask of a per-stream rule.

A processor masks or biases one vocab row before sampling and observes every
token the sampler selects. When it allows exactly one token, it may name that
token instead of masking: the sampler then takes it without reading the row.
Under a grounded grammar most tokens are forced, and masking
a whole vocab row to keep one of them, then normalising it, is work for nothing.

A processor knows nothing of grammars: a grammar engine is one
implementation, a banned-token rule is another. The two structural lookaheads
let a drafting layer exploit a processor that knows the future
(``has_structure``); processors without structure keep the neutral defaults.

A batch decoder processes all rows of a step at once where processors can
look ahead: the rows of a verify forward lie along a known token path, and
one call for the processors of a class (``look_paths``) lets a grammar engine
fill every stream's masks together, before the forward. The rows whose token
it names are then never computed (under a grounded grammar, most of them);
the others are masked once the forward has computed them (``PathsAhead``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

#: One job of ``look_paths``: a processor, a stream's history, the path its rows lie along, and how many rows.
LookJob = tuple["LogitProcessor", Sequence[int], Sequence[int], int]


class LogitProcessor:
    """Base of every processor; subclasses override what they need."""

    #: True when ``forced_tokens`` and ``valid_prefix_len`` carry information.
    has_structure: bool = False

    def process(self, logits: torch.Tensor, history: Sequence[int]) -> int | None:
        """Mask or bias one ``[vocab]`` row in place, before any sampling knob.

        Or, where exactly one token is allowed, return it and leave the row as
        it is: the same as a mask that keeps that token alone.
        """
        return None

    def process_path(self, rows: torch.Tensor, history: Sequence[int], path: Sequence[int]) -> list[int | None]:
        """``process`` ahead for the leading ``rows``: ``rows[i]`` as ``process`` would treat it once ``path[:i]``
        were committed after ``history``, the processor's state left as it is. Returns what ``process`` would
        for each row it processed: a prefix of the rows, empty (the default) where it cannot look ahead; the
        sampler processes the others as it reaches them."""
        return []

    @classmethod
    def look_paths(cls, jobs: Sequence[LookJob]) -> "PathsAhead":
        """Before a batch's forward, for many processors of this class at once: the tokens each names along
        its path without reading logits (``PathsAhead.named``), and the rest of ``process_path`` to do once
        the rows are computed (``PathsAhead.process``). This default names none."""
        return PathsAhead(jobs)

    def commit(self, token: int) -> None:
        """Observe the token the sampler selected; called once per selection."""

    def reset(self) -> None:
        """Re-arm the processor for a fresh generation."""

    def error(self) -> str | None:
        """Why the processor can no longer constrain, once it has failed."""
        return None

    def forced_tokens(self) -> list[int]:
        """Tokens that every allowed continuation starts with (pure lookahead)."""
        return []

    def likely_tokens(self) -> list[int]:
        """``forced_tokens``, then the tokens that would spell what every allowed continuation still
        starts with, where the sampler may yet pick a token that runs past it (pure lookahead)."""
        return self.forced_tokens()

    def valid_prefix_len(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the processor would allow (pure lookahead)."""
        return len(tokens)


class PathsAhead:
    """What the processors of one class know of a step's rows before the forward (``look_paths``).

    ``named[k]`` holds, for job ``k``'s leading rows, the token its processor
    names there, or None where it needs the row's logits; a batch leaves the
    named rows uncomputed. ``process`` takes each job's rows (None at a named row) and returns what
    ``process_path`` would, the named rows included. This default names
    nothing, and hands the rows to ``process_path``.
    """

    def __init__(self, jobs: Sequence[LookJob]):
        self.jobs = list(jobs)
        self.named: list[list[int | None]] = [[] for _ in self.jobs]

    def process(self, rows: Sequence[Sequence[torch.Tensor | None]]) -> list[list[int | None]]:
        return [processor.process_path(r, history, path) for (processor, history, path, _), r in zip(self.jobs, rows)]


class TokenBias(LogitProcessor):
    """Adds a fixed bias per token id; ``-inf`` bans a token outright.

    Proof that the seam needs no grammar engine, and a practical rule in its
    own right (ban a chatty preamble token, favour a label set).
    """

    def __init__(self, bias: Mapping[int, float]):
        self._ids = torch.tensor(list(bias.keys()), dtype=torch.long)
        self._values = torch.tensor(list(bias.values()), dtype=torch.float32)

    @classmethod
    def banned(cls, token_ids: Sequence[int]) -> "TokenBias":
        return cls({int(t): float("-inf") for t in token_ids})

    def process(self, logits: torch.Tensor, history: Sequence[int]) -> None:
        logits.index_add_(0, self._ids.to(logits.device), self._values.to(logits.device, logits.dtype))

    def process_path(self, rows: torch.Tensor, history: Sequence[int], path: Sequence[int]) -> list[int | None]:
        values = self._values.to(rows.device, rows.dtype).expand(len(rows), -1)
        rows.index_add_(1, self._ids.to(rows.device), values)  # it has no state: every row alike
        return [None] * len(rows)
