"""Choosing a value by its whole likelihood: a processor layered over another one.

Greedy decoding picks a value token by token, and its first token decides the
most: among a receipt's amounts, ``1`` starts 1.00, 10.60 and 15.84 alike, and
whichever the model's first step prefers, the rest follows. Where the values a
field may take are a short list (the amounts, dates or enum members a
document writes), the whole of each can be scored instead.

A *choice* is due once the output has written its text ``after`` (a key such
as ``"total":``); its options are the values that may follow, each with the
fixed text after it (the next key), so that where a value ends is scored too.
An option is scored up to the first token that writes any of that fixed
text: that token says where the value ends, and the rest of the key, the
same after every value, would cost a token of the forward per option for
hardly any evidence. ``LikelihoodChoice`` then scores every option's tokens
under the model in one batched forward over the stream's cache (the decoder's
``ContinuationScorer``), and from there on names the best option's tokens one
by one, which makes them certain drafts for speculation. Between choices the
inner processor rules.

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
from typing import Callable, Sequence

import torch

from .processor import ContinuationScorer, LogitProcessor, LookJob, PathsAhead, ScoringAhead


#: Logits after each node of a token tree (tokens, parents; ``ModelRunner.tree``) grown on a stream's history.
TreeRows = Callable[[list[int], list[int]], torch.Tensor]


def token_tree(continuations: Sequence[Sequence[int]]) -> tuple[list[int], list[int], dict[tuple[int, ...], int]]:
    """The token tree whose rows score ``continuations`` but their last tokens: tokens, parents (-1: the history),
    and the node of each leading run of tokens. Continuations that start alike (``25.75`` and ``25.00``, a line
    and the run it starts) share those tokens' nodes."""
    nodes: dict[tuple[int, ...], int] = {}
    tokens, parents = [], []
    for c in map(tuple, continuations):
        for j in range(1, len(c)):
            if c[:j] not in nodes:
                nodes[c[:j]] = len(tokens)
                tokens.append(c[j - 1])
                parents.append(nodes.get(c[: j - 1], -1))
    return tokens, parents, nodes


def continuation_logprobs(tree_rows: TreeRows, row: torch.Tensor, continuations: Sequence[Sequence[int]]) -> list[float]:
    """A stream's ``ContinuationScorer``: ``row`` scores every first token, one forward over ``token_tree`` the rest
    (``tree_rows``: the stream's ``ModelRunner.tree``, or the rows its step already computed). In float64, so that
    sums of many small terms rank alike on every path."""
    tokens, parents, nodes = token_tree(continuations)
    rows = torch.log_softmax(tree_rows(tokens, parents).double(), -1) if tokens else None
    first = torch.log_softmax(row.double(), -1)
    return [float(first[c[0]]) + sum(float(rows[nodes[c[:j]], c[j]]) for j in range(1, len(c))) for c in map(tuple, continuations)]


