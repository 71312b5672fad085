"""``ConstrainedSource``: a grammar turns from a speculation killer into a drafter.

It bridges the two protocols and nothing else. Forced spans (tokens every
allowed continuation starts with) are certain drafts: the masked sampler can
only pick them, so they verify with probability one. After a forced span the
inner source continues the draft; its tokens are cut at the first one the
grammar forbids, because a token masked at its verify row can only waste
compute and drag the inner source's acceptance down.
"""

from __future__ import annotations

from typing import Sequence

from .drafting import FORCED, Draft, DraftSource
from .processor import LogitProcessor


class ConstrainedSource:
    def __init__(self, inner: DraftSource, processor: LogitProcessor):
        self.inner = inner
        self.processor = processor
        self._inner_len = 0  # tokens of the live draft that came from ``inner``
        self._certain = 0

    def propose(self, history: Sequence[int], max_len: int) -> Draft:
        forced = self.processor.forced_tokens()[:max_len]
        guess = self.inner.propose(list(history) + forced, max_len - len(forced)) if len(forced) < max_len else Draft()
        tokens = forced + guess.tokens
        valid = self.processor.valid_prefix_len(tokens)
        self._certain = len(forced)
        self._inner_len = max(0, valid - len(forced))
        if guess.tokens and self._inner_len < len(guess.tokens):
            self.inner.truncate_pending(self._inner_len)
        return Draft(tokens[:valid], guess.source or FORCED, certain=min(len(forced), valid))

    def truncate_pending(self, n: int) -> None:
        inner_kept = max(0, n - self._certain)
        if self._inner_len and inner_kept < self._inner_len:
            self._inner_len = inner_kept
            self.inner.truncate_pending(inner_kept)
        self._certain = min(self._certain, n)

    def feedback(self, accepted: int) -> None:
        if self._inner_len:
            self.inner.feedback(min(self._inner_len, max(0, accepted - self._certain)))
