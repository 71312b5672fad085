"""Draft sources for speculative decoding. They see token lists only.

A source proposes a continuation of the history; the decoder verifies it and
reports back how many tokens were accepted. ``truncate_pending`` tells a
source that the draft it just returned was shortened before verification, so
its acceptance accounting only counts tokens that were really tried.
"""

from __future__ import annotations

import array
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

#: The draft sources, as stats name them: the grammar's forced tokens, the tokens that spell its forced text,
#: copies of the document, and prompt-lookup n-grams.
FORCED, SPELLED, DOCUMENT, NGRAM = "forced", "spelled", "document", "ngram"
DRAFT_SOURCES = (FORCED, SPELLED, DOCUMENT, NGRAM)


@dataclass
class Draft:
    """Proposed tokens: the first ``certain`` are mandated, not guessed; the ``spelled`` after them write out
    text the grammar mandates, in the tokens it is most likely written with; ``source`` guessed the rest."""

    tokens: list[int] = field(default_factory=list)
    source: str = ""
    certain: int = 0
    spelled: int = 0


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
        tokens = array.array("i", history).tobytes()  # 4 bytes a token: bytes.rfind searches at C speed
        for n in range(min(self.max_ngram, len(history) - 1), self.min_ngram - 1, -1):
            start = _last_match(tokens, n)
            if start is not None:
                return Draft(list(history[start + n : start + n + max_len]), self.name)
        return Draft([], self.name)

    def feedback(self, accepted: int) -> None:
        pass

    def truncate_pending(self, n: int) -> None:
        pass


def _last_match(tokens: bytes, n: int) -> int | None:
    """Start of the latest earlier occurrence of the last ``n`` tokens (4 bytes each), if any."""
    suffix, end = tokens[-4 * n :], len(tokens) - 4  # an earlier occurrence ends before the last token
    while (found := tokens.rfind(suffix, 0, end)) >= 0:
        if found % 4 == 0:
            return found // 4
        end = found + 4 * n - 1  # a hit across token boundaries: look further back
    return None


#: Where a copied value may start in a document: a word character not preceded by one.
_WORD_START = re.compile(r"(?<!\w)\w")


def document_spans(text: str, encode: Callable[[list[str]], list[list[int]]], chars: int = 96) -> list[list[int]]:
    """``DocumentLookup``'s spans of ``text``: from each word start to the end of its line (at most ``chars``).

    ``encode`` tokenizes a batch of strings as the model writes them: a span
    is encoded on its own, so its first word has no leading space, as in a
    JSON string (``" BWS"`` in the document, ``"B", "WS"`` in the value).
    """
    lines = [(m.start(), text.find("\n", m.start())) for m in _WORD_START.finditer(text)]
    return encode([text[start : min(start + chars, end if end >= 0 else len(text))] for start, end in lines]) if lines else []


class DocumentLookup:
    """Copies the document from where the value being written starts there.

    Prompt lookup needs an n-gram of context, and a value's first tokens have
    none: ``"vendor":"`` is not in the document, and the document writes the
    value after a space, which tokenizes its first word differently. Here the
    document is a set of ``spans`` (``document_spans``), each starting at a
    word as a value would. The longest end of the history that begins a span
    is the value so far; the draft is what follows it there. Where several
    spans match, the draft is what they all continue with (nothing, where
    they part at once): the grammar decides what is allowed, and the model
    which of the places it copies.
    """

    name = DOCUMENT

    def __init__(self, spans: Sequence[Sequence[int]], longest: int = 32):
        self.spans = [tuple(s) for s in spans if s]
        self.longest = longest
        self.starting: dict[int, list[tuple[int, ...]]] = {}  # first token -> the spans it starts
        for span in self.spans:
            self.starting.setdefault(span[0], []).append(span)

    def propose(self, history: Sequence[int], max_len: int) -> Draft:
        tail = tuple(history[-self.longest :])
        for j, token in enumerate(tail):  # the longest end first
            spans = self.starting.get(token)
            if not spans:
                continue
            n = len(tail) - j
            follows = [span[n : n + max_len] for span in spans if span[:n] == tail[j:]]
            if follows:
                return Draft(list(_common_prefix(follows)), self.name)
        return Draft([], self.name)

    def feedback(self, accepted: int) -> None:
        pass

    def truncate_pending(self, n: int) -> None:
        pass


def _common_prefix(sequences: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = sequences[0]
    for i, token in enumerate(first):
        if any(len(s) <= i or s[i] != token for s in sequences[1:]):
            return first[:i]
    return first


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
        recent = self.recent[i]
        recent.append((accepted, self._live_len))
        if len(recent) == recent.maxlen and sum(a for a, _ in recent) < self.min_acceptance * sum(n for _, n in recent):
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
        if len(self.recent) == self.recent.maxlen and sum(self.recent) < self.min_tokens_per_forward * len(self.recent):
            self.muted_for = self.probe_every
            self.recent.clear()
