"""The engine interface the job pipeline sees, and its fucina implementation.

The pipeline hands over prompts and constraints and gets completions back; it
never touches the sampler, the drafts or the model runner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from .decoding.batch import BatchDecoder, Request, SpecConfig, StreamStats
from .decoding.constraint import Constraint
from .decoding.sampler import SamplingParams
from .models.hf_runner import HFRunner
from .models.loading import DEFAULT_MODEL, LoadedModel, load_model


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


class Engine(Protocol):
    """What the job pipeline needs from a decoder; ``constraint`` returns an opaque handle for ``Prompt.constraint``."""

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Any: ...

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]: ...


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


def stop_tokens(tokenizer: Any) -> set[int]:
    """EOS plus the chat template's end-of-turn marker, where it has one."""
    stops = {tokenizer.eos_token_id}
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id:
        stops.add(end_of_turn)
    return {t for t in stops if t is not None}


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
        self.stop_token = min(self.stops)
        self.params, self.spec, self.streams = params, spec, streams

    @classmethod
    def load(cls, source: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "float32", **kw: Any) -> "FucinaEngine":
        return cls(load_model(source, device, dtype), **kw)

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Constraint:
        """Compile one constraint for this model's vocab and stop token (compact JSON by default)."""
        kind, source = constraint_kind(json_schema, lark, regex)
        options = {"whitespace_flexible": whitespace_flexible} if kind == "json_schema" else {}
        return getattr(Constraint, kind)(source, self.tokenizer, vocab_size=self.runner.vocab_size, stop_token=self.stop_token, **options)

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        decoder = BatchDecoder(self.runner, self.stops, self.params, self.spec, self.streams, on_step)
        requests = (
            Request(p.id, encode_chat(self.tokenizer, p.text, p.system), p.constraint.clone() if p.constraint else None, p.seed, p.max_tokens)
            for p in prompts
        )
        for gen in decoder.run(requests):
            text = self.tokenizer.decode(gen.tokens, skip_special_tokens=False)
            yield Completion(gen.id, text, gen.tokens, gen.finish_reason, gen.stats, gen.error)

    def complete(self, text: str, constraint: Constraint | None = None, system: str | None = None, max_tokens: int = 256) -> Completion:
        """One prompt, one completion: the simplest way in."""
        return next(self.generate([Prompt("0", text, system, constraint, max_tokens=max_tokens)]))
