"""Reuse the cache of a prompt prefix that recent prompts share.

Every row of a job carries the same system prompt and template, often
hundreds of tokens, and prefill of those tokens costs more than decoding the
answer. Keeping the caches of a few recent prompts and starting each new one
from its longest common prefix computes the shared part once.

A row's whole prompt comes back too: a repair (``rules``) decodes it again
once the rest of its shard is decoded, and so do a vote's samples. So the
cache keeps as many recent prompts as the runner's memory holds beside the
live streams (``ModelRunner.spare``), never fewer than ``KEEP``: an entry
gives its room back before the runner would grow for one.

A runner may refuse a fork (``ModelRunner.fork`` gives None): a sliding
layer's ring no longer holds the window before the shared prefix's end. The
prompt then starts afresh, never from a cache that is not all there.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np

from .runner import ModelRunner

#: Entries kept even where the runner must grow for them: the shared system prompt outlives a few rows.
KEEP = 4
#: States left spare for the decoder's own needs (a newcomer) before an entry gives way.
SPARE = 1


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(a[:n] != b[:n])
    return int(mismatch[0]) if len(mismatch) else n


def cacheable(prompt: Sequence[int]) -> np.ndarray:
    """The part of ``prompt`` a cache holds: all but its last token, which is the first decode step's input."""
    return np.asarray(prompt[:-1], dtype=np.int64)


class PrefixCache:
    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.entries: deque[tuple[np.ndarray, Any]] = deque()
        self.reused_tokens = 0

    def longest(self, prompt: Sequence[int]) -> tuple[int, Any]:
        """The longest cached prefix of ``cacheable(prompt)``: its length, and the state holding it (or None)."""
        tokens = cacheable(prompt)
        best, state = 0, None
        for cached, cached_state in self.entries:
            common = shared_prefix(cached, tokens)
            if common > best:
                best, state = common, cached_state
        return best, state

    def start(self, prompt: Sequence[int]) -> tuple[Any, int]:
        """A fresh state holding the longest cached prefix of ``cacheable(prompt)``, and its length."""
        best, state = self.longest(prompt)
        self._make_room(keeping=state)
        twin = self.runner.fork(state, best) if state is not None else None
        if twin is None:
            return self.runner.new_state(), 0
        self.reused_tokens += best
        return twin, best

    def store(self, prompt: Sequence[int], state: Any) -> None:
        """Remember a state that holds exactly ``cacheable(prompt)``."""
        tokens = cacheable(prompt)
        self._make_room()
        twin = self.runner.fork(state, len(tokens))
        if twin is not None:
            self.entries.append((tokens, twin))

    def _make_room(self, keeping: Any = None) -> None:
        """Drop the oldest entries (but the one about to be forked) while the runner has no state to spare."""
        while len(self.entries) > KEEP and self.runner.spare() <= SPARE:
            oldest = next((i for i, (_, s) in enumerate(self.entries) if s is not keeping), None)
            if oldest is None:
                return
            del self.entries[oldest]
