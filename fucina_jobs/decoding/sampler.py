"""``Sampler.next``: the one place any decode path turns logits into a token.

Hosting the processor here, rather than in each decode loop, makes "every path
samples identically" a structural fact: plain, speculative and batched decoding
all call ``next`` once per committed token, so the processor sees the same
``process``/``commit`` sequence on each of them, and records the same token
probabilities (the verifier's rows are the logits a plain step would see).
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .. import native
from .processor import LogitProcessor


class AllTokensMasked(RuntimeError):
    """The processor left no selectable token: a broken rule fails loudly."""


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How ``Sampler`` picks a token. The settings a job names have their defaults in the job's config
    (``config.py``, ``decoding.*``); an engine builds this from it, key by key."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repeat_penalty: float
    repeat_window: int = 64  # the tokens a repeat penalty looks back over


@dataclass(frozen=True)
class Ahead:
    """What a batch did for one row before ``Sampler.next`` reached it.

    The processor processed the row (``LogitProcessor.look_paths``): it
    masked it in place, or named ``forced``, and then the batch may not have
    computed the row at all. For a greedy sampler, ``stats`` may hold the
    row's greedy token and its log-probability (``row_stats``).
    """

    forced: int | None = None
    stats: tuple[int, float] | None = None


def row_stats(rows: Sequence[torch.Tensor]) -> list[tuple[int, float]]:
    """Each float32 CPU row's greedy token and its log-probability, as ``Sampler.next`` computes them.

    The token is the first maximum (numpy's argmax: a NaN counts as the
    maximum), the log-probability the log-softmax there. A step's rows take
    one call of the C++ pass where the kernels are built (``greedy.cpp``: a
    row read twice, nothing written, rows spread over the intra-op threads),
    which at 128 streams takes a fifth of what ``log_softmax`` and numpy's
    argmax took; without the kernels, those, one call per stretch of rows
    that lie back to back in one tensor (a runner's logits, split per
    stream). Either way a row's result does not depend on the rows beside it.
    """
    kernel = _row_stats_kernel()
    if (
        kernel is not None
        and rows
        and all(r.dtype == torch.float32 and r.is_cpu and r.is_contiguous() and r.numel() == rows[0].numel() for r in rows)
    ):
        best, log_probs = np.empty(len(rows), dtype=np.int64), np.empty(len(rows), dtype=np.float64)
        pointers = (ctypes.c_void_p * len(rows))(*[r.data_ptr() for r in rows])
        kernel(pointers, len(rows), rows[0].numel(), best.ctypes.data, log_probs.ctypes.data, torch.get_num_threads())
        return list(zip(best.tolist(), log_probs.tolist()))
    stats: list[tuple[int, float]] = []
    for run in _runs(rows):
        best = run.numpy().argmax(axis=1)
        log_probs = torch.log_softmax(run, -1)[torch.arange(len(run)), torch.from_numpy(best)]
        stats += zip(best.tolist(), log_probs.tolist())
    return stats


@functools.cache
def _row_stats_kernel() -> Callable[..., None] | None:
    if native.library() is None:
        return None
    return native.entry("fucina_row_stats", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int])


def _runs(rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``rows`` as ``[n, vocab]`` views, one per stretch of rows that follow each other in memory."""
    runs: list[torch.Tensor] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or not _follows(rows[i - 1], rows[i]):
            first = rows[start]
            runs.append(first.as_strided((i - start, first.numel()), (first.numel(), 1), first.storage_offset()))
            start = i
    return runs


