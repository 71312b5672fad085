"""The verify step: sample a forward's rows in order, commit every sampled token.

A plain step is the same function with no drafts. Because every sampled token
is committed (as an accepted draft, the correction or the bonus) and the
sampler commits it to the processor inside ``Sampler.next``, the processor's
state moves in lockstep with the history: there is nothing to roll back, and
speculative output equals plain output token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

import torch

from .sampler import Sampler


@dataclass
class Verdict:
    committed: int  # tokens appended to the history
    accepted: int  # of which were draft tokens
    stopped: bool  # a stop token was sampled; it is not appended


def verify(
    sampler: Sampler,
    history: list[int],
    drafts: Sequence[int],
    rows: torch.Tensor,
    stop_tokens: Collection[int],
) -> Verdict:
    """``rows[i]`` are the logits after ``history`` plus ``drafts[:i]``.

    Appends each committed token to ``history`` in place. A sampled stop token
    ends the turn on every path alike: it is committed to the processor (the
    sampler did select it) but never enters the history.
    """
    accepted = 0
    for i in range(len(drafts) + 1):
        token = sampler.next(rows[i], history)
        if token in stop_tokens:
            return Verdict(i, accepted, stopped=True)
        history.append(token)
        if i == len(drafts) or token != drafts[i]:
            return Verdict(i + 1, accepted, stopped=False)
        accepted += 1
    raise AssertionError("unreachable: the last row always returns")
