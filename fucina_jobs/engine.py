"""The engine interface the job pipeline sees, and its fucina implementation.

The pipeline hands over prompts and constraints and gets completions back; it
never touches the sampler, the drafts or the model runner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from .confidence import token_spans
from .decoding.batch import BatchDecoder, Request, SpecConfig, StreamStats
from .decoding.constraint import Constraint, GrammarError
from .decoding.drafting import DRAFT_SOURCES, document_spans
from .decoding.relaxation import compile_json_schema
from .decoding.sampler import SamplingParams
from .models.hf_runner import HFRunner
from .models.loading import DEFAULT_MODEL, LoadedModel, ModelNotFound, load_model, load_tokenizer, resolve_device, resolve_source

#: What callers outside the decoder (the job pipeline) use, so they never import ``decoding`` or ``models``:
#: the settings and stats types, the error ``constraint()`` raises, schema relaxation and model resolution.
__all__ = [
    "DRAFT_SOURCES", "BatchSession", "Completion", "Engine", "FucinaEngine", "GrammarCheck", "GrammarError", "ModelNotFound", "Prompt",
    "SamplingParams", "Session", "SpecConfig", "StreamStats", "compile_json_schema", "drain", "load_model",
    "load_tokenizer", "resolve_device", "resolve_source",
]


@dataclass
class Prompt:
    id: str
    text: str  # the user message: untrusted document text included
    system: str | None = None
    constraint: Any = None  # from the engine's constraint(): fucina clones it per stream
    seed: int = 0
    max_tokens: int = 256


@dataclass
class Completion:
    id: str
    text: str
    tokens: list[int]
    finish_reason: str  # stop | length | error
    stats: StreamStats = field(default_factory=StreamStats)
    error: str | None = None
    #: Per token: its probability as sampled, and its character span in ``text`` (``completion_text``).
    token_probs: list[float] = field(default_factory=list)
    token_spans: list[tuple[int, int]] = field(default_factory=list)


class Session(Protocol):
    """A running decoder that takes prompts at any time: a replica feeds it shard after shard, so it never drains.

    ``width`` is how many streams the last step decoded (its occupancy), or None
    where the engine cannot say."""

    width: int | None

    def add(self, prompt: Prompt) -> None: ...

    @property
    def busy(self) -> bool: ...

    def step(self) -> list[Completion]: ...


class Engine(Protocol):
    """What the job pipeline needs from a decoder; ``constraint`` returns an opaque handle for ``Prompt.constraint``."""

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Any: ...

    def session(self, on_step: Callable[[], Any] | None = None) -> Session: ...

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]: ...


def drain(session: Session, prompts: Iterable[Prompt]) -> Iterator[Completion]:
    """Every prompt's completion, in the order they finish: a session fed once and stepped until it is idle."""
    for prompt in prompts:
        session.add(prompt)
    while session.busy:
        yield from session.step()


class BatchSession:
    """A session over an engine that decodes whole batches: each step decodes every prompt added since the last."""

    width = None

    def __init__(self, generate: Callable[[list[Prompt]], Iterable[Completion]]):
        self.generate = generate
        self.pending: list[Prompt] = []

    def add(self, prompt: Prompt) -> None:
        self.pending.append(prompt)

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def step(self) -> list[Completion]:
        batch, self.pending = self.pending, []
        return list(self.generate(batch))


