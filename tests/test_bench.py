"""``python -m fucina_jobs bench``: the benchmark command on a tiny random-weight model.

The tiny model shares the default model's tokenizer (so the shipped job, its
chat template and the invoice schema work unchanged) but has one layer of
width 16: a whole decode run takes seconds. float64 keeps the plain and the
speculative verify forwards numerically close enough that greedy outputs
must agree byte for byte.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from fucina_jobs.bench.arms import alternate
from fucina_jobs.bench.cli import main
from fucina_jobs.bench.inputs import Doc, cycle_docs
from fucina_jobs.bench.tables import format_table

from .helpers import manifest

ROW_KEYS = {
    "arm",
    "label",
    "constrained",
    "speculative",
    "grammar_drafting",
    "docs",
    "forwards",
    "tokens",
    "tokens_per_forward",
    "acceptance",
    "wall_s",
    "wall_s_repeats",
    "wall_ratio",
    "ms_per_token",
    "identical_to_plain_constrained",
    "stable_across_repeats",
    "finish_reasons",
    "time_split_s",
    "processor_us_per_token",
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fucina_jobs.models.loading import ModelNotFound, load_tokenizer

    try:
        tokenizer = load_tokenizer()
    except ModelNotFound as err:
        pytest.skip(f"the default model's tokenizer is not available: {err}")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _run(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_decode_json_four_arms_constrained_rows_identical(tiny_model, capsys):
    argv = ["decode", "--json", "-q", "--model", str(tiny_model), "--dtype", "float64", "--device", "cpu"]
    result = _run(capsys, argv + ["--docs", "2", "--max-tokens", "24", "--repeats", "2"])

    rows = result["rows"]
    assert [r["arm"] for r in rows] == ["plain_unconstrained", "plain_constrained", "spec_no_grammar_drafting", "spec_grammar_drafting"]
    for row in rows:
        assert ROW_KEYS <= row.keys()
        assert row["docs"] == 2
        assert row["forwards"] > 0 and 0 < row["tokens"] <= 2 * 24
        assert len(row["wall_s_repeats"]) == 2
        assert row["stable_across_repeats"]
    unconstrained, plain, no_gd, gd = rows
    assert unconstrained["identical_to_plain_constrained"] is None
    assert plain["identical_to_plain_constrained"] is True
    assert no_gd["identical_to_plain_constrained"] is True
    assert gd["identical_to_plain_constrained"] is True
    assert plain["wall_ratio"] == pytest.approx(1.0)
    # Same tokens on every constrained path; only the forward count may differ.
    assert plain["tokens"] == no_gd["tokens"] == gd["tokens"]
    # Without speculation a forward commits one token; with it, fewer forwards carry the same tokens.
    assert plain["forwards"] == plain["tokens"] and unconstrained["forwards"] == unconstrained["tokens"]
    assert gd["forwards"] < no_gd["forwards"] < plain["forwards"]
    profile = result["forward_profile"]  # one step at 500 and 2,000 tokens of context, split, on the path that ran
    assert profile["attention_path"] == "sdpa per sequence, head_dim 8"  # a head dim the CPU kernel is not built for
    assert [r["context"] for r in profile["rows"]] == [500, 2000]
    kv = profile["kv_a_slot"]  # keys and values, 1 layer, 1 kv head, 8 dims, float64; no sliding layer, so no ring
    assert kv["context"] == 8192 and kv["mib"] == kv["mib_without_rings"] == 2 * 1 * 1 * 8 * 8 * 8192 / 2**20
    for r in profile["rows"]:
        assert 0 < r["attention_ms"] < r["ms_per_forward"] and 0 < r["output_layer_ms"] < r["ms_per_forward"]
        # The parts are timed apart: on a busy machine they may add up to more than the step, never to a negative rest.
        assert r["rest_ms"] == pytest.approx(max(0.0, r["ms_per_forward"] - r["attention_ms"] - r["output_layer_ms"]))
    assert unconstrained["processor_us_per_token"]["calls"] == 0
    assert plain["processor_us_per_token"]["calls"] >= plain["tokens"]
    # Grammar drafting must report the forced source; the JSON skeleton has forced spans.
    assert gd["acceptance"]["forced"]["drafted"] > 0
    assert gd["acceptance"]["forced"]["accepted"] == gd["acceptance"]["forced"]["drafted"]
    assert "forced" not in no_gd["acceptance"]
    overhead = result["mask_overhead"]
    assert overhead["processor_calls"] > 0 and overhead["plain_constrained_overhead_pct"] > 0
    assert result["settings"]["docs"] == 2 and result["environment"]["dtype"] == "float64"
    grounded = result["grounded_compile"]  # the invoice schema grounds its fields: each row compiles its own grammar
    assert grounded["rows"] == 2 and 0 < grounded["ms_mean"] <= grounded["ms_max"] and grounded["share_of_plain_constrained_wall"] > 0


def test_decode_text_table(tiny_model, capsys):
    argv = ["decode", "-q", "--model", str(tiny_model), "--dtype", "float64", "--device", "cpu", "--no-warmup"]
    assert main(argv + ["--docs", "1", "--max-tokens", "8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for label in (
        "plain unconstrained",
        "plain constrained",
        "spec, no grammar drafting",
        "spec + grammar drafting",
        "mask overhead",
        "grounded grammar per row",
    ):
        assert label in out


def test_streams_json_cycles_documents(tiny_model, capsys):
    argv = ["streams", "--json", "-q", "--model", str(tiny_model), "--dtype", "float64", "--device", "cpu"]
    result = _run(capsys, argv + ["--docs", "1", "--streams", "1,2", "--max-tokens", "8"])

    assert result["settings"]["requests"] == 2  # one document cycled under two ids
    rows = result["rows"]
    assert [(r["streams"], r["speculative"]) for r in rows] == [(1, False), (1, True), (2, False), (2, True)]
    assert rows[0]["ratio_vs_base"] == pytest.approx(1.0)
    for row in rows:
        assert row["requests"] == 2 and row["tokens"] > 0 and row["tokens_per_s"] > 0
        assert row["identical_to_base"] is True
    assert rows[2]["batched_forwards"] < rows[0]["batched_forwards"]  # two streams share each forward


def test_cycle_docs_distinct_ids():
    docs = [Doc("a", "x"), Doc("b", "y")]
    cycled = cycle_docs(docs, 5)
    assert [d.id for d in cycled] == ["a", "b", "a#1", "b#1", "a#2"]
    assert [d.user for d in cycled] == ["x", "y", "x", "y", "x"]
    assert cycle_docs(docs, 1) == docs


def test_alternate_runs_every_arm_once_per_round_in_rotated_order():
    order = list(alternate(["a", "b", "c"], 4))
    assert order == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"), (2, "c"), (2, "a"), (2, "b"), (3, "a"), (3, "b"), (3, "c")]


def test_format_table_aligns():
    text = format_table(["arm", "n"], [["long name", 1], ["x", 100]])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[2].startswith("long name") and lines[3].endswith("100")


def test_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["decode", "--help"])
    assert exit_.value.code == 0
    assert "--max-tokens" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["streams", "--streams", "0,2"])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: tests/vllm runs bench engines with every arm")
def test_engines_without_vllm_runs_the_local_arms_against_fucina_plain(tiny_model, capsys):
    argv = ["engines", "--json", "-q", "--model", str(tiny_model), "--dtype", "float64", "--device", "cpu"]
    result = _run(capsys, argv + ["--docs", "2", "--streams", "2", "--max-tokens", "12", "--repeats", "2"])

    rows = {r["arm"]: r for r in result["rows"]}
    assert list(rows) == ["fucina_plain", "fucina_spec", "fucina_spec_streams", "transformers_llguidance"]
    assert result["settings"]["reference"] == "fucina_plain" and rows["fucina_plain"]["ratio_vs_reference"] == pytest.approx(1.0)
    for row in rows.values():
        assert row["requests"] == 2 and row["tokens"] > 0 and len(row["wall_s_repeats"]) == 2
        # Greedy under the same grammar masks: every engine writes the same text at float64.
        assert row["same_text_as_reference"] == 1.0
    assert rows["fucina_spec"]["tokens_per_forward"] > 1 and rows["transformers_llguidance"]["tokens_per_forward"] is None


@pytest.mark.slow
def test_job_runs_each_arm_as_a_whole_job_alternated_on_one_ray(tiny_model, tmp_path, capsys):
    job = ["conf=eval_invoices", "dataset.limit=2", f"model.source={tiny_model}", "model.dtype=float64", "model.device=cpu"]
    argv = ["job", *job, "--json", "--rounds", "2", "--keep", str(tmp_path)]
    result = _run(capsys, argv + ["--arm", "full:decoding.max_tokens=200", "--arm", "cut:decoding.max_tokens=4"])

    arms = {a["name"]: a for a in result["arms"]}
    assert list(arms) == ["full", "cut"] and arms["full"]["ratio"] == pytest.approx(1.0)
    assert arms["cut"]["overrides"] == ["decoding.max_tokens=4"]
    for arm in arms.values():
        assert arm["rows"] == 2 and arm["records"] + arm["rejects"] == 2 and len(arm["wall_per_row_s"]) == 2
        assert all(w > 0 for w in arm["wall_per_row_s"]) and arm["same_output_every_round"]  # greedy: every run writes the same
        assert arm["accuracy_mean"] is not None  # eval_invoices names its gold labels
    assert arms["cut"]["records"] == 0  # 4 tokens end no JSON object: the arm's own override reached its runs
    for name in arms:  # --keep: each round a whole run of its own, ended complete
        assert all(manifest(tmp_path / name / f"round-{r}")["status"] == "complete" for r in range(2))
    again = _run(capsys, ["job", *job, "--json", "--rounds", "1", "--keep", str(tmp_path), "--arm", "cut:decoding.max_tokens=4"])
    assert again["arms"][0]["rows"] == 2 and again["arms"][0]["wall_per_row_s"][0] > 0  # a --keep DIR used before: decoded anew, not resumed


def test_job_refuses_bad_arms_before_any_model_loads(capsys):
    assert main(["job", "conf=eval_invoices", "--arm", "a:decoding.max_tokens=0"]) == 2
    assert capsys.readouterr().err.startswith("arm a: ")
    assert main(["job", "conf=eval_invoices", "--arm", "a:output.dir=/tmp/x"]) == 2
    assert "output.* is the benchmark's to set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["job", "conf=eval_invoices", "--arm", "no-colon"])
    with pytest.raises(SystemExit, match="a name of its own"):
        main(["job", "conf=eval_invoices", "--arm", "a:", "--arm", "a:decoding.seed=1"])
