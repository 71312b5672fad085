"""The logit-processor seam: what a sampler may ask of a per-stream rule.

A processor masks or biases one vocab row before sampling and observes every
token the sampler selects. When it allows exactly one token, it may name that
token instead of masking: the sampler then takes it without reading the row.
Under the invoice job's grounded grammar most tokens are forced, and masking
a whole vocab row to keep one of them, then normalising it, is work for nothing.

A processor knows nothing of grammars: a grammar engine is one
implementation, a banned-token rule is another. The two structural lookaheads
let a drafting layer exploit a processor that knows the future
(``has_structure``); processors without structure keep the neutral defaults.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import torch


class ContinuationScorer(Protocol):
    """What the decoder offers a processor (``bind``): it scores whole continuations of the stream's history."""

    def __call__(self, history: Sequence[int], row: torch.Tensor, continuations: Sequence[Sequence[int]]) -> list[float]:
        """Each continuation's total log-probability after ``history``, whose next-token logits are ``row``."""


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

    def named_probability(self) -> float:
        """The probability to record for the token ``process`` just named: 1 where a rule allows it alone;
        a processor that chose it among alternatives it scored says how likely that choice was."""
        return 1.0

    def bind(self, scorer: ContinuationScorer) -> None:
        """The decoder offers a scorer of whole continuations of this stream's history;
        processors that choose by likelihood (``choice``) keep it."""

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

    def valid_prefix_len(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the processor would allow (pure lookahead)."""
        return len(tokens)


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
