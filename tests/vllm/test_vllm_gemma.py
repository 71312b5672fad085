"""The vLLM engine on the second embedded model, Gemma 3 270M (base: a completion prompt, a 262,144-id
vocabulary, sliding-window layers), checked against the fucina engine on the same prompts."""

import json
from dataclasses import replace

import jsonschema
import pytest

from fucina_jobs.config import DecodingConfig, ModelConfig, RuntimeConfig, SpeculativeConfig
from tests.vllm.test_vllm_engine import INVOICE, invoice_prompts

pytestmark = pytest.mark.slow
GEMMA = "gemma3-270m"


@pytest.fixture(scope="module")
def engine():
    from fucina_jobs.engines.vllm import VLLMEngine

    return VLLMEngine(source=GEMMA, decoding=DecodingConfig(speculative=SpeculativeConfig(max_draft=4)), runtime=RuntimeConfig(streams=2))


def test_invoices_are_valid_on_gemma(engine):
    completions = list(engine.generate(invoice_prompts(engine, 2)))
    assert [c.id for c in completions] == ["inv-001", "inv-002"]
    for c in completions:
        assert c.finish_reason == "stop" and c.error is None
        jsonschema.validate(json.loads(c.text), INVOICE)


def test_gemma_decodes_alike_on_both_engines(engine):
    """Two implementations of Gemma's attention (vLLM's and the runner's, windows and all) over the same token
    ids, BOS included: the same greedy tokens and probabilities. The prompt fills Gemma's 512-key window, so every
    token decoded sees a window that has left the BOS behind."""
    from fucina_jobs.engines import FucinaEngine

    fucina = FucinaEngine.load(ModelConfig(source=GEMMA, device="cpu"))
    ours = next(fucina.generate([replace(invoice_prompts(fucina, 1)[0], max_tokens=40)]))
    theirs = next(engine.generate([replace(invoice_prompts(engine, 1)[0], max_tokens=40)]))
    assert ours.stats.prompt_tokens == theirs.stats.prompt_tokens >= 512
    alike = next((i for i, (a, b) in enumerate(zip(ours.tokens, theirs.tokens)) if a != b), min(len(ours.tokens), len(theirs.tokens)))
    assert alike >= 20
    assert theirs.token_probs[:alike] == pytest.approx(ours.token_probs[:alike], abs=1e-3)
