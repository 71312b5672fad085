"""Our engine: the constrained speculative decoder over a transformers model, and the prompt encoding every engine shares.

``encode_chat``, ``stop_tokens`` and ``compile_constraint`` are the tokenizer's
side of a job: the vLLM engine feeds the same token ids and checks grammars
the same way, so both engines see identical inputs.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..confidence import token_spans
from ..decoding.batch import BatchDecoder, Request, SpecConfig, StreamStats
from ..decoding.constraint import Constraint
from ..decoding.drafting import document_spans
from ..decoding.processor import LogitProcessor
from ..decoding.sampler import SamplingParams
from ..models import families
from ..models.hf_runner import HFRunner
from ..models.loading import LoadedModel, load_model
from ..config import DecodingConfig, FucinaEngineConfig, ModelConfig, RuntimeConfig, SpeculativeConfig, one_constraint
from .base import Completion, Prompt, drain


def constraint_kind(json_schema: Any = None, lark: Any = None, regex: Any = None) -> tuple[str, Any]:
    """The one constraint given, as (kind, source)."""
    given = {"json_schema": json_schema, "lark": lark, "regex": regex}
    kind = one_constraint(**given)
    if kind is None:
        raise ValueError("give one of json_schema, lark or regex")
    return kind, given[kind]


def sampling_params(d: DecodingConfig) -> SamplingParams:
    """The decoder's sampling from a job's ``decoding`` section, key by key."""
    return SamplingParams(temperature=d.temperature, top_k=d.top_k, top_p=d.top_p, min_p=d.min_p, repeat_penalty=d.repeat_penalty)


def speculation(s: SpeculativeConfig) -> SpecConfig | None:
    """The decoder's speculation from a job's ``decoding.speculative``; None (plain decoding) where it is off."""
    if not s.enabled:
        return None
    return SpecConfig(max_draft=s.max_draft, grammar_drafting=s.grammar_drafting, max_ngram=s.max_ngram, min_ngram=s.min_ngram)


_SYSTEM, _USER = "\x00fucina-system\x00", "\x00fucina-user\x00"
#: A completion prompt's cue before each answer, for a model without a chat template (a base model).
_ANSWER = "\nAnswer:\n"


def encode_chat(tokenizer: Any, user: str, system: str | None = None, examples: Sequence[tuple[str, str]] = ()) -> list[int]:
    """The prompt's token ids: the model's chat template, or a completion prompt where it has none.

    Message text is encoded with special tokens split, so only the template's
    own markers become control tokens, and a document that contains
    ``<|im_end|>`` cannot end the turn. ``examples`` are (user, assistant)
    turns between the system message and ``user``. A base model gets the
    instructions, then each example's document and answer, then the document
    and the answer's cue (``_ANSWER``). Both start with the tokens the tokenizer
    puts before any text (its BOS) unless the template wrote them already.
    """
    turns = [(role, f"\x00fucina-{i}-{role}\x00", content) for i, pair in enumerate(examples) for role, content in zip(("user", "assistant"), pair)]
    contents = {_SYSTEM: system, _USER: user} | {marker: content for _, marker, content in turns}
    if tokenizer.chat_template:
        messages = ([{"role": "system", "content": _SYSTEM}] if system else []) + [{"role": role, "content": marker} for role, marker, _ in turns]
        rendered = tokenizer.apply_chat_template(messages + [{"role": "user", "content": _USER}], add_generation_prompt=True, tokenize=False)
    else:
        shots = "".join(marker + (_ANSWER if role == "user" else "\n\n") for role, marker, _ in turns)
        rendered = (f"{_SYSTEM}\n\n" if system else "") + shots + _USER + _ANSWER
    ids: list[int] = []
    for piece in re.split("(" + "|".join(map(re.escape, contents)) + ")", rendered):
        if piece in contents:
            ids += tokenizer(contents[piece], add_special_tokens=False, split_special_tokens=True).input_ids
        elif piece:
            ids += tokenizer(piece, add_special_tokens=False).input_ids
    lead = leading_specials(tokenizer)
    return ids if ids[: len(lead)] == lead else lead + ids


def leading_specials(tokenizer: Any) -> list[int]:
    """The ids the tokenizer puts before any text (a BOS), as ``tokenizer(text)`` would; none for most chat models."""
    plain = tokenizer("a", add_special_tokens=False).input_ids
    full = tokenizer("a").input_ids
    start = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    return full[:start]


def context_overflow(prompt_tokens: int, max_tokens: int, context: int | None) -> str | None:
    """Why a prompt cannot fit the model's context, or None.

    Checked before decoding: a prompt past the context decodes for minutes into
    garbage and holds up every row of its shard.
    """
    if context is None or prompt_tokens + max_tokens <= context:
        return None
    return (
        f"the prompt is {prompt_tokens} tokens: with max_tokens={max_tokens} it exceeds the model's context of "
        f"{context} tokens; shorten the document or lower decoding.max_tokens"
    )


def prompt_overflow(engine: Any, p: Prompt) -> str | None:
    """``context_overflow`` for ``p`` on ``engine``, from its token count alone, before any grammar is built for it.

    An engine without a context and a tokenizer (the canned one) fits any prompt."""
    context = getattr(engine, "context", None)
    if context is None:
        return None
    return context_overflow(len(encode_chat(engine.tokenizer, p.text, p.system, p.examples)), p.max_tokens, context)


def completion_text(tokenizer: Any, tokens: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The completion's text, and each token's character span in it (per-value confidence needs both)."""
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    return decode(tokens), token_spans(tokens, decode)


