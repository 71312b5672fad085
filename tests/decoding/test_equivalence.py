"""The central proofs on the tiny float64 model.

Plain decoding (one stream, no speculation), speculative decoding and batched
decoding must produce the same tokens and feed the processor the same commit
sequence, greedy and sampled, with and without a constraint.
"""

from __future__ import annotations

from dataclasses import replace
import pytest
import torch

from tests.helpers import GREEDY, SPEC, STOP, LogsTurns, decode, repetitive_prompt, Recorder, RecordingRunner, StopAfter
from fucina_jobs.decoding.batch import Request, SharedBatchProcessor
from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.decoding.processor import TokenBias

SAMPLED = replace(GREEDY, temperature=0.8)
PARAMS = {"greedy": GREEDY, "sampled": SAMPLED}

RECORD = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 6},
        "kind": {"enum": ["alpha", "beta", "gamma"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["id", "kind", "count", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def record(tokenizer):
    return Constraint.json_schema(RECORD, tokenizer, stop_token=STOP)


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def json_prompt(tokenizer, k: int) -> list[int]:
    example = '{"id":"ab%d","kind":"beta","count":%d,"ok":true} ' % (k, 10 + k)
    return encode(tokenizer, "records: " + example * (2 + k % 2))


def bias(tokenizer) -> TokenBias:
    """Bans the words the repetitive prompts repeat (so n-gram drafts get rejected) and favours a few others."""
    banned = {encode(tokenizer, w)[0]: float("-inf") for w in (" cat", " mat", " fox", " two", " beta")}
    favoured = {encode(tokenizer, w)[0]: 2.0 for w in (" dog", " sun", " three")}
    return TokenBias({**banned, **favoured})


def make_requests(tokenizer, kind: str, record=None, n: int = 4, max_tokens: int = 40) -> list[Request]:
    """Fresh requests (fresh processors) of one kind: none, bias or grammar."""
    requests = []
    for k in range(n):
        if kind == "none":
            prompt, processor = repetitive_prompt(tokenizer, k), None
        elif kind == "bias":
            prompt, processor = repetitive_prompt(tokenizer, k), Recorder(bias(tokenizer))
        else:
            prompt, processor = json_prompt(tokenizer, k), Recorder(record.clone())
        requests.append(Request(f"r{k}", prompt, processor, seed=100 + k, max_tokens=max_tokens - 3 * k))
    return requests


def commit_logs(requests) -> dict[str, list[int]]:
    return {r.id: r.processor.commits for r in requests if r.processor is not None}


def assert_same(a, b):
    """Same generations per id: tokens, finish reason, error, and the probability of every token.

    Probabilities come from float32 rows (``Sampler.next``) of float64 logits. They were
    measured bitwise equal; the tolerance only allows a float32 rounding of the cast."""
    assert a.keys() == b.keys()
    for rid in a:
        assert a[rid].tokens == b[rid].tokens, rid
        assert a[rid].finish_reason == b[rid].finish_reason, rid
        assert a[rid].error == b[rid].error, rid
        assert len(a[rid].token_probs) == len(a[rid].tokens), rid
        assert a[rid].token_probs == pytest.approx(b[rid].token_probs, rel=1e-6, abs=1e-9), rid


def assert_commits_match_tokens(gens, logs):
    """The processor saw exactly the committed tokens, plus the stop when one ended the turn."""
    for rid, log in logs.items():
        gen = gens[rid]
        assert log == gen.tokens + ([STOP] if gen.finish_reason == "stop" else []), rid
        assert gen.stats.committed == len(gen.tokens)


def accepted(gens) -> int:
    return sum(sum(g.stats.accepted.values()) for g in gens.values())


# -- the runner premise --------------------------------------------------------------


def test_runner_matches_a_full_forward(tiny_runner, tiny_model, tokenizer):
    """Cached, ragged, batched forwards give the logits of a cache-free full forward."""
    sequences = [repetitive_prompt(tokenizer, k)[: 9 + 3 * k] for k in range(3)]
    with torch.no_grad():
        full = [tiny_model(torch.tensor([s])).logits[0].float() for s in sequences]
    states = [tiny_runner.new_state() for _ in sequences]
    tiny_runner.forward([(states[0], sequences[0][:4]), (states[1], sequences[1][:7])], logits=False)
    rows = tiny_runner.forward([(st, s[st.length : st.length + 3]) for st, s in zip(states, sequences)])
    for st, s, r, f in zip(states, sequences, rows, full):
        assert torch.allclose(r, f[st.length - 3 : st.length], atol=1e-5), "batched step"
    tiny_runner.trim(states[2], 2)  # a rejected draft: drop cached positions
    rows = tiny_runner.forward([(states[2], sequences[2][2:6]), (states[0], sequences[0][7:8])])
    assert torch.allclose(rows[0], full[2][2:6], atol=1e-5)
    assert torch.allclose(rows[1], full[0][7:8], atol=1e-5)
    assert states[2].length == 6 and states[0].length == 8


# -- plain == speculative -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("kind", ["bias", "grammar"])
def test_constrained_plain_equals_speculative(tokenizer, tiny_runner, record, kind, mode):
    plain_requests = make_requests(tokenizer, kind, record)
    spec_requests = make_requests(tokenizer, kind, record)
    plain = decode(tiny_runner, plain_requests, params=PARAMS[mode])
    spec = decode(tiny_runner, spec_requests, params=PARAMS[mode], spec=SPEC)
    assert_same(plain, spec)
    assert commit_logs(plain_requests) == commit_logs(spec_requests)
    assert_commits_match_tokens(spec, commit_logs(spec_requests))
    assert all(r.processor.resets == 1 for r in spec_requests)
    # Speculation really happened: drafts were accepted and forwards saved.
    assert accepted(spec) > 0
    assert sum(g.stats.forwards for g in spec.values()) < sum(g.stats.forwards for g in plain.values())
    if kind == "bias":  # the banned words were drafted from the prompt and rejected
        assert sum(sum(g.stats.drafted.values()) for g in spec.values()) > accepted(spec)


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_token_probabilities_are_the_constrained_distribution(tokenizer, tiny_runner, record, mode):
    """Plain and speculative record the same probabilities (``assert_same``); they lie in (0, 1],
    forced tokens get exactly 1, and sampling knobs do not change them."""
    spec = decode(tiny_runner, make_requests(tokenizer, "grammar", record), params=PARAMS[mode], spec=SPEC)
    probs = [p for g in spec.values() for p in g.token_probs]
    assert all(0.0 < p <= 1.0 for p in probs) and len(probs) == sum(len(g.tokens) for g in spec.values())
    forced = sum(g.stats.accepted.get("forced", 0) for g in spec.values())
    assert forced > 0 and sum(p == 1.0 for p in probs) >= forced
    assert min(probs) < 0.99  # and the free choices are scored, not all 1
    if mode == "greedy":  # the same picks at a sharper temperature: the same probabilities (temperature 1)
        colder = decode(tiny_runner, make_requests(tokenizer, "grammar", record), params=replace(GREEDY, top_k=1, temperature=0.3), spec=SPEC)
        assert_same(spec, colder)


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_unconstrained_plain_equals_speculative(tokenizer, tiny_runner, mode):
    plain = decode(tiny_runner, make_requests(tokenizer, "none"), params=PARAMS[mode])
    spec = decode(tiny_runner, make_requests(tokenizer, "none"), params=PARAMS[mode], spec=SPEC)
    assert_same(plain, spec)
    assert accepted(spec) > 0


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_forced_spans_are_drafted_and_accepted(tokenizer, tiny_runner, record, mode):
    spec = decode(tiny_runner, make_requests(tokenizer, "grammar", record), params=PARAMS[mode], spec=SPEC)
    drafted = sum(g.stats.drafted.get("forced", 0) for g in spec.values())
    forced_accepted = sum(g.stats.accepted.get("forced", 0) for g in spec.values())
    assert drafted > 0
    assert forced_accepted == drafted  # the mask leaves the forced token as the only choice
    without = decode(tiny_runner, make_requests(tokenizer, "grammar", record), params=PARAMS[mode], spec=replace(SPEC, grammar_drafting=False))
    assert_same(spec, without)
    assert sum(g.stats.forwards for g in spec.values()) < sum(g.stats.forwards for g in without.values())


def test_stop_as_bonus_after_a_completed_grammar(tokenizer, tiny_runner):
    text = "The answer is 42"
    logs, gens = [], []
    for spec in (None, SPEC):
        processor = Recorder(Constraint.regex(text, tokenizer, stop_token=STOP))
        gens.append(decode(tiny_runner, [Request("a", encode(tokenizer, "question"), processor, max_tokens=30)], spec=spec)["a"])
        logs.append(processor.commits)
    plain, spec = gens
    assert plain.tokens == spec.tokens and tokenizer.decode(spec.tokens) == text
    assert plain.finish_reason == spec.finish_reason == "stop"
    assert logs[0] == logs[1] == spec.tokens + [STOP]
    # The whole value was one certain draft; the stop arrived as the bonus row of that forward.
    assert spec.stats.forwards == 1 and spec.stats.accepted == {"forced": len(spec.tokens)}
    assert plain.stats.forwards == len(plain.tokens) + 1


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_stop_as_correction_ends_identically(tokenizer, tiny_runner, mode):
    """A processor without structure forbids everything but the stop after n tokens;
    the n-gram drafter keeps drafting, so the stop is sampled in a verify row."""
    in_verify_rows = 0
    for n in (5, 8, 11, 14):
        outs, logs = [], []
        for spec in (None, SPEC):
            runner = RecordingRunner(tiny_runner)
            processor = Recorder(StopAfter(n))
            outs.append(
                decode(runner, [Request("s", repetitive_prompt(tokenizer, n), processor, seed=n, max_tokens=40)], spec=spec, params=PARAMS[mode])["s"]
            )
            logs.append(processor.commits)
        plain, spec = outs
        assert plain.tokens == spec.tokens and len(spec.tokens) == n
        assert plain.finish_reason == spec.finish_reason == "stop"
        assert logs[0] == logs[1] == spec.tokens + [STOP]
        in_verify_rows += len(runner.feeds[-1][0]) > 1  # the final forward carried drafts
    assert in_verify_rows > 0


# -- rows processed ahead == rows processed in turn ------------------------------------


class Logged(LogsTurns, Constraint):
    """A constraint that logs its commits and counts the rows ``process`` processed in turn."""

    @classmethod
    def of(cls, constraint: Constraint) -> "Logged":
        logged = object.__new__(cls)
        logged.__dict__.update(constraint.__dict__)
        return logged.clone()

    def clone(self):
        twin = super().clone()
        twin.commits, twin.in_turn = [], 0
        return twin


@pytest.mark.parametrize("spec", [None, SPEC], ids=["plain", "spec"])
@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("kind", ["bias", "grammar"])
def test_rows_processed_ahead_equal_rows_processed_in_turn(tokenizer, tiny_runner, record, kind, mode, spec):
    """The batch decoder processes each step's rows ahead, one call per processor class
    (``StepAhead``); a ``Recorder`` cannot look ahead, so its rows are processed in turn, as
    ``Sampler.next`` reaches them. Tokens, probabilities, random draws and commits are the same, and the
    rows whose token the grammar named ahead are not computed."""
    in_turn = make_requests(tokenizer, kind, record)
    ahead = make_requests(tokenizer, kind, record)
    for r in ahead:
        r.processor = Logged.of(record) if kind == "grammar" else r.processor.inner
    turn_runner, ahead_runner = RecordingRunner(tiny_runner), RecordingRunner(tiny_runner)
    turn = decode(turn_runner, in_turn, params=PARAMS[mode], spec=spec, streams=4)
    batched = decode(ahead_runner, ahead, params=PARAMS[mode], spec=spec, streams=4)
    assert_same(turn, batched)
    fed = sum(len(feed) for step in turn_runner.feeds for feed in step)
    assert turn_runner.rows == fed  # a processor in turn reads every row
    if kind == "grammar":
        # The rows whose token the grammar named ahead were never computed.
        assert ahead_runner.rows < sum(len(feed) for step in ahead_runner.feeds for feed in step)
        assert commit_logs(in_turn) == {r.id: r.processor.commits for r in ahead}
        # Every row was processed ahead but the ones after a completed grammar's stop (none is sampled).
        assert sum(r.processor.in_turn for r in ahead) == 0
        assert sum(len(r.processor.commits) for r in ahead) > 0


# -- batch == sequential ------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, SPEC], ids=["plain", "spec"])
@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("kind", ["none", "grammar"])
def test_batch_equals_sequential(tokenizer, tiny_runner, record, kind, mode, spec):
    seq_requests = make_requests(tokenizer, kind, record)
    batch_requests = make_requests(tokenizer, kind, record)
    sequential = decode(tiny_runner, seq_requests, params=PARAMS[mode], spec=spec, streams=1)
    batched = decode(tiny_runner, batch_requests, params=PARAMS[mode], spec=spec, streams=4)
    assert_same(sequential, batched)
    assert commit_logs(seq_requests) == commit_logs(batch_requests)
    assert len({tuple(g.tokens) for g in batched.values()}) == len(batched)  # streams really differ


@pytest.mark.parametrize("batched_attention", [True, False], ids=["grid", "sdpa-per-sequence"])
@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_other_attention_paths_equal_sequential(tokenizer, tiny_model, tiny_runner, record, mode, batched_attention):
    """The CPU default is the decode kernel; one attention call per layer on the grid (the GPU's path) and
    SDPA per sequence (the CPU's without a compiler) change no token either."""
    from fucina_jobs.models.hf_runner import HFRunner

    seq_requests = make_requests(tokenizer, "grammar", record)
    batch_requests = make_requests(tokenizer, "grammar", record)
    sequential = decode(tiny_runner, seq_requests, params=PARAMS[mode], spec=SPEC, streams=1)
    other = HFRunner(tiny_model, batched_attention=batched_attention)
    batched = decode(other, batch_requests, params=PARAMS[mode], spec=SPEC, streams=4)
    assert_same(sequential, batched)
    assert commit_logs(seq_requests) == commit_logs(batch_requests)


def test_shared_processor_is_rejected(tokenizer, tiny_runner, record):
    shared = record.clone()
    requests = [Request(f"r{k}", repetitive_prompt(tokenizer, k), shared, max_tokens=5) for k in range(2)]
    with pytest.raises(SharedBatchProcessor):
        decode(tiny_runner, requests, streams=2)


def test_shared_processor_rejected_when_a_refill_joins(tokenizer, tiny_runner, record):
    shared = record.clone()
    requests = [
        Request("a", json_prompt(tokenizer, 0), shared, max_tokens=30),
        Request("b", json_prompt(tokenizer, 1), record.clone(), max_tokens=2),
        Request("c", json_prompt(tokenizer, 2), shared, max_tokens=5),  # joins while "a" is live
    ]
    with pytest.raises(SharedBatchProcessor):
        decode(tiny_runner, requests, streams=2)


def test_one_processor_reused_sequentially(tokenizer, tiny_runner, record):
    """One stream at a time may reuse a processor: each request re-arms it."""
    shared = record.clone()
    reused = decode(tiny_runner, [Request(f"r{k}", json_prompt(tokenizer, k), shared, max_tokens=30) for k in range(3)])
    fresh = decode(tiny_runner, [Request(f"r{k}", json_prompt(tokenizer, k), record.clone(), max_tokens=30) for k in range(3)])
    assert_same(reused, fresh)


@pytest.mark.parametrize("spec", [None, SPEC], ids=["plain", "spec"])
def test_refill_gives_each_request_its_own_output(tokenizer, tiny_runner, record, spec):
    def requests():
        out = []
        for k in range(7):
            kind = ("none", "bias", "grammar")[k % 3]
            prompt = json_prompt(tokenizer, k) if kind == "grammar" else repetitive_prompt(tokenizer, k)
            processor = {"none": None, "bias": Recorder(bias(tokenizer)), "grammar": Recorder(record.clone())}[kind]
            out.append(Request(f"q{k}", prompt, processor, seed=k, max_tokens=6 + 5 * k))
        return out

    sequential = decode(tiny_runner, requests(), params=SAMPLED, spec=spec, streams=1)
    order = []
    seen = {}
    from fucina_jobs.decoding.batch import BatchDecoder

    for gen in BatchDecoder(tiny_runner, {STOP}, SAMPLED, spec, streams=3).run(requests()):
        order.append(gen.id)
        seen[gen.id] = gen
    assert sorted(order) == sorted(sequential) and len(order) == 7
    assert_same(sequential, seen)


@pytest.mark.parametrize("spec, streams", [(None, 1), (SPEC, 1), (None, 3), (SPEC, 3)], ids=["plain", "spec", "batch", "batch-spec"])
def test_max_tokens_budget(tokenizer, tiny_runner, spec, streams):
    budgets = [1, 2, 5, 9, 17]
    requests = []
    for k, budget in enumerate(budgets):
        if k % 2:  # a grammar that cannot complete within the budget, and never offers the stop
            processor = Constraint.regex("[a-z]{300}", tokenizer, stop_token=STOP)
        else:
            processor = TokenBias.banned([STOP])
        requests.append(Request(f"b{k}", repetitive_prompt(tokenizer, k), processor, max_tokens=budget))
    gens = decode(tiny_runner, requests, spec=spec, streams=streams)
    for k, budget in enumerate(budgets):
        assert gens[f"b{k}"].finish_reason == "length"
        assert len(gens[f"b{k}"].tokens) == budget
    if spec is not None:
        assert accepted(gens) > 0
