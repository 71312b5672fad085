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


class PrefixCache:
    def __init__(self, runner: ModelRunner, capacity: int = 4):
        self.runner = runner
        self.entries: deque[tuple[np.ndarray, Any]] = deque(maxlen=capacity)
        self.reused_tokens = 0

    def start(self, prompt: Sequence[int]) -> tuple[Any, int]:
        """A fresh state holding the longest cached prefix of ``prompt[:-1]``, and its length."""
        tokens = np.asarray(prompt[:-1], dtype=np.int64)
        best, state = 0, None
        for cached, cached_state in self.entries:
            n = min(len(cached), len(tokens))
            mismatch = np.flatnonzero(cached[:n] != tokens[:n])
            common = int(mismatch[0]) if len(mismatch) else n
            if common > best:
                best, state = common, cached_state
        self.reused_tokens += best
        return (self.runner.fork(state, best) if state is not None else self.runner.new_state()), best

    def store(self, prompt: Sequence[int], state: Any) -> None:
        """Remember a state that holds exactly ``prompt[:-1]``."""
        self.entries.append((np.asarray(prompt[:-1], dtype=np.int64), self.runner.fork(state, len(prompt) - 1)))
