"""Reuse the cache of a prompt prefix that recent prompts share.

Every row of a job carries the same system prompt and template, often
hundreds of tokens, and prefill of those tokens costs more than decoding the
answer. Keeping the caches of a few recent prompts and starting each new one
from its longest common prefix computes the shared part once.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np

from .runner import ModelRunner


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(a[:n] != b[:n])
    return int(mismatch[0]) if len(mismatch) else n


def cacheable(prompt: Sequence[int]) -> np.ndarray:
    """The part of ``prompt`` a cache holds: all but its last token, which is the first decode step's input."""
    return np.asarray(prompt[:-1], dtype=np.int64)


class PrefixCache:
    def __init__(self, runner: ModelRunner, capacity: int = 4):
        self.runner = runner
        self.entries: deque[tuple[np.ndarray, Any]] = deque(maxlen=capacity)
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
        self.reused_tokens += best
        return (self.runner.fork(state, best) if state is not None else self.runner.new_state()), best

    def store(self, prompt: Sequence[int], state: Any) -> None:
        """Remember a state that holds exactly ``cacheable(prompt)``."""
        tokens = cacheable(prompt)
        self.entries.append((tokens, self.runner.fork(state, len(tokens))))
