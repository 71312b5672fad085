"""The decode loop: N streams per model replica, one batched forward per step.

Each stream owns its sampler, its random generator and its processor (a clone
of the request's constraint), so streams never share grammar state. A step
asks every live stream for its pending token plus drafts, runs one forward
over the ragged batch, and lets each stream verify its own rows. A finished
stream's slot is refilled from the queue at the next step. Newcomers' prompts
are prefilled in chunks that ride along in the running streams' forwards, up
to ``prefill_tokens`` a forward, so the batch never stalls on a long prompt,
and a batch of newcomers starts decoding together.

One stream with speculation off is plain decoding; the same loop serves all
three paths, so they can only differ through the logits they are given.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from .constrained_source import ConstrainedSource
from .drafting import FORCED, SPELLED, Cascade, CostGate, DocumentLookup, Draft, DraftSource, PromptLookup
from .prefix_cache import PrefixCache, cacheable, shared_prefix
from .processor import LogitProcessor
from .runner import ModelRunner
from .sampler import Ahead, AllTokensMasked, Sampler, SamplingParams
from .speculative import StepAhead, verify

log = logging.getLogger(__name__)


class SharedBatchProcessor(ValueError):
    """Two live streams were handed the same processor object."""


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """Speculation for ``BatchDecoder``; ``spec=None`` is plain decoding, the one way to turn it off. The settings a job
    names have their defaults in the job's config (``decoding.speculative.*``); an engine builds this from it."""

    max_draft: int
    grammar_drafting: bool
    max_ngram: int
    min_ngram: int
    min_tokens_per_forward: float = 1.2  # the cost gate: below it a stream stops drafting for a while


@dataclass
class Request:
    id: str
    prompt: list[int]
    processor: LogitProcessor | None = None  # owned by this request's stream
    seed: int = 0
    max_tokens: int = field(kw_only=True)
    params: SamplingParams | None = field(default=None, kw_only=True)  # this request's sampling settings; None: the decoder's
    #: The document the output copies from, as ``drafting.document_spans``: drafts for the values copied from it.
    document: Sequence[Sequence[int]] = field(default=(), kw_only=True)


@dataclass(kw_only=True)
class StreamStats:
    prompt_tokens: int = 0
    forwards: int = 0
    committed: int = 0
    drafted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    muted_steps: int = 0
    process_seconds: list[float] = field(default_factory=list)

    def count(self, source: str, drafted: int, accepted: int) -> None:
        self.drafted[source] = self.drafted.get(source, 0) + drafted
        self.accepted[source] = self.accepted.get(source, 0) + accepted

    @property
    def acceptance(self) -> float:
        drafted = sum(self.drafted.values())
        return sum(self.accepted.values()) / drafted if drafted else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.committed / self.forwards if self.forwards else 0.0


@dataclass
class Generation:
    id: str
    tokens: list[int]
    finish_reason: str  # stop | length | error
    stats: StreamStats
    _: KW_ONLY
    error: str | None = None
    #: Probability of each of ``tokens`` as the sampler selected it (``Sampler.next``).
    token_probs: list[float] = field(default_factory=list)


