"""Rules, repair and voting through the job pipeline on the float64 tiny model, so that every figure is exact.

Each row carries its own schema (``dataset.schema_field``) with a rule its
first decode breaks: ``a`` may not be the value a run without rules wrote.
Repair then excludes that value and the row's record keeps the rule. A second
rule no decode can keep (``who == 'nobody'``) makes its row give up. Plain
decoding (one stream, no speculation) and speculative batched decoding must
agree on every record, reject, repair count and agreement, with and without voting.
"""

import dataclasses
import json
from collections import Counter

import pytest

from fucina_jobs.engines import FucinaEngine, Prompt
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.models.loading import load_model
from fucina_jobs.config import RuntimeConfig, validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.pipeline.replica import record_seed
from fucina_jobs.pipeline.voting import sample_prompts

from tests.helpers import GREEDY, REPO, assert_exactly_once, read_dir, tiny_model_dir

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
SYSTEM = "Extract the order."
VOTE_TEMPERATURE = 1.5  # hot enough that the tiny model's samples disagree
DOCS = {
    "o1": "Order 7 from Alder Mills to Birch Foods: 12 crates at 30 each, 360 in all, 45 paid.",
    "o2": "Birch Foods ordered 4 pallets (81 each, 324 total) from Cedar Works; 16 delivered, 9 left.",
    "o3": "Cedar Works owes Alder Mills 2 invoices: 150 and 275, due in 14 days; 425 overall.",
}
SCHEMA = {
    "type": "object",
    "properties": {
        "who": {"type": "string", "maxLength": 16, "x-grounded": True},
        "a": {"type": "number", "x-grounded": True},
        "b": {"type": "number", "x-grounded": True},
    },
    "required": ["who", "a", "b"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-float64"))


@pytest.fixture(scope="module")
def unruled(tmp_path_factory, tiny_dir):
    """The rows without rules, decoded once per number of samples: what the rules of the other runs forbid."""
    rows = [{"id": i, "text": t, "schema": SCHEMA} for i, t in DOCS.items()]
    return {samples: run(tmp_path_factory.mktemp(f"unruled{samples}"), tiny_dir, "first", rows, samples=samples) for samples in (1, 3)}


def run(tmp_path, tiny_dir, name, rows, *, samples=1, speculative=True, streams=3):
    inputs = tmp_path / f"{name}.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = {
        "name": "orders",
        "model": {"source": str(tiny_dir), "dtype": "float64", "device": "cpu"},
        "dataset": {"path": str(inputs), "schema_field": "schema"},
        "prompt": {"system": SYSTEM, "template": "{text}"},
        "decoding": {
            "max_tokens": 48,
            "samples": samples,
            "vote_temperature": VOTE_TEMPERATURE,
            "repairs": 2,
            "speculative": {"enabled": speculative},
        },
        "runtime": {"replicas": 1, "streams": streams, "shard_size": 3},
        "output": {"dir": str(tmp_path / name)},
    }
    summary = Job(validate(raw), REPO).run()
    assert_exactly_once(tmp_path / name, {r["id"] for r in rows})
    return summary, {r["row_id"]: r for r in read_dir(tmp_path / name, "records")}, {r["row_id"]: r for r in read_dir(tmp_path / name, "rejects")}


def ruled_rows(first: dict[str, dict]) -> list[dict]:
    """Each row's schema forbids the ``a`` its first run wrote; o3's also wants a ``who`` no text writes."""
    rows = []
    for row_id, text in DOCS.items():
        rules = [{"name": "not_first", "check": f"a != {json.loads(first[row_id]['text'])['a']}"}]
        if row_id == "o3":
            rules.append({"name": "nobody", "check": "who == 'nobody'"})
        rows.append({"id": row_id, "text": text, "schema": {**SCHEMA, "x-rules": rules}})
    return rows


def outcome(records, rejects):
    """Everything a run says of its rows, without the run's own ids and times."""
    keep = ("text", "reason", "error", "rule_failures", "repair_attempts", "field_agreement", "field_confidence_mean", "generated_tokens")
    return {row_id: {k: r.get(k) for k in keep} for row_id, r in {**records, **rejects}.items()}


@pytest.mark.parametrize("samples", [1, 3])
def test_repair_keeps_the_rule_or_gives_up_and_plain_equals_speculative(tmp_path, tiny_dir, unruled, samples):
    _, first, first_rejects = unruled[samples]
    assert set(first) == set(DOCS), first_rejects
    rows = ruled_rows(first)
    summary, records, rejects = run(tmp_path, tiny_dir, "speculative", rows, samples=samples)
    for row_id in ("o1", "o2"):  # repaired: the rule holds, and the record says what it took
        record = records[row_id]
        assert json.loads(record["text"])["a"] != json.loads(first[row_id]["text"])["a"]
        assert record["rule_failures"] == ["not_first"] and record["repair_attempts"] >= 1
    gave_up = rejects["o3"]  # who == 'nobody' cannot hold: every attempt is spent, then the row is rejected
    assert gave_up["reason"] == "rule_violation" and gave_up["repair_attempts"] == 2 and "nobody" in gave_up["rule_failures"]
    assert gave_up["error"].startswith("after 2 repair attempt(s), breaks: nobody: who == 'nobody' (who=")
    assert summary.reasons == {"rule_violation": 1}
    stats = read_dir(tmp_path / "speculative", "stats")
    assert [(s["rule_broken_rows"], s["repaired_rows"]) for s in stats] == [(3, 2)]
    assert stats[0]["repair_attempts"] == sum(r["repair_attempts"] for r in [*records.values(), *rejects.values()])

    _, plain_records, plain_rejects = run(tmp_path, tiny_dir, "plain", rows, samples=samples, speculative=False, streams=1)
    assert outcome(plain_records, plain_rejects) == outcome(records, rejects)


def test_votes_are_each_fields_majority_over_samples_decoded_with_their_own_seeds(tiny_dir, unruled):
    """The job's record against the three samples decoded here by hand, from the seeds ``voting`` documents."""
    _, records, rejects = unruled[3]
    assert not rejects
    engine = FucinaEngine(load_model(str(tiny_dir), "cpu", "float64"), runtime=RuntimeConfig(streams=1))
    hot = dataclasses.replace(GREEDY, temperature=VOTE_TEMPERATURE)
    disagreed = 0
    for row_id, text in DOCS.items():
        prompt = Prompt(row_id, text, SYSTEM, engine.constraint(lark=grounded_lark(SCHEMA, text)), seed=record_seed(0, row_id), max_tokens=48)
        prompts = sample_prompts(prompt, 3, hot)
        decoded = {c.id: json.loads(c.text) for c in engine.generate(prompts)}
        samples = [decoded[p.id] for p in prompts]
        expected = {name: Counter(s[name] for s in samples).most_common(1)[0] for name in SCHEMA["properties"]}
        record = records[row_id]
        assert json.loads(record["text"]) == {name: value for name, (value, _) in expected.items()}
        assert dict(record["field_agreement"]) == {name: n / 3 for name, (_, n) in expected.items()}
        assert record["record_agreement"] == min(n / 3 for _, n in expected.values())
        disagreed += any(n < 3 for _, n in expected.values())
    assert disagreed, "the samples must differ somewhere, or the vote proves nothing"
