"""Shared fixtures and helpers for the decoding-core tests.

The tests run on 2 shared CPU cores: one torch thread, tiny models, few tokens.
Test modules import the helpers below with ``from .conftest import ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import pytest
import torch

torch.set_num_threads(1)

from fucina_jobs.decoding.batch import BatchDecoder, Generation, Request, SpecConfig  # noqa: E402
from fucina_jobs.decoding.constraint import Constraint  # noqa: E402,F401
from fucina_jobs.decoding.processor import LogitProcessor  # noqa: E402
from fucina_jobs.decoding.sampler import SamplingParams  # noqa: E402
from fucina_jobs.eval.maskbench import instance_accepted, load_suite  # noqa: E402,F401  (test modules import them from here)
from fucina_jobs.eval.maskbench import run_suite as _run_suite  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VOCAB = 49152
STOP = 2  # <|im_end|>: SmolLM2's eos and end-of-turn marker
STOPS = frozenset({STOP})
#: Sharpens the random model's logits (final RMSNorm weight) so that sampling at
#: temperature 0.8 is not uniform noise and n-gram drafts are accepted sometimes.
LOGIT_SCALE = 15.0


# -- fixtures ----------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    """A private 2-CPU Ray with two model slots, for one module's end-to-end jobs."""
    import os

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token: another cluster's may sit in ~/.ray
    ray.init(address="local", num_cpus=2, resources={"replica": 2}, include_dashboard=False,
             object_store_memory=150 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def tokenizer():
    from fucina_jobs.models.loading import load_tokenizer

    return load_tokenizer()


def _tiny_llama(vocab_size: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=STOP,
        pad_token_id=STOP,
    )
    model = LlamaForCausalLM(config).double().eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(LOGIT_SCALE)
    return model


@pytest.fixture(scope="session")
def tiny_model():
    """Random-weight Llama with the real vocab, float64 (robust against fp32 near-ties)."""
    return _tiny_llama(VOCAB)


@pytest.fixture(scope="session")
def tiny_runner(tiny_model):
    from fucina_jobs.models.hf_runner import HFRunner

    return HFRunner(tiny_model)


@pytest.fixture(scope="session")
def padded_runner():
    """The same shape with a padded vocab: logits rows wider than the tokenizer."""
    from fucina_jobs.models.hf_runner import HFRunner

    return HFRunner(_tiny_llama(VOCAB + 8, seed=1))


@pytest.fixture(scope="session")
def real_engine():
    from fucina_jobs.engine import FucinaEngine

    return FucinaEngine.load(device="cpu")


# -- processors ----------------------------------------------------------------


class Recorder(LogitProcessor):
    """Wraps a processor (or none) and logs every call the seam makes."""

    def __init__(self, inner: LogitProcessor | None = None, keep_rows: bool = False):
        self.inner = inner
        self.has_structure = bool(inner is not None and inner.has_structure)
        self.keep_rows = keep_rows
        self.rows: list[torch.Tensor] = []
        self.commits: list[int] = []
        self.resets = 0

    def process(self, logits, history):
        if self.keep_rows:
            self.rows.append(logits.clone())
        return self.inner.process(logits, history) if self.inner is not None else None

    def named_probability(self):
        return self.inner.named_probability() if self.inner is not None else 1.0

    def bind(self, scorer):
        if self.inner is not None:
            self.inner.bind(scorer)

    def commit(self, token):
        self.commits.append(int(token))
        if self.inner is not None:
            self.inner.commit(token)

    def reset(self):
        self.resets += 1
        if self.inner is not None:
            self.inner.reset()

    def error(self):
        return self.inner.error() if self.inner is not None else None

    def forced_tokens(self):
        return self.inner.forced_tokens() if self.inner is not None else []

    def valid_prefix_len(self, tokens):
        return self.inner.valid_prefix_len(tokens) if self.inner is not None else len(tokens)


class StopAfter(LogitProcessor):
    """No structure: after ``n`` commits only ``stop`` is selectable."""

    def __init__(self, n: int, stop: int = STOP):
        self.n, self.stop, self.seen = n, stop, 0

    def process(self, logits, history):
        if self.seen >= self.n:
            keep = logits[self.stop].clone()
            logits.fill_(float("-inf"))
            logits[self.stop] = keep
        else:
            logits[self.stop] = float("-inf")

    def commit(self, token):
        self.seen += 1

    def reset(self):
        self.seen = 0


class RecordingRunner:
    """Delegates to a runner and logs the token feed of every forward."""

    def __init__(self, runner):
        self.runner = runner
        self.vocab_size = runner.vocab_size
        self.feeds: list[list[list[int]]] = []
        self.prefills: list[list[list[int]]] = []
        self.calls = 0

    def new_state(self):
        return self.runner.new_state()

    def forward(self, batch, *, logits=True):
        self.calls += 1
        wanted = [logits] * len(batch) if isinstance(logits, bool) else list(logits)
        for log, want in ((self.feeds, True), (self.prefills, False)):
            fed = [list(tokens) for (_, tokens), w in zip(batch, wanted) if w == want]
            if fed:
                log.append(fed)
        return self.runner.forward(batch, logits=logits)

    def trim(self, state, length):
        self.runner.trim(state, length)

    def fork(self, state, length):
        return self.runner.fork(state, length)

    def tree(self, state, length, tokens, parents):
        return self.runner.tree(state, length, tokens, parents)


# -- decoding helpers ------------------------------------------------------------


def decode(
    runner,
    requests: Iterable[Request],
    *,
    spec: SpecConfig | None = None,
    streams: int = 1,
    params: SamplingParams = SamplingParams(),
    stops: Iterable[int] = STOPS,
) -> dict[str, Generation]:
    """Run a BatchDecoder and index the generations by request id."""
    out = {}
    for gen in BatchDecoder(runner, stops, params, spec, streams=streams).run(requests):
        assert gen.id not in out, f"request {gen.id} yielded twice"
        out[gen.id] = gen
    return out


def repetitive_prompt(tokenizer, k: int = 0) -> list[int]:
    """A prompt the n-gram drafter can copy from (k varies it per request)."""
    words = ["the cat sat on the mat", "red fox jumps over dogs", "one two three four five", "alpha beta gamma delta"]
    text = (words[k % len(words)] + ". ") * 3 + words[k % len(words)].split()[0]
    return tokenizer.encode(text)


def allowed_mask(processor: LogitProcessor, width: int = VOCAB) -> torch.Tensor:
    """Bool ``[width]``: which ids ``processor`` leaves selectable right now (the one it names, when it names one)."""
    row = torch.zeros(width)
    forced = processor.process(row, [])
    if forced is not None:
        return torch.arange(width) == forced
    return torch.isfinite(row)


# -- grammar walks (MaskBench protocol): the walk lives in fucina_jobs.eval.maskbench --------


def run_suite(files: Sequence[Path], tokenizer) -> dict:
    """Compile each schema and judge each instance with SmolLM2's stop token."""
    return _run_suite(files, tokenizer, stop_token=STOP)
