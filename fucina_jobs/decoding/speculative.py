"""The verify step: sample a forward's rows in order, commit every sampled token.

A plain step is the same function with no drafts. Because every sampled token
is committed (as an accepted draft, the correction or the bonus) and the
sampler commits it to the processor inside ``Sampler.next``, the processor's
state moves in lockstep with the history: there is nothing to roll back, and
speculative output equals plain output token for token.

The same fact lets a batch process its rows ahead (``StepAhead``): row ``i``
is sampled only once ``drafts[:i]`` were, so the state it is processed in is
known before any row of the step is sampled, even before the forward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Collection, Sequence

import torch

from .processor import LogitProcessor, PathsAhead
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
    rows: Sequence[torch.Tensor | None],
    stop_tokens: Collection[int],
    ahead: Sequence[Ahead] = (),
) -> Verdict:
    """``rows[i]`` are the logits after ``history`` plus ``drafts[:i]`` (None where ``ahead[i]`` named the token,
    ``StepAhead``: a named token needs no logits).

    Appends each committed token to ``history`` in place. A sampled stop token
    ends the turn on every path alike: it is committed to the processor (the
    sampler did select it) but never enters the history. ``ahead`` is the
    work done for the leading rows before the loop (``StepAhead``).
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


class StepAhead:
    """The work ``Sampler.next`` would do on a step's rows before it selects, done for the whole step at
    once, in two halves around the forward.

    Built from ``(sampler, history, drafts)`` per stream, before the forward:
    processors of one class look along their streams' drafts in one call
    (``LogitProcessor.look_paths``: a grammar engine fills all their masks
    together, on the host's cores). ``wanted`` says which rows the forward
    must compute: not those whose token a processor named. ``process`` takes
    the forward's rows, processes them (masks), and reads one ``row_stats``
    call's greedy choice off every greedy sampler's rows that nothing named;
    it returns each stream's rows (None where named) for ``verify``, and
    their ``Ahead``. The processors' time is shared out one entry per row
    they processed.
    """

    def __init__(self, streams: Sequence[tuple[Sampler, Sequence[int], Sequence[int]]]):
        self.streams = streams
        named: list[list[int | None]] = [[] for _ in streams]
        self.looked: list[tuple[PathsAhead, list[int], float]] = []
        classes: dict[type[LogitProcessor], list[int]] = {}
        for k, (sampler, *_) in enumerate(streams):
            if sampler.processor is not None:
                classes.setdefault(type(sampler.processor), []).append(k)
        for kind, members in classes.items():
            start = time.perf_counter()
            looked = kind.look_paths([(streams[k][0].processor, streams[k][1], streams[k][2], len(streams[k][2]) + 1) for k in members])
            self.looked.append((looked, members, time.perf_counter() - start))
            for k, names in zip(members, looked.named):
                named[k] = names
        #: Per stream, the rows the forward must compute: True for all of them, else a flag per row.
        self.wanted: list[bool | list[bool]] = [_wanted(names, len(drafts) + 1) for names, (_, _, drafts) in zip(named, streams)]

    def process(self, computed: Sequence[torch.Tensor]) -> tuple[list[Sequence[torch.Tensor | None]], list[list[Ahead]]]:
        """``computed``: each stream's computed rows, as the runner returned them for ``wanted``."""
        rows = [c if w is True else _spread(c, w) for c, w in zip(computed, self.wanted)]
        processed: list[list[int | None]] = [[None] * len(r) if sampler.processor is None else [] for (sampler, *_), r in zip(self.streams, rows)]
        for looked, members, seconds in self.looked:
            start = time.perf_counter()
            done = looked.process([rows[k] for k in members])
            share = (seconds + time.perf_counter() - start) / max(1, sum(map(len, done)))
            for k, rows_done in zip(members, done):
                processed[k] = rows_done
                self.streams[k][0].process_seconds.extend([share] * len(rows_done))
        free = [(k, i) for k, (sampler, *_) in enumerate(self.streams) if sampler.greedy for i, named in enumerate(processed[k]) if named is None]
        stats = dict(zip(free, row_stats([rows[k][i] for k, i in free])))
        return rows, [[Ahead(named, stats.get((k, i))) for i, named in enumerate(done)] for k, done in enumerate(processed)]


def _wanted(named: Sequence[int | None], rows: int) -> bool | list[bool]:
    """True where every one of ``rows`` must be computed, else a flag per row: not those ``named`` names."""
    flags = [i >= len(named) or named[i] is None for i in range(rows)]
    return True if all(flags) else flags


def _spread(computed: torch.Tensor, flags: Sequence[bool]) -> list[torch.Tensor | None]:
    """The computed rows at their flagged places, None at the others."""
    it = iter(computed)
    return [next(it) if flag else None for flag in flags]
