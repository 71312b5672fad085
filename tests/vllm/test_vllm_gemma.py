"""The vLLM engine on the second embedded model, Gemma 3 270M (base: a completion prompt, a 262,144-id
vocabulary, sliding-window layers), checked against the fucina engine on the same prompts.

vLLM decodes in a process of its own: a second ``LLM`` in one process (this module's, after
``test_vllm_engine``'s) fails in vLLM 0.32's kernel-override scan of ``sys.modules``, which trips on
llvmlite's function wrappers once its n-gram proposer has imported numba (``AttributeError:
'_lib_fn_wrapper' object has no attribute 'get'``). A replica holds one engine, so jobs never meet it.
"""

import json
import subprocess
import sys
from dataclasses import replace

import jsonschema
import pytest

from fucina_jobs.config import ModelConfig
from tests.helpers import REPO
from tests.vllm.test_vllm_engine import INVOICE, invoice_prompts

pytestmark = pytest.mark.slow
GEMMA = "gemma3-270m"
#: Decodes the first two shipped invoices (whole) and the first one's first 40 tokens on vLLM; prints them as JSON.
_DECODE = f"""
import json
from dataclasses import replace
from fucina_jobs.config import DecodingConfig, RuntimeConfig, SpeculativeConfig
from fucina_jobs.engines.vllm import VLLMEngine
from tests.vllm.test_vllm_engine import invoice_prompts

engine = VLLMEngine(source={GEMMA!r}, decoding=DecodingConfig(speculative=SpeculativeConfig(max_draft=4)), runtime=RuntimeConfig(streams=2))
whole = list(engine.generate(invoice_prompts(engine, 2)))
short = list(engine.generate([replace(invoice_prompts(engine, 1)[0], max_tokens=40)]))
keep = ("id", "finish_reason", "error", "text", "tokens", "token_probs")
print(json.dumps([[{{k: getattr(c, k) for k in keep}} | {{"prompt_tokens": c.stats.prompt_tokens}} for c in run] for run in (whole, short)]))
"""


@pytest.fixture(scope="module")
def vllm_runs():
    done = subprocess.run([sys.executable, "-c", _DECODE], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    whole, short = json.loads(done.stdout.strip().splitlines()[-1])
    return whole, short[0]


def test_invoices_are_valid_on_gemma(vllm_runs):
    whole, _ = vllm_runs
    assert [c["id"] for c in whole] == ["inv-001", "inv-002"]
    for c in whole:
        assert c["finish_reason"] == "stop" and c["error"] is None
        jsonschema.validate(json.loads(c["text"]), INVOICE)


def test_gemma_decodes_alike_on_both_engines(vllm_runs):
    """Two implementations of Gemma's attention (vLLM's and the runner's, windows and all) over the same token
    ids, BOS included: the same greedy tokens and probabilities. The prompt fills Gemma's 512-key window, so every
    token decoded sees a window that has left the BOS behind."""
    from fucina_jobs.engines import FucinaEngine

    _, theirs = vllm_runs
    fucina = FucinaEngine.load(ModelConfig(source=GEMMA, device="cpu"))
    ours = next(fucina.generate([replace(invoice_prompts(fucina, 1)[0], max_tokens=40)]))
    assert ours.stats.prompt_tokens == theirs["prompt_tokens"] >= 512
    alike = next((i for i, (a, b) in enumerate(zip(ours.tokens, theirs["tokens"])) if a != b), min(len(ours.tokens), len(theirs["tokens"])))
    assert alike >= 20
    assert theirs["token_probs"][:alike] == pytest.approx(ours.token_probs[:alike], abs=1e-3)