def _follows(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``b`` starts where ``a`` ends, in the same tensor (views of one base: a storage lookup costs more)."""
    return (
        a._base is not None
        and a._base is b._base
        and a.numel() == b.numel()
        and a.is_contiguous()
        and b.is_contiguous()
        and b.storage_offset() == a.storage_offset() + a.numel()
    )


class Sampler:
    """Per-stream sampler with an explicit, seedable random generator."""

    def __init__(
        self,
        params: SamplingParams,
        processor: LogitProcessor | None = None,
        seed: int = 0,
    ):
        self.params = params
        self.processor = processor
        self.generator = torch.Generator().manual_seed(seed)
        #: Seconds the processor spent on rows, one entry per row (a call of ``process``, or a row's share of
        #: a batch's ``look_paths``: ``speculative.StepAhead``).
        self.process_seconds: list[float] = []
        #: Probability of each selected token, one entry per call (see ``next``).
        self.token_probs: list[float] = []

    def next(self, logits: torch.Tensor | None, history: Sequence[int], ahead: Ahead | None = None) -> int:
        """Select one token from a ``[vocab]`` row and commit it to the processor.

        Also records the selected token's probability under the constrained
        distribution at temperature 1: the softmax of the row after the
        processor's mask and before any sampling knob. Forced tokens get 1,
        so a value's confidence reflects the choices the model really made,
        and it does not depend on the temperature or penalties a job samples with.

        ``ahead`` is the work a batch did for this row before ``next`` reached
        it (``Ahead``): ``next`` then does only the rest, and commits. Where
        it named the token, ``logits`` may be None: the row was not computed.
        """
        if logits is None and (ahead is None or ahead.forced is None):
            raise ValueError("Sampler.next needs the row's logits unless ahead names its token")
        row = None if logits is None else logits.detach().to(device="cpu", dtype=torch.float32)
        forced = None
        if ahead is not None:
            forced = ahead.forced
        elif self.processor is not None:
            start = time.perf_counter()
            forced = self.processor.process(row, history)
            self.process_seconds.append(time.perf_counter() - start)
        if forced is not None:
            token = self._take(row, forced)
            self.token_probs.append(1.0)  # the softmax of a row masked to one token
        elif self.greedy:
            token, log_prob = ahead.stats if ahead is not None and ahead.stats is not None else row_stats([row])[0]
            self._select(row, history, token)  # only the checks: a greedy row's choice is its first maximum
            self.token_probs.append(math.exp(log_prob))
        else:
            log_probs = torch.log_softmax(row, 0)  # before _select, whose repeat penalty edits the row
            token = self._select(row, history, int(row.numpy().argmax()))
            self.token_probs.append(math.exp(float(log_probs[token])))
        if self.processor is not None:
            self.processor.commit(token)
        return token

    @property
    def greedy(self) -> bool:
        """Selects the row's first maximum: what ``row_stats`` reads off the processed row is its choice."""
        return self.params.temperature <= 0.0 and self.params.repeat_penalty == 1.0

    def _take(self, row: torch.Tensor | None, forced: int) -> int:
        """What ``_select`` picks from a row masked to ``forced`` alone, without masking it (or computing it: None)."""
        if row is not None and not float(row[forced]) > float("-inf"):  # -inf or NaN: nothing is left, as in _select
            raise AllTokensMasked("no token is left to sample: the logit processor allowed one token, and its logit is -inf or NaN")
        if self.params.temperature > 0.0:
            torch.rand((), generator=self.generator)  # _sample's one draw a token, so the stream's draws stay in step
        return forced

    def _select(self, row: torch.Tensor, history: Sequence[int], best: int) -> int:
        """``best`` is the row's first maximum before any penalty: numpy's argmax, a tenth of torch's CPU
        time on a vocab row, and the same rule (the first maximum; NaN wins)."""
        p = self.params
        if p.repeat_penalty != 1.0 and history:
            _apply_repeat_penalty(row, history[-p.repeat_window :], p.repeat_penalty)
            best = int(row.numpy().argmax())
        top = float(row[best])
        if top == float("-inf") or top != top:  # the largest logit is -inf (or NaN): nothing is left
            raise AllTokensMasked("no token is left to sample: the logit processor masked the whole vocabulary")
        if p.temperature <= 0.0:
            return best
        return self._sample(row / p.temperature)

    def _sample(self, row: torch.Tensor) -> int:
        p = self.params
        probs, ids = torch.sort(torch.softmax(row, dim=-1), descending=True)
        keep = probs > 0
        if p.top_k > 0:
            keep[p.top_k :] = False
        if p.top_p < 1.0:
            # Keep the smallest prefix whose mass reaches top_p (the first token always).
            keep &= (torch.cumsum(probs, 0) - probs) < p.top_p
        if p.min_p > 0.0:
            keep &= probs >= p.min_p * probs[0]
        probs = probs * keep
        # Inverse-CDF with exactly one uniform draw per token: the generator
        # advances identically whatever the row, so streams stay reproducible.
        u = torch.rand((), generator=self.generator) * probs.sum()
        index = int(torch.searchsorted(torch.cumsum(probs, 0), u, right=True).clamp(max=int(keep.sum()) - 1))
        return int(ids[index])


def _apply_repeat_penalty(row: torch.Tensor, recent: Sequence[int], penalty: float) -> None:
    # llama.cpp's rule: shrink positive logits, grow negative ones. -inf stays
    # -inf under both, so a mask composes with the penalty in either order.
    ids = torch.tensor(sorted(set(recent)), dtype=torch.long)
    values = row[ids]
    row[ids] = torch.where(values > 0, values / penalty, values * penalty)
