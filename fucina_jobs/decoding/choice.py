"""Choosing a value by its whole likelihood: a processor layered over another one.

Greedy decoding picks a value token by token, and its first token decides the
most: among a receipt's amounts, ``1`` starts 1.00, 10.60 and 15.84 alike, and
whichever the model's first step prefers, the rest follows. Where the values a
field may take are a short list (the amounts, dates or enum members a
document writes), the whole of each can be scored instead.

A *choice* is due once the output has written its text ``after`` (a key such
as ``"total":``); its ``options`` are the texts that may follow, each a value
and the fixed text after it, so that where a value ends is scored too.
``LikelihoodChoice`` then scores every option's tokens under the model in one
batched forward over the stream's cache (the decoder's ``ContinuationScorer``),
and from there on names the best option's tokens one by one, which makes them
certain drafts for speculation. Between choices the inner processor rules.

The choice is a function of the history alone, made inside ``Sampler.next``
through ``process``, so plain, speculative and batched decoding choose alike
and stay equal token for token. It knows no grammar: options are texts, and
the inner processor judges their tokens (``valid_prefix_len``). A named
token's recorded probability is the chosen option's share of the options'
likelihood, so a value's confidence still says how sure the model was.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import torch

from .processor import ContinuationScorer, LogitProcessor, LookJob, PathsAhead
from .runner import ModelRunner


def continuation_logprobs(
    runner: ModelRunner, state: Any, history: Sequence[int], row: torch.Tensor, continuations: Sequence[Sequence[int]]
) -> list[float]:
    """The ``ContinuationScorer`` of a stream whose cache ``state`` holds ``history``: one forward for all continuations.

    The continuations but their last tokens grow one token tree over the cache
    (``ModelRunner.tree``), so options that start alike (``25.75`` and
    ``25.00``, a line and the run it starts) share those tokens' rows; ``row``
    scores every first token. In float64, so that sums of many small terms rank
    alike on every path."""
    nodes: dict[tuple[int, ...], int] = {}  # a continuation's first tokens -> their node
    tokens, parents = [], []
    for c in continuations:
        for j in range(1, len(c)):
            if c[:j] not in nodes:
                nodes[c[:j]] = len(tokens)
                tokens.append(c[j - 1])
                parents.append(nodes.get(c[: j - 1], -1))
    rows = torch.log_softmax(runner.tree(state, len(history), tokens, parents).double(), -1) if tokens else None
    first = torch.log_softmax(row.double(), -1)
    return [float(first[c[0]]) + sum(float(rows[nodes[c[:j]], c[j]]) for j in range(1, len(c))) for c in map(tuple, continuations)]


class LikelihoodChoice(LogitProcessor):
    """``inner``, except at each of ``choices``: (text written before it, option texts) pairs, in output order."""

    def __init__(
        self,
        inner: LogitProcessor,
        choices: Sequence[tuple[str, Sequence[str]]],
        encode: Callable[[str], list[int]],
        decode: Callable[[list[int]], str],
        max_options: int = 16,
    ):
        self.inner = inner
        self.has_structure = inner.has_structure
        self.choices = [(after, tuple(options)) for after, options in choices]
        self.encode, self.decode, self.max_options = encode, decode, max_options
        self.scorer: ContinuationScorer | None = None
        self.reset_state()

    def reset_state(self) -> None:
        self.generated: list[int] = []
        self.due = 0  # index of the next choice
        self.searched = 0  # characters of the output before which the next choice's text is not looked for
        self.pending: list[int] = []  # the chosen option's tokens still to come
        self.share = 1.0  # the chosen option's share of the options' likelihood

    def bind(self, scorer: ContinuationScorer) -> None:
        self.scorer = scorer

    # -- the seam ----------------------------------------------------------------

    def process(self, logits: torch.Tensor, history: Sequence[int]) -> int | None:
        if not self.pending:
            self._choose(logits, history)
        if self.pending:
            return self.pending[0]
        return self.inner.process(logits, history)

    @classmethod
    def look_paths(cls, jobs: Sequence[LookJob]) -> PathsAhead:
        """Ahead along each path: the chosen option's tokens are named; elsewhere the inner processors look
        (one call per class), up to the row where a choice falls due, which needs its logits and a scoring."""
        return _Choices(jobs)

    def named_probability(self) -> float:
        return self.share if self.pending else self.inner.named_probability()

    def commit(self, token: int) -> None:
        self.inner.commit(token)
        self.generated.append(token)
        if self.pending:
            self.pending = self.pending[1:] if token == self.pending[0] else []

    def reset(self) -> None:
        self.inner.reset()
        self.reset_state()

    def error(self) -> str | None:
        return self.inner.error()

    def forced_tokens(self) -> list[int]:
        return list(self.pending) if self.pending else self.inner.forced_tokens()

    def valid_prefix_len(self, tokens: Sequence[int]) -> int:
        same = next((i for i, (a, b) in enumerate(zip(tokens, self.pending)) if a != b), min(len(tokens), len(self.pending)))
        if same < len(self.pending):
            return same
        return self.inner.valid_prefix_len(tokens)  # past the chosen tokens, the inner processor judges

    # -- choosing ----------------------------------------------------------------

    def _due(self, text: str) -> tuple[int, int]:
        """Where in ``text`` (the output) the next choice's text is written, and that choice's index; (-1, -1)
        while none is. The first choice whose text is written: one whose value the output left out (an optional
        key) is passed over."""
        for j, (after, _) in enumerate(self.choices[self.due :], self.due):
            found = text.find(after, self.searched)
            if found >= 0:
                return found, j
        return -1, -1

    def _choose(self, logits: torch.Tensor, history: Sequence[int]) -> None:
        """Make the choice that is due now, if any: the output has just written its text."""
        if self.scorer is None or self.due >= len(self.choices):
            return
        text = self.decode(self.generated)
        found, j = self._due(text)
        if found < 0:
            return
        after, options = self.choices[j]
        self.due = j + 1
        self.searched = found + len(after)  # the next choice's text may be in this one's options: look from here
        written = text[self.searched :]  # what the last token wrote past the choice's text
        candidates = list(dict.fromkeys(tuple(self.encode(o[len(written) :])) for o in options if o.startswith(written) and len(o) > len(written)))
        if len(candidates) > self.max_options:  # the first tokens' log-probabilities are free: try the likeliest first
            first = torch.log_softmax(logits.double(), -1)
            candidates.sort(key=lambda c: -float(first[c[0]]))
        candidates = list(itertools.islice((c for c in candidates if self.inner.valid_prefix_len(c) == len(c)), self.max_options))
        if not candidates:
            return
        scores = self.scorer(history, logits, candidates) if len(candidates) > 1 else [0.0]
        best = max(range(len(candidates)), key=lambda i: scores[i])
        top = max(scores)
        self.share = 1.0 / sum(math.exp(s - top) for s in scores)
        self.pending = list(candidates[best])


class _Choices(PathsAhead):
    """``LikelihoodChoice.look_paths``: per job, the pending option's tokens along the path (named), or the inner
    processor's look up to the row where the next choice falls due (the rows from there are processed in turn)."""

    def __init__(self, jobs: Sequence[LookJob]):
        super().__init__(jobs)
        inner: dict[type[LogitProcessor], list[tuple[int, LookJob]]] = {}
        for k, (choice, history, path, n) in enumerate(jobs):
            if choice.pending:
                same = next((i for i, (a, b) in enumerate(zip(path, choice.pending)) if a != b), min(len(path), len(choice.pending)))
                self.named[k] = list(choice.pending[: min(n, same + 1)])
            elif rows := _undue_rows(choice, path, n):
                inner.setdefault(type(choice.inner), []).append((k, (choice.inner, history, path[: rows - 1], rows)))
        self.looked: list[tuple[PathsAhead, list[int]]] = []
        for kind, members in inner.items():
            looked = kind.look_paths([job for _, job in members])
            self.looked.append((looked, [k for k, _ in members]))
            for (k, _), named in zip(members, looked.named):
                self.named[k] = named

    def process(self, rows: Sequence[Sequence[torch.Tensor | None]]) -> list[list[int | None]]:
        done = [list(named) for named in self.named]
        for looked, members in self.looked:
            for k, processed in zip(members, looked.process([rows[k] for k in members])):
                done[k] = processed
        return done


def _undue_rows(choice: LikelihoodChoice, path: Sequence[int], rows: int) -> int:
    """How many of the leading ``rows`` along ``path`` the inner processor rules: up to the first where a choice falls due."""
    if choice.scorer is None or choice.due >= len(choice.choices):
        return rows
    return next((i for i in range(rows) if choice._due(choice.decode(choice.generated + list(path[:i])))[0] >= 0), rows)
