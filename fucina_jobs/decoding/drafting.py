"""Draft sources for speculative decoding. They see token lists only.

A source proposes a continuation of the history; the decoder verifies it and
reports back how many tokens were accepted. ``truncate_pending`` tells a
source that the draft it just returned was shortened before verification, so
its acceptance accounting only counts tokens that were really tried.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

#: The draft sources, as stats name them: the grammar's forced tokens, and prompt-lookup n-grams.
FORCED, NGRAM = "forced", "ngram"
DRAFT_SOURCES = (FORCED, NGRAM)


@dataclass
class Draft:
    """Proposed tokens; the first ``certain`` of them are mandated, not guessed."""

    tokens: list[int] = field(default_factory=list)
    source: str = ""
    certain: int = 0


class DraftSource(Protocol):
    def propose(self, history: Sequence[int], max_len: int) -> Draft: ...

    def feedback(self, accepted: int) -> None:
        """How many tokens of the last (possibly truncated) draft were accepted."""

    def truncate_pending(self, n: int) -> None:
        """The last draft was cut to its first ``n`` tokens before verification."""


class PromptLookup:
    """N-gram suffix match over prompt plus output (prompt-lookup decoding).

    Extraction copies values verbatim from the document, so the most recent
    earlier occurrence of the history's last n tokens predicts what follows.
    Longer n-grams are tried first: they are rarer and more often right.
    """

    name = NGRAM

    def __init__(self, max_ngram: int, min_ngram: int):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, history: Sequence[int], max_len: int) -> Draft:
        tokens = np.asarray(history, dtype=np.int64)
        for n in range(min(self.max_ngram, len(tokens) - 1), self.min_ngram - 1, -1):
            start = _last_match(tokens, n)
            if start is not None:
                follow = tokens[start + n : start + n + max_len]
                return Draft(follow.tolist(), self.name)
        return Draft([], self.name)

    def feedback(self, accepted: int) -> None:
        pass

    def truncate_pending(self, n: int) -> None:
        pass


def _last_match(tokens: np.ndarray, n: int) -> int | None:
    """Start of the latest earlier occurrence of the last ``n`` tokens, if any."""
    suffix = tokens[-n:]
    windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
    hits = np.flatnonzero((windows == suffix).all(axis=1))
    return int(hits[-1]) if len(hits) else None


class Cascade:
    """Asks its sources in order and tracks each one's acceptance.

    A source whose recent acceptance falls under ``min_acceptance`` is skipped
    for ``cooldown`` proposals, then tried again: a bad source should cost
    verify compute only briefly.
    """

    def __init__(self, sources: Sequence[DraftSource], window: int = 16, min_acceptance: float = 0.1, cooldown: int = 8):
        self.sources = list(sources)
        self.recent = [deque(maxlen=window) for _ in self.sources]
        self.cooldowns = [0] * len(self.sources)
        self.min_acceptance = min_acceptance
        self.cooldown = cooldown
        self._live: int | None = None
        self._live_len = 0

    def propose(self, history: Sequence[int], max_len: int) -> Draft:
        self._live = None
        for i, source in enumerate(self.sources):
            if self.cooldowns[i] > 0:
                self.cooldowns[i] -= 1
                continue
            draft = source.propose(history, max_len)
            if draft.tokens:
                self._live, self._live_len = i, len(draft.tokens)
                return draft
        return Draft()

    def truncate_pending(self, n: int) -> None:
        if self._live is not None:
            self._live_len = min(self._live_len, n)
            self.sources[self._live].truncate_pending(n)

    def feedback(self, accepted: int) -> None:
        if self._live is None or self._live_len == 0:
            return
        i = self._live
        self.sources[i].feedback(accepted)
        self.recent[i].append((accepted, self._live_len))
        tried = sum(n for _, n in self.recent[i])
        if len(self.recent[i]) == self.recent[i].maxlen and sum(a for a, _ in self.recent[i]) < self.min_acceptance * tried:
            self.cooldowns[i] = self.cooldown
            self.recent[i].clear()


class CostGate:
    """Mutes speculation when it does not pay for its verify cost, then probes again.

    ``min_tokens_per_forward`` is the break-even point: a verify forward over
    k+1 tokens costs more than a one-token forward, so it must commit more
    than one token on average to be worth it.
    """

    def __init__(self, min_tokens_per_forward: float, window: int = 8, probe_every: int = 16):
        self.min_tokens_per_forward = min_tokens_per_forward
        self.recent: deque[int] = deque(maxlen=window)
        self.probe_every = probe_every
        self.muted_for = 0

    @property
    def open(self) -> bool:
        return self.muted_for == 0

    def tick_muted(self) -> None:
        self.muted_for -= 1

    def record(self, committed: int) -> None:
        self.recent.append(committed)
        if len(self.recent) == self.recent.maxlen and np.mean(self.recent) < self.min_tokens_per_forward:
            self.muted_for = self.probe_every
            self.recent.clear()
