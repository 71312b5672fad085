"""The seam: ``Sampler.next`` masks, selects, then commits exactly once."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tests.helpers import GREEDY, Recorder
from fucina_jobs.decoding.processor import LogitProcessor, TokenBias
from fucina_jobs.decoding.sampler import AllTokensMasked, Sampler, row_stats

V = 512
SAMPLED = replace(GREEDY, temperature=1.0)


def logits(seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(V, generator=torch.Generator().manual_seed(seed)) * scale


def test_mask_changes_the_greedy_pick():
    row = logits()
    top = int(torch.argmax(row))
    assert Sampler(GREEDY).next(row.clone(), []) == top
    second = int(torch.topk(row, 2).indices[1])
    assert Sampler(GREEDY, processor=TokenBias.banned([top])).next(row.clone(), []) == second


def test_mask_applies_on_the_sampled_path():
    row = torch.zeros(V)
    row[:8] = 5.0  # eight favourites carry almost all the mass
    banned = [0, 1, 2, 3, 4, 5]
    sampler = Sampler(SAMPLED, TokenBias.banned(banned), seed=3)
    picks = [sampler.next(row.clone(), []) for _ in range(400)]
    assert not set(picks) & set(banned)
    assert set(picks) >= {6, 7}  # the remaining favourites are still drawn
    unmasked = Sampler(SAMPLED, seed=3)
    assert set(unmasked.next(row.clone(), []) for _ in range(400)) & set(banned)


@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.7, top_k=5, top_p=0.9, min_p=0.01, repeat_penalty=1.3)])
def test_one_commit_per_selection(params):
    recorder = Recorder()
    sampler = Sampler(params, recorder, seed=1)
    history: list[int] = []
    for step in range(25):
        token = sampler.next(logits(step), history)
        history.append(token)
        assert recorder.commits == history
    assert len(sampler.process_seconds) == 25


def test_all_tokens_masked_raises():
    recorder = Recorder(TokenBias.banned(range(V)))
    for params in (GREEDY, SAMPLED):
        with pytest.raises(AllTokensMasked):
            Sampler(params, recorder).next(logits(), [])
    assert recorder.commits == []  # nothing was selected, so nothing is committed


def test_greedy_takes_the_first_of_tied_maxima_and_fails_loudly_on_nan():
    row = torch.zeros(V)
    row[[7, 300, 40]] = 2.0
    assert Sampler(GREEDY).next(row.clone(), []) == 7
    row[100] = float("nan")
    with pytest.raises(AllTokensMasked):
        Sampler(GREEDY).next(row, [])


def test_minus_inf_survives_repeat_penalty():
    row = torch.full((V,), -4.0)
    row[7] = 10.0  # banned but hugely favoured, and in the history (penalty divides/multiplies)
    row[9] = -3.0  # best of the rest, also in the history
    history = [7, 9, 7]
    for params in (replace(GREEDY, repeat_penalty=0.001), replace(GREEDY, repeat_penalty=1000.0)):
        assert Sampler(params).next(row.clone(), history) == 7  # unbanned, it still wins
        sampler = Sampler(params, TokenBias.banned([7]))
        assert sampler.next(row.clone(), history) != 7
    # A penalty below 1 multiplies negative logits towards zero: still never revives -inf.
    sampler = Sampler(replace(GREEDY, temperature=1.0, repeat_penalty=0.01), TokenBias.banned([7]), seed=0)
    assert all(sampler.next(row.clone(), history) != 7 for _ in range(200))


def test_repeat_penalty_applies():
    row = torch.zeros(V)
    row[3], row[4] = 2.0, 1.9
    assert Sampler(replace(GREEDY, repeat_penalty=1.5)).next(row.clone(), [3]) == 4
    assert Sampler(replace(GREEDY, repeat_penalty=1.5, repeat_window=1)).next(row.clone(), [3, 8]) == 3


def test_top_k_one_is_greedy():
    sampler = Sampler(replace(GREEDY, temperature=1.5, top_k=1), seed=11)
    for step in range(50):
        row = logits(step, scale=0.5)
        assert sampler.next(row.clone(), []) == int(torch.argmax(row))


def test_seeded_generator_is_reproducible():
    def draw(seed):
        sampler = Sampler(SAMPLED, seed=seed)
        return [sampler.next(logits(step, scale=0.5), []) for step in range(40)]

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_processor_sees_the_raw_row_before_temperature():
    recorder = Recorder(keep_rows=True)
    row = logits(2)
    params = replace(GREEDY, temperature=0.3, top_k=3, top_p=0.5, min_p=0.2, repeat_penalty=2.0)
    Sampler(params, recorder).next(row.clone(), [int(torch.argmax(row))])
    assert len(recorder.rows) == 1
    assert torch.equal(recorder.rows[0], row)


def test_processor_mask_narrows_the_sampled_distribution():
    # The mask acts on the full row before top-k: banning the top-3 with top_k=3
    # must still sample (from the next three), not fail or pick a banned id.
    row = logits(4)
    order = torch.argsort(row, descending=True).tolist()
    sampler = Sampler(replace(GREEDY, temperature=1.0, top_k=3), TokenBias.banned(order[:3]), seed=0)
    picks = {sampler.next(row.clone(), []) for _ in range(200)}
    assert picks <= set(order[3:6]) and picks


def test_history_passed_to_processor():
    seen = []

    class Spy(LogitProcessor):
        def process(self, logits, history):
            seen.append(list(history))

    Sampler(GREEDY, processor=Spy()).next(logits(), [4, 5, 6])
    assert seen == [[4, 5, 6]]


@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.7, top_k=5, repeat_penalty=1.3)])
def test_selected_token_probability_is_the_masked_softmax_at_temperature_1(params):
    banned = [int(i) for i in torch.topk(logits(), 3).indices]  # the model's favourites are masked out
    sampler = Sampler(params, TokenBias.banned(banned), seed=2)
    history = [int(i) for i in torch.topk(logits(), 10).indices[3:]]  # penalised by repeat_penalty
    for step in range(20):
        row = logits(step)
        token = sampler.next(row.clone(), history)
        masked = row.clone()
        masked[banned] = float("-inf")
        assert sampler.token_probs[-1] == pytest.approx(float(torch.softmax(masked, 0)[token]), rel=1e-5)
    assert len(sampler.token_probs) == 20 and all(0 < p <= 1 for p in sampler.token_probs)


class ForceEveryOther(LogitProcessor):
    """Names token ``7 * calls`` on even calls, bans the row's two favourites on odd ones."""

    def __init__(self):
        self.calls = 0

    def process(self, logits, history):
        self.calls += 1
        if self.calls % 2:
            return 7 * self.calls % V
        logits[torch.topk(logits, 2).indices] = float("-inf")
        return None


