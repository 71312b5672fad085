"""Likelihood choice on the tiny float64 model: the whole value's likelihood decides, and every path decides alike."""

from __future__ import annotations

import gc
import math
from dataclasses import replace

import pytest
import torch

from tests.helpers import GREEDY, SPEC, STOP, LogsTurns, Recorder, RecordingRunner, decode
from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.choice import LikelihoodChoice
from fucina_jobs.decoding.constraint import Constraint

VALUES = ("12.50", "125", "1.25", "7.00", "70", "3.14")
OPTIONS = tuple(v + "}" for v in VALUES)  # each value with the text after it, as they are scored
LARK = 'start: "{\\"total\\":" ("12.50" | "125" | "1.25" | "7.00" | "70" | "3.14") "}"'
AFTER = '{"total":'


@pytest.fixture(scope="module")
def grammar(tokenizer):
    return Constraint.lark(LARK, tokenizer, stop_token=STOP)


def encoder(tokenizer):
    return lambda text: tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids


def chooser(tokenizer, inner, values=VALUES):
    return LikelihoodChoice(inner, [(AFTER, values, "}")], encoder(tokenizer), lambda ids: tokenizer.decode(ids))


def prompts(tokenizer):
    return [encoder(tokenizer)(f"receipt {k}: total 12.50 cash 70 change 3.14 JSON:") for k in range(4)]


def total_logprob(model, prefix: list[int], continuation: list[int]) -> float:
    """A cache-free forward over the whole sequence: the reference the decoder's batched scoring must agree with."""
    with torch.no_grad():
        rows = torch.log_softmax(model(torch.tensor([prefix + continuation])).logits[0].double(), -1)
    return sum(float(rows[len(prefix) - 1 + i, t]) for i, t in enumerate(continuation))


def test_the_option_of_highest_total_log_probability_wins_where_greedy_picks_another(tokenizer, tiny_runner, tiny_model, grammar):
    encode = encoder(tokenizer)
    greedy_differs = 0
    for k, prompt in enumerate(prompts(tokenizer)):
        greedy = decode(tiny_runner, [Request("g", prompt, grammar.clone(), max_tokens=16)])["g"]
        chosen = decode(tiny_runner, [Request("c", prompt, chooser(tokenizer, grammar.clone()), max_tokens=16)])["c"]
        scores = {o: total_logprob(tiny_model, prompt + encode(AFTER), encode(o)) for o in OPTIONS}
        best = max(scores, key=scores.get)
        assert tokenizer.decode(chosen.tokens) == AFTER + best, k
        greedy_differs += tokenizer.decode(greedy.tokens) != AFTER + best
        # The value's tokens record the chosen option's share of the options' likelihood.
        share = 1 / sum(math.exp(s - scores[best]) for s in scores.values())
        assert chosen.token_probs[-1] == pytest.approx(share, rel=1e-6)
    assert greedy_differs == 4, "greedy's first token picks another option on these prompts"


@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.8)], ids=["greedy", "sampled"])
def test_plain_speculative_and_batched_choose_alike(tokenizer, tiny_runner, grammar, params):
    def requests():
        return [Request(f"r{k}", p, Recorder(chooser(tokenizer, grammar.clone())), seed=k, max_tokens=16) for k, p in enumerate(prompts(tokenizer))]

    plain_requests, spec_requests = requests(), requests()
    plain = decode(tiny_runner, plain_requests, params=params)
    spec = decode(tiny_runner, spec_requests, params=params, spec=SPEC, streams=3)
    for p, s in zip(plain_requests, spec_requests):
        assert plain[p.id].tokens == spec[s.id].tokens and p.processor.commits == s.processor.commits, p.id
        assert plain[p.id].token_probs == pytest.approx(spec[s.id].token_probs, rel=1e-6, abs=1e-9), p.id
    assert sum(g.stats.accepted.get("forced", 0) for g in spec.values()) > 0, "the chosen tokens are certain drafts"


class LoggedChoice(LogsTurns, LikelihoodChoice):
    """A choice that logs its commits and the rows it processes in turn, and still looks ahead."""

    @classmethod
    def of(cls, choice: LikelihoodChoice) -> "LoggedChoice":
        logged = cls(choice.inner, choice.choices, choice.encode, choice.decode)
        logged.commits, logged.in_turn = [], 0
        return logged


