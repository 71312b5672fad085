"""``model.adapter`` on the vLLM engine: the adapter served as a LoRA request decodes as the fucina engine decodes with
the adapter merged into the weights.

vLLM decodes in a process of its own (``test_vllm_gemma.py`` says why a second ``LLM`` in one process fails).
"""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from fucina_jobs.config import ModelConfig
from tests.helpers import REPO
from tests.vllm.test_vllm_engine import invoice_prompts

pytestmark = pytest.mark.slow
#: Decodes the first shipped invoice's first 40 tokens on vLLM with the adapter at argv[1]; prints them as JSON.
_DECODE = """
import json, sys
from dataclasses import replace
from fucina_jobs.config import DecodingConfig, ModelConfig, RuntimeConfig
from fucina_jobs.engines.vllm import VLLMEngine
from tests.vllm.test_vllm_engine import invoice_prompts

engine = VLLMEngine(model=ModelConfig(adapter=sys.argv[1]), decoding=DecodingConfig(), runtime=RuntimeConfig(streams=1))
c = next(engine.generate([replace(invoice_prompts(engine, 1)[0], max_tokens=40)]))
print(json.dumps({"tokens": c.tokens, "token_probs": c.token_probs, "error": c.error}))
"""


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A LoRA adapter of the default model with random weights (both of its matrices), saved as ``learn`` saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from fucina_jobs.engines import resolve_source
    from fucina_jobs.models import adapters

    path = resolve_source(ModelConfig().source)
    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False)
    folder = tmp_path_factory.mktemp("adapter")
    adapters.save(get_peft_model(AutoModelForCausalLM.from_pretrained(path), config), folder, path, {})
    return folder


def test_vllm_serves_the_adapter_as_the_fucina_engine_merges_it(adapter):
    from fucina_jobs.engines import FucinaEngine

    done = subprocess.run([sys.executable, "-c", _DECODE, str(adapter)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs["error"] is None
    ours, base = (
        next(engine.generate([replace(invoice_prompts(engine, 1)[0], max_tokens=40)]))
        for engine in (FucinaEngine.load(ModelConfig(device="cpu", adapter=str(adapter))), FucinaEngine.load(ModelConfig(device="cpu")))
    )
    alike = next((i for i, (a, b) in enumerate(zip(ours.tokens, theirs["tokens"])) if a != b), min(len(ours.tokens), len(theirs["tokens"])))
    assert alike >= 20
    assert theirs["token_probs"][:alike] == pytest.approx(ours.token_probs[:alike], abs=1e-3)
    # the adapter matters: without it the model writes other tokens, or the same ones with other probabilities
    assert base.tokens != ours.tokens or base.token_probs != pytest.approx(ours.token_probs, abs=1e-2)
