"""A sliding layer's keys and values on a ring of its window and a forward's new tokens (``KVStore``): decoded
several rings past its window, on every attention path, a model still decodes as transformers' eager forward
does; forks keep what the ring still holds and refuse the rest; a model without sliding layers keeps its store.

``step_tokens`` is cut from 2,048 to a few, so the tiny family models' rings (window 8) wrap within a few
dozen tokens.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import VOCAB
from tests.model_families import WINDOW, tiny_family
from tests.models.test_families import PATHS, assert_decoded_alike, eager, sequences
from fucina_jobs.decoding.prefix_cache import PrefixCache
from fucina_jobs.models.hf_runner import HFRunner

#: New tokens a forward writes at most: a ring of WINDOW + STEP = 12 rows.
STEP = 4
RING = WINDOW + STEP


def speculated(runner: HFRunner, seq: list[int], junk: int = 5) -> torch.Tensor:
    """The runner's logits for ``seq``, fed as speculation feeds it: each forward a few true tokens then rejected
    drafts (``junk``), trimmed back after it; the rejected keys stay on the ring until overwritten."""
    state, rows = runner.new_state(), []
    for k in range(len(seq)):
        if state.length >= len(seq):
            break
        true = seq[state.length : state.length + 1 + k % 3]
        out = runner.forward([(state, true + [junk] * (STEP - len(true)))])[0]
        rows.append(out[: len(true)])
        runner.trim(state, state.length - (STEP - len(true)))
    return torch.cat(rows)


@pytest.mark.parametrize("family", ["gemma3_text", "mistral"])
@pytest.mark.parametrize("path", list(PATHS))
def test_logits_equal_transformers_rings_past_the_window(family, path):
    """Gemma 3 (head dim 256) slides on one layer of two, Mistral on every layer; 50 tokens are four rings. The
    first sequence is fed in one forward of 50 tokens (split into forwards of ``STEP``)."""
    model = tiny_family(family, VOCAB)
    runner = HFRunner(model, batched_attention=PATHS[path], step_tokens=STEP)
    first, second = sequences(2, 50)
    got = [runner.forward([(runner.new_state(), first)])[0], speculated(runner, second)]
    assert runner.store.keys[0].shape[2] == RING  # the sliding layer wrapped
    for s, rows in zip((first, second), got):
        want = eager(model, s)
        assert torch.allclose(rows, want, atol=1e-5, rtol=0), f"{family} on {path}: max difference {(rows - want).abs().max():.3g}"


def test_plain_speculative_and_batched_agree_under_a_grammar_on_rings(tokenizer):
    """The central proof with rings: the same tokens, probabilities and commits, one stream or four, with and
    without speculation (feeds of 9 tokens at most: ``step_tokens`` 12), each sequence a few rings long."""
    runner = HFRunner(tiny_family("gemma3_text", VOCAB), step_tokens=12)
    requests, plain = assert_decoded_alike(runner, tokenizer)
    ring = WINDOW + 12
    assert runner.store.keys[0].shape[2] == ring
    assert min(len(r.prompt) + len(plain[r.id].tokens) for r in requests) > 2 * ring


def test_a_fork_keeps_what_the_ring_holds_and_refuses_the_rest(tokenizer):
    """Within ``step_tokens`` of what the source wrote, a fork's window is still on the ring: the twin decodes
    as transformers does. Further back it is not: the fork is refused, and the prefix cache starts afresh."""
    model = tiny_family("gemma3_text", VOCAB)
    runner = HFRunner(model, step_tokens=STEP)
    seq = sequences(1, 60)[0]
    state = runner.new_state()
    runner.forward([(state, seq[:50])], logits=False)
    near = runner.fork(state, 50 - STEP)
    rows = runner.forward([(near, seq[near.length :])])[0]
    assert torch.allclose(rows, eager(model, seq)[50 - STEP :], atol=1e-5, rtol=0)
    assert runner.fork(state, 50 - STEP - 1) is None
    with pytest.raises(ValueError, match="cannot trim a sequence back to 45 of its 50 positions"):
        runner.trim(state, 45)

    cache = PrefixCache(runner)
    cache.store(seq[:51], state)  # an entry holding the 50 tokens
    fresh, reused = cache.start(seq[:40] + [7, 8, 9])  # shares 40 tokens: too far back
    assert reused == 0 and fresh.length == 0 and cache.reused_tokens == 0
    twin, reused = cache.start(seq[:48] + [7, 8, 9])  # shares 48
    assert reused == twin.length == 48
    rows = runner.forward([(twin, seq[48:56])])[0]
    assert torch.allclose(rows, eager(model, seq[:56])[48:], atol=1e-5, rtol=0)


def test_the_store_is_bounded_on_sliding_layers_and_unchanged_elsewhere():
    """The sliding layer holds the ring's 12 rows a slot, the full layer the store's capacity; a model without
    sliding layers has no ring and every layer at the capacity, as the store was before rings."""
    ids = sequences(1, 70)[0]
    for family in ("gemma3_text", "llama"):
        runner = HFRunner(tiny_family(family, VOCAB), step_tokens=STEP)
        runner.forward([(runner.new_state(), ids)], logits=False)
        store = runner.store
        rows = [k.shape[2] for k in store.keys]
        assert store.capacity >= len(ids)
        assert rows == ([RING, store.capacity] if family == "gemma3_text" else [store.capacity] * 2), family
        assert store.rings == ([RING, None] if family == "gemma3_text" else [None, None])
        per_row = store.slots * store.kv_heads * store.head_dim * store.keys[0].element_size()
        assert store.nbytes == 2 * per_row * sum(rows)
        # What ``bench decode`` reports a slot holds at a length: the ring's rows on the sliding layer, all on the other.
        per_position = 2 * store.kv_heads * store.head_dim * store.keys[0].element_size()
        expected = (RING + 1000 if family == "gemma3_text" else 2000) * per_position
        assert store.slot_bytes(1000) == expected and store.slot_bytes(1000, rings=False) == 2000 * per_position
