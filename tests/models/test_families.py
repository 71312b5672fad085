"""The family matrix: every decoder family the fucina engine accepts decodes as transformers' eager forward does,
past its sliding window, on every attention path; a family or an attention argument it does not know is refused at load.

Each family's tiny random model (``tests/model_families.py``) slides a window of 8 keys on its first layer, so
the 40-odd tokens decoded here are five windows long: a dropped window, soft-cap or scaling changes the logits
by tenths (measured: 0.29 to 1.8), far above the float64 tolerance.
"""

from __future__ import annotations

import pytest
import torch

from tests.decoding.test_equivalence import RECORD, assert_same, make_requests
from tests.helpers import SPEC, STOP, VOCAB, cli, decode
from tests.model_families import FAMILIES, tiny_family
from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.models import families, hf_runner
from fucina_jobs.models.hf_runner import HFRunner

#: The runner's attention paths: the CPU kernel, SDPA per sequence, and the batched grid a GPU takes.
PATHS = {"kernel": None, "per_sequence": False, "grid": True}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_model(request):
    return request.param, tiny_family(request.param, VOCAB)


def eager(model, ids: list[int]) -> torch.Tensor:
    """transformers' own forward over the whole sequence, no cache: the reference."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def sequences(n: int, length: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    return [torch.randint(3, 4000, (length - 7 * k,), generator=g).tolist() for k in range(n)]


def ragged(runner: HFRunner, seqs: list[list[int]]) -> list[torch.Tensor]:
    """The runner's logits for two sequences packed in every forward, fed ragged (a prompt chunk, single tokens,
    a draft-sized run)."""
    states = [runner.new_state() for _ in seqs]
    rows: list[list[torch.Tensor]] = [[], []]
    for a, b in [(6, 3), (1, 1), (4, 9), (1, 5), (12, 1), (1, 1), (20, 20)]:
        feeds = [(st, s[st.length : st.length + n]) for st, s, n in zip(states, seqs, (a, b)) if st.length < len(s)]
        for (st, _), out in zip(feeds, runner.forward(feeds)):
            rows[states.index(st)].append(out)
    return [torch.cat(r) for r in rows]


@pytest.mark.parametrize("path", list(PATHS))
def test_logits_equal_transformers_past_the_window(family_model, path):
    family, model = family_model
    runner = HFRunner(model, batched_attention=PATHS[path])
    assert runner._kernel == (path == "kernel")
    seqs = sequences(2, 44)
    for s, got in zip(seqs, ragged(runner, seqs)):
        want = eager(model, s)
        assert got.shape == want.shape
        assert torch.allclose(got, want, atol=1e-5, rtol=0), f"{family}: max difference {(got - want).abs().max():.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["llama", "gemma2", "gemma3_text"])
def test_fused_layers_match_transformers_past_the_window(family, dtype):
    """The families whose layers the runner fuses (q/k/v and gate/up linears; the norms, RoPE and activation on
    the CPU kernels): float32 within 1e-4 of transformers' float64 eager forward; bfloat16 no further from it
    than transformers' own bfloat16 forward, give or take half (its rounding is the same, not its sums' order)."""
    reference = tiny_family(family, VOCAB)
    model = tiny_family(family, VOCAB, dtype=dtype)
    runner = HFRunner(model)
    assert runner.attention.endswith("fused layer ops"), runner.attention
    seqs = sequences(2, 44)
    for s, got in zip(seqs, ragged(runner, seqs)):
        want = eager(reference, s)
        error = (got - want).abs().max()
        tolerance = 1e-4 if dtype == torch.float32 else 1.5 * (eager(model, s) - want).abs().max()
        assert error <= tolerance, f"{family} in {dtype}: max difference {error:.3g}, allowed {tolerance:.3g}"


def test_gemma3_caps_no_attention_score_though_its_config_names_a_cap():
    """Gemma 3's attention passes transformers' attention function no soft-cap, whatever its config says; the
    runner's fused Gemma 3 attention must not cap either (capped at 0.5, the logits move by tenths)."""
    model = tiny_family("gemma3_text", VOCAB, attn_logit_softcapping=0.5)
    seqs = sequences(2, 44)
    for s, got in zip(seqs, ragged(HFRunner(model), seqs)):
        assert torch.allclose(got, eager(model, s), atol=1e-5, rtol=0), (got - eager(model, s)).abs().max()