class LikelihoodChoice(LogitProcessor):
    """``inner``, except at each of ``choices``: (text written before it, values, text after each) triples, in output order."""

    def __init__(
        self,
        inner: LogitProcessor,
        choices: Sequence[tuple[str, Sequence[str], str]],
        encode: Callable[[str], list[int]],
        decode: Callable[[list[int]], str],
        *,
        max_options: int = 16,
    ):
        self.inner = inner
        self.has_structure = inner.has_structure
        self.choices = [(after, tuple(values), follow) for after, values, follow in choices]
        self.encode, self.decode, self.max_options = encode, decode, max_options
        self.scorer: ContinuationScorer | None = None
        self._encoded: dict[tuple[int, str], list[tuple[int, ...]]] = {}  # ``_options``' tokens, by choice and text written
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
        for j, (after, _, _) in enumerate(self.choices[self.due :], self.due):
            found = text.find(after, self.searched)
            if found >= 0:
                return found, j
        return -1, -1

    def _options(self, text: str) -> tuple[int, int, list[tuple[int, ...]]] | None:
        """The choice due once the output reads ``text``: its index, where its text ends, and its options' tokens
        past what the output wrote after it; None while none is due."""
        found, j = self._due(text)
        if found < 0:
            return None
        end = found + len(self.choices[j][0])
        written = text[end:]  # what the last token wrote past the choice's text
        if (j, written) not in self._encoded:
            self._encoded[j, written] = self._encode_options(j, written)
        return j, end, self._encoded[j, written]

    def _encode_options(self, j: int, written: str) -> list[tuple[int, ...]]:
        """Choice ``j``'s options past ``written``, each up to the first token that writes its fixed text after the value."""
        _, values, follow = self.choices[j]
        options = []
        for value in values:
            option = value + follow
            if option.startswith(written) and len(option) > len(written):
                tokens, rest = self.encode(option[len(written) :]), value[len(written) :]
                ends = next((k for k in range(1, len(tokens)) if _covers(self.decode(tokens[:k]), rest)), len(tokens)) if follow else len(tokens)
                options.append(tuple(tokens[:ends]))
        return list(dict.fromkeys(options))

    def _choose(self, logits: torch.Tensor, history: Sequence[int]) -> None:
        """Make the choice that is due now, if any: the output has just written its text."""
        if self.scorer is None or self.due >= len(self.choices):
            return
        due = self._options(self.decode(self.generated))
        if due is None:
            return
        j, self.searched, candidates = due  # the next choice's text may be in this one's options: look from its end
        self.due = j + 1
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
    """``LikelihoodChoice.look_paths``: per job, the pending option's tokens along the path (named); once the path
    has written them all, the inner processor's look up to the row where the next choice falls due (the rows from
    there are processed in turn), and what that choice will score there (``scoring``)."""

    def __init__(self, jobs: Sequence[LookJob]):
        super().__init__(jobs)
        self.chosen = [0] * len(self.jobs)  # per job, the leading rows that name the pending option's tokens
        inner: dict[type[LogitProcessor], list[tuple[int, LookJob]]] = {}
        for k, (choice, history, path, n) in enumerate(jobs):
            pending = choice.pending
            same = next((i for i, (a, b) in enumerate(zip(path, pending)) if a != b), min(len(path), len(pending)))
            self.chosen[k] = min(n, same + 1, len(pending))
            self.named[k] = list(pending[: self.chosen[k]])
            if same < len(pending) or len(pending) >= n:
                continue  # the pending option's tokens cover every row the path reaches
            rows = _undue_rows(choice, path, n, len(pending))
            if rows < n:
                self.scoring[k] = _scoring_ahead(choice, path, rows)
            if rows > len(pending):
                inner.setdefault(type(choice.inner), []).append((k, (choice.inner, history, path[: rows - 1], rows)))
        self.looked: list[tuple[PathsAhead, list[int]]] = []
        for kind, members in inner.items():
            looked = kind.look_paths([job for _, job in members])
            self.looked.append((looked, [k for k, _ in members]))
            for (k, _), named in zip(members, looked.named):
                self.named[k] += named[self.chosen[k] :]

    def process(self, rows: Sequence[Sequence[torch.Tensor | None]]) -> list[list[int | None]]:
        done = [list(named) for named in self.named]
        for looked, members in self.looked:
            for k, processed in zip(members, looked.process([rows[k] for k in members])):
                done[k] = done[k][: self.chosen[k]] + processed[self.chosen[k] :]
        return done


def _covers(decoded: str, value: str) -> bool:
    """Whether tokens that decode to ``decoded`` write all of ``value`` and some of what follows it (a token that
    stops inside a character decodes to a replacement mark, which is no prefix)."""
    return len(decoded) > len(value) and decoded.startswith(value)


def _undue_rows(choice: LikelihoodChoice, path: Sequence[int], rows: int, start: int) -> int:
    """How many of the leading ``rows`` along ``path`` pass before a choice falls due, from row ``start`` on."""
    if choice.scorer is None or choice.due >= len(choice.choices):
        return rows
    return next((i for i in range(start, rows) if choice._due(choice.decode(choice.generated + list(path[:i])))[0] >= 0), rows)


def _scoring_ahead(choice: LikelihoodChoice, path: Sequence[int], row: int) -> ScoringAhead | None:
    """What the choice that falls due at ``row`` will score, as ``_choose`` will find it there; None where that
    needs the row's logits (more options than ``max_options``, ranked by their first tokens) or nothing to score."""
    lead = list(path[:row])
    due = choice._options(choice.decode(choice.generated + lead))
    if due is None or len(due[2]) > choice.max_options or choice.inner.valid_prefix_len(lead) < row:
        return None
    candidates = tuple(c for c in due[2] if choice.inner.valid_prefix_len(lead + list(c)) == row + len(c))
    has_tree = any(len(c) > 1 for c in candidates)  # single tokens are all scored by the row itself
    return ScoringAhead(row, candidates) if len(candidates) > 1 and has_tree else None