def stop_tokens(tokenizer: Any, model_path: str | None = None) -> set[int]:
    """The ids that end a row: the tokenizer's EOS, the generation config's (``model_path``'s), and the chat
    template's end of turn, where each is given."""
    stops = {tokenizer.eos_token_id, end_of_turn(tokenizer)}
    if model_path is not None:
        from transformers import GenerationConfig

        try:  # from the folder or the hub's cache: the model was loaded from there, so no request can add to it
            eos = GenerationConfig.from_pretrained(model_path, local_files_only=True).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        stops |= set(eos) if isinstance(eos, list) else {eos}
    return {t for t in stops if t is not None}


def end_of_turn(tokenizer: Any) -> int | None:
    """The control token the chat template writes after an assistant's answer (``<|im_end|>``, ``<end_of_turn>``,
    ``<|eot_id|>``...), read off a rendered turn rather than guessed from its spelling; None without a template."""
    if not tokenizer.chat_template:
        return None
    answer = "\x00fucina-answer\x00"
    turns = [{"role": "user", "content": "?"}, {"role": "assistant", "content": answer}]
    after = tokenizer.apply_chat_template(turns, tokenize=False).split(answer, 1)[-1]
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return next((i for i in tokenizer(after, add_special_tokens=False).input_ids if i in special), None)


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
    """Our constrained speculative decoder over a transformers model, set up by a job's config sections (their defaults
    where none is given): ``decoding`` (sampling, speculation, max_tokens), ``runtime`` (streams) and ``engine``."""

    def __init__(
        self,
        loaded: LoadedModel,
        decoding: DecodingConfig = DecodingConfig(),
        runtime: RuntimeConfig = RuntimeConfig(),
        options: FucinaEngineConfig = FucinaEngineConfig(),
    ):
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.runner = HFRunner(loaded.model, loaded.device, compile=options.compile)
        self.stops = stop_tokens(self.tokenizer, loaded.path)
        self.decoding, self.streams = decoding, runtime.streams
        self.params, self.spec = sampling_params(decoding), speculation(decoding.speculative)
        self.context = getattr(loaded.model.config, "max_position_embeddings", None)

    @staticmethod
    def check_model(model_path: str, source: str) -> None:
        """Refuse, from its config alone, a model the runner would not decode as transformers does (``models.families``)."""
        from transformers import AutoConfig

        families.check(AutoConfig.from_pretrained(model_path), source)

    @classmethod
    def load(cls, model: ModelConfig = ModelConfig(), **sections: Any) -> "FucinaEngine":
        """Load ``model`` (the embedded default model unless told otherwise); ``sections`` as ``__init__`` takes them."""
        return cls(load_model(model.source, model.device, model.dtype, model.adapter), **sections)

    @classmethod
    def from_job(cls, cfg: Any, model_path: str) -> "FucinaEngine":
        """The engine a job's config (a ``JobConfig``) asks for, over the model at ``model_path``."""
        return cls(load_model(model_path, cfg.model.device, cfg.model.dtype, cfg.model.adapter), cfg.decoding, cfg.runtime, cfg.engine)

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Constraint:
        """Compile one constraint for this model's vocab and stop token (compact JSON by default)."""
        return compile_constraint(
            self.tokenizer,
            vocab_size=self.runner.vocab_size,
            json_schema=json_schema,
            lark=lark,
            regex=regex,
            whitespace_flexible=whitespace_flexible,
        )

    def processor(self, p: Prompt) -> LogitProcessor | None:
        """The prompt's own processor: a clone of its constraint (a stream's grammar state is its own)."""
        return None if p.constraint is None else p.constraint.clone()

    def session(self, on_step: Callable[[], Any] | None = None) -> "FucinaSession":
        return FucinaSession(self, BatchDecoder(self.runner, self.stops, self.params, self.spec, streams=self.streams, on_step=on_step))

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        """Completions in the order they finish; a prompt that cannot fit the context comes back at once as an error."""
        return drain(self.session(on_step), prompts)

    def document(self, text: str) -> list[list[int]]:
        """The user message as the drafts copy from it (``drafting.document_spans``), encoded as ``encode_chat`` encodes it."""
        return document_spans(text, lambda texts: self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True).input_ids)

    def complete(self, text: str, constraint: Constraint | None = None, system: str | None = None, max_tokens: int | None = None) -> Completion:
        """One prompt, one completion: the simplest way in (``max_tokens`` None: ``decoding.max_tokens``)."""
        return next(self.generate([Prompt("0", text, system, constraint, max_tokens=max_tokens)]))


class FucinaSession:
    """The fucina decoder as a session: prompts are encoded and checked against the context as they are added."""

    def __init__(self, engine: FucinaEngine, decoder: BatchDecoder):
        self.engine, self.decoder = engine, decoder
        self.refused: list[Completion] = []
        self.width: int | None = 0

    def add(self, p: Prompt, first: bool = False) -> None:
        ids = encode_chat(self.engine.tokenizer, p.text, p.system, p.examples)
        max_tokens = self.engine.decoding.max_tokens if p.max_tokens is None else p.max_tokens
        problem = context_overflow(len(ids), max_tokens, self.engine.context)
        if problem:
            self.refused.append(Completion(p.id, "", [], "error", stats=StreamStats(prompt_tokens=len(ids)), error=problem))
            return
        document = self.engine.document(p.text) if self.engine.spec else ()
        self.decoder.add(Request(p.id, ids, self.engine.processor(p), p.seed, max_tokens=max_tokens, params=p.params, document=document), first)

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
        return Completion(
            gen.id, text, gen.tokens, gen.finish_reason, stats=gen.stats, error=gen.error, token_probs=gen.token_probs, token_spans=spans
        )