class Stream:
    """One request in flight: history, cache, sampler and drafter."""

    def __init__(self, request: Request, params: SamplingParams, spec: SpecConfig | None):
        self.request = request
        self.history = list(request.prompt)
        self.kv: Any = None  # taken when its prefill starts, from the prefix cache
        self.prefill: list[int] = []  # prompt tokens still to be cached
        self.sampler = Sampler(request.params or params, request.processor, seed=request.seed)
        if request.processor is not None:
            request.processor.reset()
        self.drafter = _drafter(spec, request.processor, request.document) if spec else None
        self.gate = CostGate(spec.min_tokens_per_forward) if self.drafter else None
        self.max_draft = spec.max_draft if spec else 0
        self.draft = Draft()
        self.stats = StreamStats(prompt_tokens=len(request.prompt))
        self.finish: str | None = None
        self.error: str | None = None

    @property
    def decoding(self) -> bool:
        """Its whole prompt but the last token is cached: the last one is the first step's pending token."""
        return self.kv is not None and not self.prefill

    @property
    def generated(self) -> int:
        return len(self.history) - len(self.request.prompt)

    def plan(self, stop_tokens: frozenset[int]) -> list[int]:
        """The tokens to feed next: the pending token, then this step's drafts."""
        room = min(self.max_draft, self.request.max_tokens - self.generated - 1)
        self.draft = Draft()
        if self.drafter is not None and room > 0:
            if self.gate.open:
                self.draft = self.drafter.propose(self.history, room)
                self._cut_at_stop(stop_tokens)
            else:
                self.gate.tick_muted()
                self.stats.muted_steps += 1
        return [self.history[-1], *self.draft.tokens]

    def _cut_at_stop(self, stop_tokens: frozenset[int]) -> None:
        # A stop token may only arrive as a sampled correction or bonus, so the
        # turn boundary is handled identically with and without speculation.
        draft = self.draft
        for i, token in enumerate(draft.tokens):
            if token in stop_tokens:
                draft.tokens = draft.tokens[:i]
                lead = min(draft.certain + draft.spelled, i)
                draft.certain = min(draft.certain, i)
                draft.spelled = lead - draft.certain
                self.drafter.truncate_pending(i)
                return

    def advance(self, rows, stop_tokens: frozenset[int], ahead: Sequence[Ahead] = ()) -> None:
        """Verify this step's rows (``ahead``: the work done for them before, ``StepAhead``)
        and bring history, cache and stats up to date."""
        self.stats.forwards += 1
        try:
            verdict = verify(self.sampler, self.history, self.draft.tokens, rows, stop_tokens, ahead)
        except AllTokensMasked as err:
            self.finish, self.error = "error", str(err)
            return
        self.stats.committed += verdict.committed
        if self.draft.tokens:
            self._account(verdict.accepted)
        processor_error = self.request.processor.error() if self.request.processor else None
        if processor_error:
            self.finish, self.error = "error", processor_error
        elif verdict.stopped:
            self.finish = "stop"
        elif self.generated >= self.request.max_tokens:
            self.finish = "length"

    def _account(self, accepted: int) -> None:
        start = 0
        for source, n in ((FORCED, self.draft.certain), (SPELLED, self.draft.spelled), (self.draft.source, len(self.draft.tokens))):
            n = min(n, len(self.draft.tokens) - start)
            if n > 0:
                self.stats.count(source, n, min(n, max(0, accepted - start)))
                start += n
        self.drafter.feedback(accepted)
        self.gate.record(accepted + 1)

    def result(self) -> Generation:
        """The finished stream's generation."""
        self.stats.process_seconds = self.sampler.process_seconds
        tokens = self.history[len(self.request.prompt) :]
        # The sampler also scored a final stop token, which the history leaves out.
        probs = self.sampler.token_probs[: len(tokens)]
        return Generation(self.request.id, tokens, self.finish, self.stats, error=self.error, token_probs=probs)


def _drafter(spec: SpecConfig, processor: LogitProcessor | None, document: Sequence[Sequence[int]] = ()) -> DraftSource:
    lookup = PromptLookup(spec.max_ngram, spec.min_ngram)
    source: DraftSource = Cascade([DocumentLookup(document), lookup] if document else [lookup])
    if spec.grammar_drafting and processor is not None and processor.has_structure:
        source = ConstrainedSource(source, processor)
    return source


