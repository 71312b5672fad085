"""The real default model (SmolLM2-135M-Instruct) on the shipped invoice job."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from tests.helpers import STOP
from fucina_jobs.engines import FucinaEngine, Prompt
from fucina_jobs.engines.fucina import encode_chat
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.config import SHIPPED, DecodingConfig, RuntimeConfig, SpeculativeConfig

pytestmark = pytest.mark.slow

JOB = SHIPPED / "jobs" / "invoices"
MAX_TOKENS = 160


@pytest.fixture(scope="module")
def invoices():
    rows = [json.loads(line) for line in (JOB / "inputs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["id"]: row["text"] for row in rows}


@pytest.fixture(scope="module")
def system():
    return (JOB / "system.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def user(invoices):
    template = (JOB / "template.txt").read_text(encoding="utf-8")
    return lambda rid: template.format(text=invoices[rid])


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((SHIPPED / "schemas" / "invoice.json").read_text(encoding="utf-8"))
    return Draft202012Validator(schema, format_checker=FormatChecker())


@pytest.fixture(scope="module")
def invoice_constraint(real_engine, invoices):
    """The job's constraint for one document: the schema's grounded grammar over that document's text."""
    schema = json.loads((SHIPPED / "schemas" / "invoice.json").read_text(encoding="utf-8"))
    return lambda rid: real_engine.constraint(lark=grounded_lark(schema, invoices[rid]))


@pytest.fixture(scope="module")
def completions(real_engine, invoice_constraint, system, user):
    """inv-001 and inv-002, plain and speculative, greedy (the engine's defaults)."""
    out = {}
    for name in ("plain", "spec"):
        decoding = DecodingConfig(speculative=SpeculativeConfig(enabled=name == "spec"))
        engine = FucinaEngine(real_engine.loaded, decoding, RuntimeConfig(streams=1))
        prompts = [Prompt(rid, user(rid), system, invoice_constraint(rid), max_tokens=MAX_TOKENS) for rid in ("inv-001", "inv-002")]
        out[name] = {c.id: c for c in engine.generate(prompts)}
    return out


def assert_valid(completion, validator):
    assert completion.finish_reason == "stop", completion
    record = json.loads(completion.text)
    errors = [e.message for e in validator.iter_errors(record)]
    assert not errors, errors
    return record


def test_constrained_invoice_validates(completions, validator, invoices):
    for rid, completion in completions["spec"].items():
        record = assert_valid(completion, validator)
        assert record["invoice_number"] in invoices[rid]  # copied from the document
        assert completion.stats.accepted.get("forced", 0) > 0


def test_plain_equals_speculative_on_the_real_model(completions):
    # Expected bitwise on CPU fp32: the 1-token and k-token forwards give logits
    # equal enough that greedy picks agree (measured: identical, 97 tokens in
    # 25 forwards vs 98 for inv-001).
    for rid in ("inv-001", "inv-002"):
        plain, spec = completions["plain"][rid], completions["spec"][rid]
        assert spec.tokens == plain.tokens and spec.text == plain.text
        assert spec.finish_reason == plain.finish_reason == "stop"
        # fp32 k-token and 1-token forwards agree closely, not bitwise: the probabilities to 1e-4.
        assert spec.token_probs == pytest.approx(plain.token_probs, rel=1e-4) and len(spec.token_probs) == len(spec.tokens)
        assert spec.stats.forwards < plain.stats.forwards


def test_control_text_in_a_document_cannot_end_the_turn(real_engine, invoice_constraint, system, user, invoices, validator):
    text = invoices["inv-013"]
    assert "<|im_end|>" in text
    tokenizer = real_engine.tokenizer
    assert STOP in tokenizer(text, add_special_tokens=False).input_ids  # naive encoding would end the turn
    ids = encode_chat(tokenizer, user("inv-013"), system)
    plain_ids = encode_chat(tokenizer, "a plain text", system)
    assert ids.count(STOP) == plain_ids.count(STOP) == 2  # the template's own markers only
    assert ids.count(1) == plain_ids.count(1)
    completion = real_engine.complete(user("inv-013"), invoice_constraint("inv-013"), system=system, max_tokens=MAX_TOKENS)
    record = assert_valid(completion, validator)
    assert record["invoice_number"] in text
