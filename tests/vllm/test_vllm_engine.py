"""The vLLM engine on the real default model: constraints, per-record schemas, speculation stats."""

import json
from dataclasses import replace

import jsonschema
import pytest

from fucina_jobs.decoding.constraint import GrammarError
from fucina_jobs.engines import Prompt, sampling_params
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.config import SHIPPED, DecodingConfig, ModelConfig, RuntimeConfig, SpeculativeConfig
from fucina_jobs.pipeline.voting import sample_prompts


pytestmark = pytest.mark.slow
INVOICE = json.loads((SHIPPED / "schemas/invoice.json").read_text())


@pytest.fixture(scope="module")
def engine():
    from fucina_jobs.engines.vllm import VLLMEngine

    return VLLMEngine(decoding=DecodingConfig(speculative=SpeculativeConfig(max_draft=4)), runtime=RuntimeConfig(streams=4))


def invoice_prompts(engine, n):
    """The shipped job's first ``n`` prompts, each with its document's grounded grammar."""
    system = (SHIPPED / "jobs/invoices/system.txt").read_text()
    template = (SHIPPED / "jobs/invoices/template.txt").read_text()
    rows = [json.loads(line) for line in (SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines()[:n]]
    return [Prompt(r["id"], template.format_map(r), system, engine.constraint(lark=grounded_lark(INVOICE, r["text"])), max_tokens=200) for r in rows]


def test_each_prompt_samples_with_its_own_settings_and_seed(engine):
    """Voting's samples: the first as the engine is set (greedy), the others hot. vLLM's seeded draws under its
    n-gram speculation are not reproducible call to call (docs/VOTING.md), so only the greedy sample is compared.

    Batched with the hot samples in one vLLM call, the greedy sample diverged from its decode alone and ended on
    a token its grammar refused in 4 of 5 tries (vLLM 0.32, n-gram speculation); the engine now sends the two
    kinds in separate calls."""
    prompt = invoice_prompts(engine, 1)[0]
    hot = replace(sampling_params(engine.decoding), temperature=1.0)
    alone = next(engine.generate([prompt]))
    for _ in range(3):
        samples = list(engine.generate(sample_prompts(prompt, 4, hot)))
        assert [c.id for c in samples] == [p.id for p in sample_prompts(prompt, 4, hot)]
        assert all(c.finish_reason == "stop" and c.error is None for c in samples)
        assert samples[0].tokens == alone.tokens
    # The grounded grammar leaves a peaked model little to vary (9 hot samples all equal the greedy one, at times):
    # the schema alone, whose strings may be any text, shows that the hot samples are sampled.
    free = replace(prompt, constraint=engine.constraint(json_schema=INVOICE), max_tokens=64)  # a difference shows early
    free_alone = next(engine.generate([free]))
    varied = list(engine.generate(sample_prompts(free, 4, hot)))
    assert varied[0].tokens == free_alone.tokens and any(c.tokens != free_alone.tokens for c in varied[1:])


def test_invoices_are_valid_and_ngram_acceptance_is_reported(engine):
    completions = list(engine.generate(invoice_prompts(engine, 4)))
    assert [c.id for c in completions] == ["inv-001", "inv-002", "inv-003", "inv-004"]
    for c in completions:
        assert c.finish_reason == "stop" and c.error is None
        jsonschema.validate(json.loads(c.text), INVOICE)
        assert c.tokens and c.stats.committed == len(c.tokens) + 1  # the stop token is sampled, not returned
        assert c.stats.drafted["ngram"] > 0 and 0 < c.stats.accepted["ngram"] <= c.stats.drafted["ngram"]
        assert c.stats.forwards == c.stats.committed - c.stats.accepted["ngram"]
        # Sampled-token probabilities arrive with structured outputs and speculation; they are
        # taken after the grammar's mask, as ours are: grammar-forced tokens score exactly 1.
        assert len(c.token_probs) == len(c.tokens) == len(c.token_spans) and all(0.0 < p <= 1.0 for p in c.token_probs)
        assert sum(p == 1.0 for p in c.token_probs) >= 10 and c.token_spans[-1][1] == len(c.text)
    # n-gram speculation pays: 1.46 tokens a forward on the invoice schema with labels (this asked for 1.5 before them).
    assert sum(c.stats.committed for c in completions) / sum(c.stats.forwards for c in completions) > 1.3


def test_token_probabilities_match_the_fucina_engine(engine):
    """vLLM's sampled-token logprobs are our Sampler's distribution: after the grammar's mask, at temperature 1.

    The two engines' fp32 kernels differ, so the check runs over the tokens both chose alike
    (measured: all of them, inv-001 and inv-002 in full, probabilities within 5e-6). One
    invoice's first 48 tokens keep it short: the fucina engine shares the CPU with vLLM here."""
    from fucina_jobs.engines import FucinaEngine

    fucina = FucinaEngine.load(ModelConfig(device="cpu"))
    ours = next(fucina.generate([replace(invoice_prompts(fucina, 1)[0], max_tokens=48)]))
    theirs = next(engine.generate([replace(invoice_prompts(engine, 1)[0], max_tokens=48)]))
    alike = next((i for i, (a, b) in enumerate(zip(ours.tokens, theirs.tokens)) if a != b), min(len(ours.tokens), len(theirs.tokens)))
    assert alike >= 20
    assert theirs.token_probs[:alike] == pytest.approx(ours.token_probs[:alike], abs=1e-4)
    assert sum(p == 1.0 for p in ours.token_probs[:alike]) == sum(p > 1 - 1e-6 for p in theirs.token_probs[:alike]) > 0


def test_each_record_is_held_to_its_own_schema_in_one_batch(engine):
    digits = {
        "type": "object",
        "properties": {"code": {"type": "integer", "minimum": 100, "maximum": 999}},
        "required": ["code"],
        "additionalProperties": False,
    }
    answer = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"], "additionalProperties": False}
    prompts = [
        Prompt(f"{name}-{i}", "Reply in JSON.", None, engine.constraint(json_schema=schema), seed=i, max_tokens=40)
        for i in range(3)
        for name, schema in (("digits", digits), ("answer", answer))
    ]
    for c in engine.generate(prompts):
        value = json.loads(c.text)
        assert c.finish_reason == "stop"
        assert set(value) == ({"code"} if c.id.startswith("digits") else {"answer"})
        jsonschema.validate(value, digits if c.id.startswith("digits") else answer)


def test_regex_and_lark_constraints(engine):
    prompts = [
        Prompt("regex", "Give a number.", None, engine.constraint(regex=r"[1-9][0-9]{2}"), max_tokens=8),
        Prompt("lark", "Yes or no?", None, engine.constraint(lark='start: "yes" | "no"'), max_tokens=8),
    ]
    texts = {c.id: c.text for c in engine.generate(prompts)}
    assert len(texts["regex"]) == 3 and texts["regex"].isdigit() and texts["lark"] in {"yes", "no"}


def test_bad_grammar_and_whitespace_mismatch_fail_before_decoding(engine):
    with pytest.raises(GrammarError, match="nonsense"):
        engine.constraint(json_schema={"type": "nonsense"})
    with pytest.raises(GrammarError, match="<inline>"):
        engine.constraint(lark="start: (")
    with pytest.raises(ValueError, match="whole engine"):
        engine.constraint(json_schema=INVOICE, whitespace_flexible=True)


def test_relaxed_schemas_decode_through_vllm(engine):
    """A relaxed schema reaches vLLM as a schema: oneOf through llguidance's x-guidance option, 'not' dropped."""
    from fucina_jobs.decoding.relaxation import compile_json_schema

    overlapping = compile_json_schema(
        {
            "type": "object",
            "properties": {"n": {"oneOf": [{"type": "integer", "maximum": 10}, {"type": "integer", "minimum": 5}]}},
            "required": ["n"],
            "additionalProperties": False,
        }
    )
    negated = compile_json_schema({"enum": ["y"], "not": {"const": "x"}})
    assert [str(r) for r in overlapping.relaxations] == ["oneOf"] and [str(r) for r in negated.relaxations] == ["not"]
    prompts = [
        Prompt("oneOf", "Reply in JSON with a small number n.", None, engine.constraint(json_schema=overlapping.schema), max_tokens=20),
        Prompt("not", "Say y.", None, engine.constraint(json_schema=negated.schema), max_tokens=8),
    ]
    texts = {c.id: c.text for c in engine.generate(prompts) if c.finish_reason == "stop"}
    assert isinstance(json.loads(texts["oneOf"])["n"], int) and texts["not"] == '"y"'


def test_worked_examples_are_the_same_chat_turns_on_vllm_and_grounding_keeps_their_values_out(engine):
    """inv-002 and its gold answer as a worked example for inv-001: the prompt holds the turns, the record holds none of its values."""
    from fucina_jobs.engines import encode_chat
    from fucina_jobs.pipeline.examples import compact_json

    gold = {g["id"]: g["label"] for g in map(json.loads, (SHIPPED / "jobs/invoices/gold.jsonl").read_text().splitlines())}
    second = json.loads((SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines()[1])
    template = (SHIPPED / "jobs/invoices/template.txt").read_text()
    examples = ((template.format_map(second), compact_json(gold["inv-002"], INVOICE)),)
    prompt = replace(invoice_prompts(engine, 1)[0], examples=examples)
    [completion] = engine.generate([prompt])
    assert completion.stats.prompt_tokens == len(encode_chat(engine.tokenizer, prompt.text, prompt.system, examples))
    record = json.loads(completion.text)
    jsonschema.validate(record, INVOICE)
    copied = {k for k, v in record.items() if v == gold["inv-002"][k] and v != gold["inv-001"][k]}
    assert not copied & {"invoice_number", "vendor", "customer", "invoice_date", "total"}