def test_greedy_tokens_equal_transformers(family_model):
    """Greedy decoding through the decoder against argmax over transformers' full forward, token by token."""
    family, model = family_model
    prompt = sequences(1, 12)[0]
    got = decode(HFRunner(model), [Request("g", prompt, None, max_tokens=36)], stops=set())["g"].tokens
    want = list(prompt)
    for _ in range(36):
        want.append(int(eager(model, want)[-1].argmax()))
    assert got == want[len(prompt) :], family


def assert_decoded_alike(runner: HFRunner, tokenizer) -> tuple[list[Request], dict]:
    """The central proof on ``runner``: the same tokens, probabilities and commits under a grammar, one stream or
    four, with and without speculation. Returns the requests and their plain outputs."""
    record = Constraint.json_schema(RECORD, tokenizer, stop_token=STOP)
    plain = decode(runner, make_requests(tokenizer, "grammar", record))
    spec = decode(runner, make_requests(tokenizer, "grammar", record), spec=SPEC)
    assert_same(plain, spec)
    assert_same(plain, decode(runner, make_requests(tokenizer, "grammar", record), spec=SPEC, streams=4))
    assert sum(sum(g.stats.accepted.values()) for g in spec.values()) > 0  # speculation happened
    return make_requests(tokenizer, "grammar", record), plain


def test_plain_speculative_and_batched_agree_under_a_grammar(family_model, tokenizer):
    """The central proof on each family; the prompts are several windows long."""
    requests, _ = assert_decoded_alike(HFRunner(family_model[1]), tokenizer)
    assert min(len(r.prompt) for r in requests) > 3 * 8


def test_a_family_outside_the_matrix_is_refused_at_load():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(families.UnsupportedModel, match=r"a 'gpt2' model, .* \(it decodes llama, qwen2, .*granite\); use engine=vllm"):
        HFRunner(model)


def test_a_layer_type_the_runner_does_not_do_is_refused():
    config = tiny_family("qwen2", 64).config
    config.layer_types = ["sliding_attention", "chunked_attention"]
    with pytest.raises(families.UnsupportedModel, match="layers of type chunked_attention, which the fucina engine does not implement"):
        families.check(config, "m")


def test_an_attention_argument_the_runner_does_not_know_is_refused_at_load(monkeypatch):
    """The backstop beyond the family list: gpt-oss's attention sinks reach the attention as ``s_aux``. Let in
    past the family check, the model is refused by the load's probe forward, before any row."""
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_local_experts=2, num_experts_per_tok=1, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    model = GptOssForCausalLM(config).eval()
    monkeypatch.setattr(families, "check", lambda config, source: None)
    with pytest.raises(
        hf_runner.UnsupportedAttention, match="GptOssAttention asks the attention for s_aux, which the fucina engine does not implement"
    ):
        HFRunner(model)


def test_a_job_on_a_model_outside_the_matrix_stops_in_one_line_before_any_row(tmp_path, tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    model_dir, out = tmp_path / "gpt2", tmp_path / "out"
    GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    done = cli("conf=extract_invoices", f"model.source={model_dir}", f"output.dir={out}", timeout=300)
    assert done.returncode != 0
    error = [line for line in done.stderr.splitlines() if "gpt2" in line]
    assert len(error) == 1 and f"model.source='{model_dir}' is a 'gpt2' model" in error[0] and "use engine=vllm" in error[0], done.stderr
    assert not list(out.rglob("*.parquet"))  # nothing decoded, nothing written