class MaskToForced(LogitProcessor):
    """The same rule, with a named token turned into a mask that keeps it alone."""

    def __init__(self, inner: LogitProcessor):
        self.inner = inner

    def process(self, logits, history):
        forced = self.inner.process(logits, history)
        if forced is not None:
            keep = logits[forced].clone()
            logits.fill_(float("-inf"))
            logits[forced] = keep


@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.8, top_k=20, top_p=0.95, repeat_penalty=1.2)])
def test_a_named_token_samples_as_a_mask_that_keeps_it_alone(params):
    """Same tokens, same probabilities (1 for a forced token), and the random draws stay in step."""
    named, masked = Sampler(params, ForceEveryOther(), seed=5), Sampler(params, MaskToForced(ForceEveryOther()), seed=5)
    history: list[int] = []
    for k in range(40):
        token = named.next(logits(k), history)
        assert token == masked.next(logits(k), history)
        history.append(token)
    assert named.token_probs == masked.token_probs and named.token_probs[::2] == [1.0] * 20
    assert history[::2] == [7 * (2 * i + 1) % V for i in range(20)]


@pytest.mark.parametrize("value", [float("-inf"), float("nan")])
def test_a_named_token_whose_logit_is_gone_fails_like_an_empty_mask(value):
    row = logits()
    row[7] = value
    for processor in (ForceEveryOther(), MaskToForced(ForceEveryOther())):
        with pytest.raises(AllTokensMasked):
            Sampler(GREEDY, processor=processor).next(row.clone(), [])


# -- row_stats: a batch's greedy choices and their probabilities, as Sampler.next computes them ---------


def test_row_stats_equal_the_samplers_own_bit_for_bit():
    """Rows that follow each other in one tensor (a runner's logits) are computed together, others apart;
    either way each row's token and log-probability are the ones ``Sampler.next`` computes alone."""
    rows = torch.randn(12, 49152, generator=torch.Generator().manual_seed(3)) * 4
    rows[1, 100:40000] = float("-inf")  # a masked row
    rows[4, 10] = rows[4, 20] = rows[4].max() + 1  # a tie: the first one
    rows[5] = float("-inf")
    rows[5, 49151] = 2.0  # one token left, in the last column
    rows[6, -3:] = 1000.0  # far above the rest
    pieces = list(rows[:5].split(1)) + [rows[5:9][i] for i in range(4)] + [rows[11].clone(), rows[9], rows[10]]
    order = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 9, 10]
    got = row_stats([p.reshape(-1) for p in pieces])
    for (token, log_prob), i in zip(got, order):
        alone = Sampler(GREEDY)
        assert alone.next(rows[i].clone(), []) == token
        assert math.exp(log_prob) == alone.token_probs[0]
        assert log_prob == pytest.approx(float(torch.log_softmax(rows[i].double(), 0)[token]), rel=1e-6, abs=1e-7)


def test_row_stats_count_a_nan_as_the_maximum_as_numpy_does():
    rows = torch.randn(3, 4096, generator=torch.Generator().manual_seed(4))
    rows[0, [70, 900]] = float("nan")
    rows[1] = float("-inf")
    (nan_token, nan_log_prob), (empty_token, empty_log_prob), _ = row_stats(list(rows))
    assert nan_token == 70 == int(rows[0].numpy().argmax()) and math.isnan(nan_log_prob)
    assert empty_token == 0 and math.isnan(empty_log_prob)
    with pytest.raises(AllTokensMasked):
        Sampler(GREEDY).next(rows[0].clone(), [])
