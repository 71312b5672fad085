"""``ConstrainedSource``: a grammar turns from a speculation killer into a drafter.

It bridges the two protocols and nothing else. Forced spans (tokens every
allowed continuation starts with) are certain drafts: the masked sampler can
only pick them, so they verify with probability one. After a forced span the
inner source continues the draft; its tokens are cut at the first one the
grammar forbids, because a token masked at its verify row can only waste
compute and drag the inner source's acceptance down.

Where the inner source has nothing the grammar allows, the forced text goes
on, spelled out (``likely_tokens``): a grammar forces ``":"`` before a
string value as bytes, not as a token, since ``":"`` could merge with the
value's first letters into one token. The spelled tokens are a guess the
sampler almost always confirms, and the value's first token is the bonus.
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
        self._lead = 0  # the tokens before them, from the grammar

    def propose(self, history: Sequence[int], max_len: int) -> Draft:
        forced = self.processor.forced_tokens()[:max_len]
        lead, guess, valid = self._continue(history, forced, max_len)
        if valid == len(forced) < max_len:
            # The inner source adds nothing the grammar allows: spell out what the grammar still forces
            # as bytes (``":"`` before a string value), where a choice of tokens kept it out of ``forced``.
            spelled = self.processor.likely_tokens()[:max_len]
            if len(spelled) > len(forced):
                lead, guess, valid = self._continue(history, spelled, max_len)
        self._lead = len(lead)
        self._inner_len = max(0, valid - len(lead))
        if guess.tokens and self._inner_len < len(guess.tokens):
            self.inner.truncate_pending(self._inner_len)
        certain = min(len(forced), valid)
        return Draft((lead + guess.tokens)[:valid], guess.source or FORCED, certain, min(len(lead), valid) - certain)

    def _continue(self, history: Sequence[int], lead: list[int], max_len: int) -> tuple[list[int], Draft, int]:
        """The inner source's draft after ``lead``, and how much of both the grammar allows."""
        guess = self.inner.propose(list(history) + lead, max_len - len(lead)) if len(lead) < max_len else Draft()
        return lead, guess, self.processor.valid_prefix_len(lead + guess.tokens)

    def truncate_pending(self, n: int) -> None:
        inner_kept = max(0, n - self._lead)
        if self._inner_len and inner_kept < self._inner_len:
            self._inner_len = inner_kept
            self.inner.truncate_pending(inner_kept)
        self._lead = min(self._lead, n)

    def feedback(self, accepted: int) -> None:
        if self._inner_len:
            self.inner.feedback(min(self._inner_len, max(0, accepted - self._lead)))
