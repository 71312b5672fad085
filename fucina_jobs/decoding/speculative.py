"""The verify step: sample a forward's rows in order, commit every sampled token.

A plain step is the same function with no drafts. Because every sampled token
is committed (as an accepted draft, the correction or the bonus) and the
sampler commits it to the processor inside ``Sampler.next``, the processor's
state moves in lockstep with the history: there is nothing to roll back, and
speculative output equals plain output token for token.

The same fact lets a batch process its rows ahead (``process_ahead``): row
``i`` is sampled only once ``drafts[:i]`` were, so the state it is processed
in is known before any row of the step is sampled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Collection, Sequence

import torch

from .processor import LogitProcessor
from .sampler import Ahead, Sampler, row_stats


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
    ahead: Sequence[Ahead] = (),
) -> Verdict:
    """``rows[i]`` are the logits after ``history`` plus ``drafts[:i]``.

    Appends each committed token to ``history`` in place. A sampled stop token
    ends the turn on every path alike: it is committed to the processor (the
    sampler did select it) but never enters the history. ``ahead`` is the
    work done for the leading rows before the loop (``process_ahead``).
    """
    accepted = 0
    for i in range(len(drafts) + 1):
        token = sampler.next(rows[i], history, ahead[i] if i < len(ahead) else None)
        if token in stop_tokens:
            return Verdict(i, accepted, stopped=True)
        history.append(token)
        if i == len(drafts) or token != drafts[i]:
            return Verdict(i + 1, accepted, stopped=False)
        accepted += 1
    raise AssertionError("unreachable: the last row always returns")


def process_ahead(streams: Sequence[tuple[Sampler, Sequence[int], Sequence[int], torch.Tensor]]) -> list[list[Ahead]]:
    """The work ``Sampler.next`` would do on a step's rows before it selects, done for the whole step at once.

    ``streams`` are ``(sampler, history, drafts, rows)``, the rows the
    runner's float32 CPU logits. Processors of one class process their
    streams' rows in one call (``LogitProcessor.process_paths``: a grammar
    engine fills all their masks together, on the host's cores), each along
    its stream's drafts; the call's time is the processors' time, shared out
    one entry per row it processed. Then one ``row_stats`` call reads the
    greedy choice off every greedy sampler's processed rows that nothing
    forced. ``verify`` takes each stream's list as its ``ahead``.
    """
    processed: list[list[int | None]] = [[None] * rows.shape[0] if sampler.processor is None else [] for sampler, _, _, rows in streams]
    classes: dict[type[LogitProcessor], list[int]] = {}
    for k, (sampler, *_) in enumerate(streams):
        if sampler.processor is not None:
            classes.setdefault(type(sampler.processor), []).append(k)
    for kind, members in classes.items():
        start = time.perf_counter()
        done = kind.process_paths([(streams[k][0].processor, streams[k][3], streams[k][1], streams[k][2]) for k in members])
        share = (time.perf_counter() - start) / max(1, sum(map(len, done)))
        for k, rows_done in zip(members, done):
            processed[k] = rows_done
            streams[k][0].process_seconds.extend([share] * len(rows_done))
    free = [(k, i) for k, (sampler, *_) in enumerate(streams) if sampler.greedy for i, forced in enumerate(processed[k]) if forced is None]
    stats = dict(zip(free, row_stats([streams[k][3][i] for k, i in free])))
    return [[Ahead(forced, stats.get((k, i))) for i, forced in enumerate(done)] for k, done in enumerate(processed)]