def constraint_kind(json_schema: Any = None, lark: Any = None, regex: Any = None) -> tuple[str, Any]:
    """The one constraint given, as (kind, source)."""
    given = [(k, v) for k, v in (("json_schema", json_schema), ("lark", lark), ("regex", regex)) if v is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of json_schema, lark or regex")
    return given[0]


_SYSTEM, _USER = "\x00fucina-system\x00", "\x00fucina-user\x00"


def encode_chat(tokenizer: Any, user: str, system: str | None = None) -> list[int]:
    """Chat-template the messages; message text is encoded with special tokens split.

    Only the template's own markers become control tokens, so a document that
    contains ``<|im_end|>`` cannot end the turn.
    """
    contents = {_SYSTEM: system, _USER: user}
    if tokenizer.chat_template:
        messages = ([{"role": "system", "content": _SYSTEM}] if system else []) + [{"role": "user", "content": _USER}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        rendered = (f"{_SYSTEM}\n\n" if system else "") + f"{_USER}\n"
    ids: list[int] = []
    for piece in re.split(f"({_SYSTEM}|{_USER})", rendered):
        if piece in contents:
            ids += tokenizer(contents[piece], add_special_tokens=False, split_special_tokens=True).input_ids
        elif piece:
            ids += tokenizer(piece, add_special_tokens=False).input_ids
    return ids


def context_overflow(prompt_tokens: int, max_tokens: int, context: int | None) -> str | None:
    """Why a prompt cannot fit the model's context, or None.

    Checked before decoding: a prompt past the context decodes for minutes into
    garbage and holds up every row of its shard.
    """
    if context is None or prompt_tokens + max_tokens <= context:
        return None
    return (f"the prompt is {prompt_tokens} tokens: with max_tokens={max_tokens} it exceeds the model's context of "
            f"{context} tokens; shorten the document or lower decoding.max_tokens")
def completion_text(tokenizer: Any, tokens: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The completion's text, and each token's character span in it (per-value confidence needs both)."""
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    return decode(tokens), token_spans(tokens, decode)


def stop_tokens(tokenizer: Any) -> set[int]:
    """EOS plus the chat template's end-of-turn marker, where it has one."""
    stops = {tokenizer.eos_token_id}
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id:
        stops.add(end_of_turn)
    return {t for t in stops if t is not None}


def compile_constraint(
    tokenizer: Any, *, vocab_size: int | None = None, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False
) -> Constraint:
    """Compile one constraint for a tokenizer's vocab, stopping on its end-of-turn token (compact JSON by default)."""
    kind, source = constraint_kind(json_schema, lark, regex)
    options = {"whitespace_flexible": whitespace_flexible} if kind == "json_schema" else {}
    return getattr(Constraint, kind)(source, tokenizer, vocab_size=vocab_size, stop_token=min(stop_tokens(tokenizer)), **options)


class GrammarCheck:
    """Compiles constraints with a tokenizer alone, as an engine would.

    The driver checks a job's constraint with it before any model loads, so a
    bad schema or grammar is a config error, not a replica that dies.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    def constraint(self, **kw: Any) -> Constraint:
        return compile_constraint(self.tokenizer, **kw)


class FucinaEngine:
    """Our constrained speculative decoder over a transformers model."""

    def __init__(
        self,
        loaded: LoadedModel,
        params: SamplingParams = SamplingParams(),
        spec: SpecConfig | None = SpecConfig(),
        streams: int = 1,
        compile: bool = False,
    ):
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.runner = HFRunner(loaded.model, loaded.device, compile=compile)
        self.stops = stop_tokens(self.tokenizer)
        self.params, self.spec, self.streams = params, spec, streams
        self.context = getattr(loaded.model.config, "max_position_embeddings", None)

    @classmethod
    def load(cls, source: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "float32", **kw: Any) -> "FucinaEngine":
        return cls(load_model(source, device, dtype), **kw)

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Constraint:
        """Compile one constraint for this model's vocab and stop token (compact JSON by default)."""
        return compile_constraint(self.tokenizer, vocab_size=self.runner.vocab_size, json_schema=json_schema, lark=lark, regex=regex,
                                  whitespace_flexible=whitespace_flexible)

    def session(self, on_step: Callable[[], Any] | None = None) -> "FucinaSession":
        return FucinaSession(self, BatchDecoder(self.runner, self.stops, self.params, self.spec, self.streams, on_step))

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        """Completions in the order they finish; a prompt that cannot fit the context comes back at once as an error."""
        return drain(self.session(on_step), prompts)

    def document(self, text: str) -> list[list[int]]:
        """The user message as the drafts copy from it (``drafting.document_spans``), encoded as ``encode_chat`` encodes it."""
        return document_spans(text, lambda texts: self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True).input_ids)

    def complete(self, text: str, constraint: Constraint | None = None, system: str | None = None, max_tokens: int = 256) -> Completion:
        """One prompt, one completion: the simplest way in."""
        return next(self.generate([Prompt("0", text, system, constraint, max_tokens=max_tokens)]))


class FucinaSession:
    """The fucina decoder as a session: prompts are encoded and checked against the context as they are added."""

    def __init__(self, engine: FucinaEngine, decoder: BatchDecoder):
        self.engine, self.decoder = engine, decoder
        self.refused: list[Completion] = []
        self.width: int | None = 0

    def add(self, p: Prompt) -> None:
        ids = encode_chat(self.engine.tokenizer, p.text, p.system)
        problem = context_overflow(len(ids), p.max_tokens, self.engine.context)
        if problem:
            self.refused.append(Completion(p.id, "", [], "error", StreamStats(prompt_tokens=len(ids)), error=problem))
            return
        document = self.engine.document(p.text) if self.engine.spec and self.engine.spec.enabled else ()
        self.decoder.add(Request(p.id, ids, p.constraint.clone() if p.constraint else None, p.seed, p.max_tokens, document))

    @property
    def busy(self) -> bool:
        return bool(self.refused) or self.decoder.busy

    def step(self) -> list[Completion]:
        done, self.refused = self.refused, []
        self.width = 0
        if self.decoder.busy:
            generations = self.decoder.step()
            self.width = len(self.decoder.live) + len(generations)
            done += [self._completion(gen) for gen in generations]
        return done

    def _completion(self, gen: Any) -> Completion:
        text, spans = completion_text(self.engine.tokenizer, gen.tokens)
        return Completion(gen.id, text, gen.tokens, gen.finish_reason, gen.stats, gen.error, gen.token_probs, spans)