class BatchDecoder:
    """Decodes requests with up to ``streams`` of them in flight at once.

    ``prefill_tokens`` caps the prompt tokens one forward carries: a batch of
    newcomers' prompt tails (a few hundred tokens each) fits in one forward,
    and a running stream never waits on more than that.
    """

    def __init__(
        self,
        runner: ModelRunner,
        stop_tokens: Iterable[int],
        params: SamplingParams,
        spec: SpecConfig | None = None,
        *,
        streams: int = 1,
        on_step: Callable[[], Any] | None = None,
        prefill_tokens: int = 2048,
    ):
        self.runner = runner
        self.stop_tokens = frozenset(stop_tokens)
        self.params = params
        self.spec = spec
        self.streams = streams
        self.on_step = on_step
        self.prefill_tokens = prefill_tokens
        self.prefixes = PrefixCache(runner)
        self.waiting: deque[Request] = deque()
        self._firsts = 0  # the leading waiting requests that were added ``first``
        self.live: list[Stream] = []  # at most ``streams``, in admission order

    def run(self, requests: Iterable[Request]) -> Iterator[Generation]:
        """Yield one ``Generation`` per request, in completion order."""
        for request in requests:
            self.add(request)
        while self.busy:
            yield from self.step()

    def add(self, request: Request, first: bool = False) -> None:
        """Queue a request; it takes a stream at the next step with a free one, so callers can feed a running decoder.
        ``first`` queues it before the requests already waiting (in the order such requests come)."""
        if first:
            self.waiting.insert(self._firsts, request)
            self._firsts += 1
        else:
            self.waiting.append(request)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.live)

    def step(self) -> list[Generation]:
        """Fill free streams from the queue, run one forward, and return the generations that finished."""
        newcomers = [self.waiting.popleft() for _ in range(min(len(self.waiting), self.streams - len(self.live)))]
        self._firsts = max(0, self._firsts - len(newcomers))
        if newcomers:
            _check_unshared(self.live, newcomers)
            self.live += [Stream(request, self.params, self.spec) for request in newcomers]
        self._step(self.live)
        done = [s for s in self.live if s.finish]
        self.live = [s for s in self.live if not s.finish]
        return [s.result() for s in done]

    def _step(self, live: list[Stream]) -> None:
        """One forward: every decoding stream's feed, plus the next prompt chunks of newcomers."""
        prefill = self._prefill_chunks(live)
        prefilling = [s for s, _ in prefill]
        decoding = [s for s in live if s.decoding and s not in prefilling]
        feeds = [s.plan(self.stop_tokens) for s in decoding]
        looked = StepAhead([(s.sampler, s.history, s.draft.tokens) for s in decoding])
        batch = [(s.kv, feed) for s, feed in zip(decoding, feeds)] + [(s.kv, chunk) for s, chunk in prefill]
        computed = self.runner.forward(batch, logits=looked.wanted + [False] * len(prefill))
        for stream in prefilling:
            if stream.decoding:
                self.prefixes.store(stream.request.prompt, stream.kv)
        rows, ahead = looked.process(computed)
        for stream, stream_rows, stream_ahead in zip(decoding, rows, ahead):
            stream.advance(stream_rows, self.stop_tokens, stream_ahead)
            self.runner.trim(stream.kv, len(stream.history) - 1)
        if self.on_step is not None:
            self.on_step()

    def _prefill_chunks(self, live: list[Stream]) -> list[tuple[Stream, list[int]]]:
        """This forward's prompt chunks, ``prefill_tokens`` in all, oldest stream first, cut from each stream's prefill.

        Several prompts share a forward, so a batch of newcomers starts
        decoding together rather than one prompt per step. A newcomer, started
        here from the prefix cache, still waits for an earlier prompt in
        prefill that would spare it at least half its prefill, once cached:
        the first of a job's rows computes the shared system prompt, and the
        others reuse it. A few tokens in common by chance are not worth a
        step's wait.
        """
        chunks: list[tuple[Stream, list[int]]] = []
        budget = self.prefill_tokens
        for stream in live:
            if budget <= 0:
                break
            if stream.kv is None:
                if self._worth_waiting(stream, [s for s, _ in chunks]):
                    continue
                stream.kv, cached = self.prefixes.start(stream.request.prompt)
                stream.prefill = list(stream.request.prompt[cached:-1])
            if stream.prefill:
                chunk = stream.prefill[:budget]
                del stream.prefill[: len(chunk)]
                chunks.append((stream, chunk))
                budget -= len(chunk)
        return chunks

    def _worth_waiting(self, newcomer: Stream, prefilling: list[Stream]) -> bool:
        tokens = cacheable(newcomer.request.prompt)
        cached, _ = self.prefixes.longest(newcomer.request.prompt)
        spared = max((shared_prefix(cacheable(s.request.prompt), tokens) for s in prefilling), default=0) - cached
        return spared > 0 and 2 * spared >= len(tokens) - cached


def _check_unshared(live: list[Stream], newcomers: list[Request]) -> None:
    seen = {id(s.request.processor) for s in live if s.request.processor is not None}
    for request in newcomers:
        if request.processor is None:
            continue
        if id(request.processor) in seen:
            raise SharedBatchProcessor(f"request {request.id} shares its processor with another live stream; give each request its own clone()")
        seen.add(id(request.processor))