@pytest.mark.parametrize("spec", [None, SPEC], ids=["plain", "spec"])
@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.8)], ids=["greedy", "sampled"])
@pytest.mark.parametrize("attention", ["kernel", "grid", "sdpa-per-sequence"])
def test_a_choice_processed_ahead_chooses_as_in_turn_and_leaves_named_rows_uncomputed(
    tokenizer, tiny_model, tiny_runner, grammar, params, spec, attention
):
    """Ahead of a batch's forward (``look_paths``), a choice names its option's tokens, and its grammar names
    the forced ones up to the row where the choice falls due; those rows are not computed, and the options
    it will score there are a token tree in the same forward, not a forward of their own. A ``Recorder``
    cannot look ahead, so it processes every row in turn: tokens, probabilities and commits are the same,
    plain or speculative, on every attention path (the tree is a span of its own, with its mask)."""
    from fucina_jobs.models.hf_runner import HFRunner

    runner = tiny_runner if attention == "kernel" else HFRunner(tiny_model, batched_attention=attention == "grid")

    def requests(wrap):
        return [Request(f"r{k}", p, wrap(chooser(tokenizer, grammar.clone())), seed=k, max_tokens=16) for k, p in enumerate(prompts(tokenizer))]

    in_turn, ahead = requests(Recorder), requests(LoggedChoice.of)
    turn_runner, ahead_runner = RecordingRunner(runner), RecordingRunner(runner)
    turn = decode(turn_runner, in_turn, params=params, spec=SPEC, streams=3)
    looked = decode(ahead_runner, ahead, params=params, spec=spec, streams=3)
    for t, a in zip(in_turn, ahead):
        assert turn[t.id].tokens == looked[a.id].tokens and t.processor.commits == a.processor.commits, t.id
        assert turn[t.id].token_probs == pytest.approx(looked[a.id].token_probs, rel=1e-6, abs=1e-9), t.id
    fed = sum(len(feed) for step in ahead_runner.feeds for feed in step)
    assert turn_runner.rows == sum(len(feed) for step in turn_runner.feeds for feed in step)
    assert ahead_runner.rows < fed, "the chosen option's tokens and the grammar's forced ones were named ahead"
    assert sum(a.processor.in_turn for a in ahead) >= len(ahead), "each choice fell due in turn, where its row was computed"
    # Each choice's options were scored in a step's forward, as a token tree after the row it falls due at.
    assert turn_runner.trees == len(in_turn) and ahead_runner.trees == 0


def test_choices_in_a_row_are_scored_in_the_steps_forwards(tokenizer, tiny_runner):
    """The second choice falls due just after the first's option is written: the look goes past the pending
    option's tokens to find it, and both are scored in a step's forward, as in turn."""
    lark = 'start: "{\\"total\\":" ("12.50" | "125" | "7.00") ",\\"cash\\":" ("70" | "3.14" | "12.50") "}"'
    inner = Constraint.lark(lark, tokenizer, stop_token=STOP)
    choices = [('{"total":', ("12.50", "125", "7.00"), ',"cash'), (',"cash":', ("70", "3.14", "12.50"), "}")]
    encode, decode_text = encoder(tokenizer), lambda ids: tokenizer.decode(ids)

    def requests(wrap):
        return [
            Request(f"r{k}", encode(text), wrap(LikelihoodChoice(inner.clone(), choices, encode, decode_text)), max_tokens=24)
            for k, text in enumerate(texts)
        ]

    # Earlier answers in the prompt: the n-gram drafts run on past an option into the next key.
    texts = [f'receipt {k}: {{"total":7.00,"cash":3.14}} {{"total":125,"cash":70}} {{"total":12.50,"cash":12.50}} JSON:' for k in range(4)]

    in_turn, ahead = requests(Recorder), requests(LoggedChoice.of)
    turn_runner, ahead_runner = RecordingRunner(tiny_runner), RecordingRunner(tiny_runner)
    turn = decode(turn_runner, in_turn, spec=SPEC, streams=3)
    looked = decode(ahead_runner, ahead, spec=SPEC, streams=3)
    for t, a in zip(in_turn, ahead):
        assert turn[t.id].tokens == looked[a.id].tokens and turn[t.id].token_probs == pytest.approx(looked[a.id].token_probs, rel=1e-6), t.id
    assert turn_runner.trees == 2 * len(in_turn) and ahead_runner.trees == 0


def test_a_finished_streams_slot_comes_back_without_a_collection(tokenizer, tiny_model, grammar):
    """A choice holds its stream (the scorer reads the stream's cache), a cycle only a collection frees:
    the stream gives its cache slot back as it finishes, so a long run needs no more slots than streams."""
    from fucina_jobs.models.hf_runner import _FIRST_SLOTS, HFRunner

    runner = HFRunner(tiny_model)
    requests = [Request(f"r{k}", p, chooser(tokenizer, grammar.clone()), max_tokens=16) for k, p in enumerate(prompts(tokenizer) * 10)]
    gc.disable()
    try:
        decode(runner, requests, spec=SPEC, streams=2)
    finally:
        gc.enable()
    assert runner.store.slots == _FIRST_SLOTS


def test_an_option_the_inner_grammar_refuses_is_never_chosen(tokenizer, tiny_runner, grammar, tiny_model):
    encode = encoder(tokenizer)
    prompt = prompts(tokenizer)[0]
    values = ("999.99", "70", "3.14")  # the grammar has no 999.99
    chosen = decode(tiny_runner, [Request("c", prompt, chooser(tokenizer, grammar.clone(), values), max_tokens=16)])["c"]
    scores = {v + "}": total_logprob(tiny_model, prompt + encode(AFTER), encode(v + "}")) for v in values[1:]}
    assert tokenizer.decode(chosen.tokens) == AFTER + max(scores, key=scores.get)


def test_a_choice_past_a_token_that_overshoots_its_text(tokenizer, tiny_runner, tiny_model):
    """``":"`` is one token: the output may have written the value's opening quote with the key's colon."""
    lark = 'start: "{\\"kind\\":" ("\\"alpha beta\\"" | "\\"gamma\\"" | "\\"delta epsilon\\"") "}"'
    inner = Constraint.lark(lark, tokenizer, stop_token=STOP)
    values = ('"alpha beta"', '"gamma"', '"delta epsilon"')
    options = tuple(v + "}" for v in values)
    encode = encoder(tokenizer)
    for prompt in prompts(tokenizer):
        processor = LikelihoodChoice(inner.clone(), [('"kind":', values, "}")], encode, lambda ids: tokenizer.decode(ids))
        tokens = decode(tiny_runner, [Request("c", prompt, processor, max_tokens=16)])["c"].tokens
        # The choice was due after the first tokens whose text holds the key; what they wrote past it, options must start with.
        due = next(i for i in range(1, len(tokens) + 1) if '"kind":' in tokenizer.decode(tokens[:i]))
        written = tokenizer.decode(tokens[:due])
        past = written[written.index('"kind":') + len('"kind":') :]
        rests = [o[len(past) :] for o in options if o.startswith(past)]
        scores = {r: total_logprob(tiny_model, prompt + tokens[:due], encode(r)) for r in rests}
        assert tokenizer.decode(tokens) == written + max(scores, key=scores.get)


def test_an_option_is_scored_up_to_the_first_token_that_writes_the_text_after_its_value(tokenizer, grammar):
    """Where the value ends is in that token; the rest of the next key is the same after every value."""
    follow = ',"currency_of_the_invoice'
    choice = LikelihoodChoice(grammar.clone(), [(AFTER, VALUES, follow)], encoder(tokenizer), lambda ids: tokenizer.decode(ids))
    _, _, options = choice._options(AFTER)
    assert len(options) == len(VALUES)
    for value, tokens in zip(VALUES, options):
        text = tokenizer.decode(list(tokens))
        assert text.startswith(value) and len(value) < len(text) < len(value + follow) and follow.startswith(text[len(value) :])
        assert not tokenizer.decode(list(tokens[:-1])).startswith(value + follow[:1])
