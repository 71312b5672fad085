"""HFRunner on the tiny float64 model: packed ragged forwards over the slotted cache.

Most checks compare the runner's rows with a cache-free full forward of the
same sequence, so a wrong position, mask, slot or stale cache entry shows.
"""

from __future__ import annotations

import copy
import gc

import pytest
import torch

from fucina_jobs.models import hf_runner
from fucina_jobs.models.hf_runner import HFRunner, _onednn_packs

VOCAB_IDS = 3000  # token ids drawn below this


def tokens(seed: int, n: int) -> list[int]:
    return torch.randint(3, VOCAB_IDS, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def full(tiny_model):
    """Logits of a cache-free forward over a whole sequence, ``[len, vocab]``."""

    @torch.no_grad()
    def run(sequence: list[int], model=tiny_model) -> torch.Tensor:
        return model(torch.tensor([sequence])).logits[0].float()

    return run


def test_ragged_batch_matches_full_forwards(tiny_runner, full):
    """Different past lengths (one empty) and different numbers of new tokens share one forward."""
    pasts, news = [0, 5, 11, 3, 0], [4, 1, 6, 1, 1]
    sequences = [tokens(k, p + n + 3) for k, (p, n) in enumerate(zip(pasts, news))]
    states = [tiny_runner.new_state() for _ in sequences]
    prefill = [(st, s[:p]) for st, s, p in zip(states, sequences, pasts) if p]
    assert tiny_runner.forward(prefill, logits=False) == []
    assert [st.length for st in states] == pasts

    rows = tiny_runner.forward([(st, s[p : p + n]) for st, s, p, n in zip(states, sequences, pasts, news)])
    for s, r, p, n in zip(sequences, rows, pasts, news):
        assert r.dtype == torch.float32 and r.shape == (n, tiny_runner.vocab_size)
        assert torch.allclose(r, full(s)[p : p + n], atol=1e-6)

    # A second step with the counts swapped around, from the lengths the first one left.
    rows = tiny_runner.forward([(st, s[p + n :]) for st, s, p, n in zip(states, sequences, pasts, news)])
    for st, s, r in zip(states, sequences, rows):
        assert st.length == len(s)
        assert torch.allclose(r, full(s)[-3:], atol=1e-6)


def test_rows_flagged_per_token_are_the_rows_computed(tiny_runner, full):
    """A flag per token: only the flagged tokens' rows come back (none for an entry of all False, and an
    entry of plain False returns nothing), every token is cached alike."""
    sequences = [tokens(20 + k, 6) for k in range(4)]
    states = [tiny_runner.new_state() for _ in sequences]
    flags = [[True, False, True, False, False], True, [False] * 5, False]
    rows = tiny_runner.forward([(st, s[:5]) for st, s in zip(states, sequences)], logits=flags)
    assert [r.shape[0] for r in rows] == [2, 5, 0]
    assert torch.allclose(rows[0], full(sequences[0])[[0, 2]], atol=1e-6)
    assert torch.allclose(rows[1], full(sequences[1])[:5], atol=1e-6)
    nexts = tiny_runner.forward([(st, s[5:]) for st, s in zip(states, sequences)])
    for s, r in zip(sequences, nexts):
        assert torch.allclose(r, full(s)[5:], atol=1e-6)


def test_batched_rows_equal_one_at_a_time(tiny_runner):
    sequences = [tokens(10 + k, 12) for k in range(3)]
    cuts = [(2, 7), (0, 1), (9, 12)]
    batched = [tiny_runner.new_state() for _ in sequences]
    single = [tiny_runner.new_state() for _ in sequences]
    for st, s, (a, _) in zip(batched + single, sequences * 2, cuts * 2):
        if a:
            tiny_runner.forward([(st, s[:a])], logits=False)
    rows = tiny_runner.forward([(st, s[a:b]) for st, s, (a, b) in zip(batched, sequences, cuts)])
    for st, s, (a, b), r in zip(single, sequences, cuts, rows):
        (alone,) = tiny_runner.forward([(st, s[a:b])])
        assert torch.allclose(r, alone, atol=1e-9)


def test_fork_evolves_independently(tiny_runner, full):
    prompt, left, right = tokens(20, 8), tokens(21, 4), tokens(22, 3)
    state = tiny_runner.new_state()
    tiny_runner.forward([(state, prompt)], logits=False)
    twin = tiny_runner.fork(state, 5)
    assert (state.length, twin.length) == (8, 5)
    rows = tiny_runner.forward([(state, left), (twin, right)])
    assert torch.allclose(rows[0], full(prompt + left)[8:], atol=1e-6)
    assert torch.allclose(rows[1], full(prompt[:5] + right)[5:], atol=1e-6)
    # Each keeps extending its own history: the twin's writes never reach the original.
    rows = tiny_runner.forward([(twin, [7]), (state, [9])])
    assert torch.allclose(rows[0], full(prompt[:5] + right + [7])[-1:], atol=1e-6)
    assert torch.allclose(rows[1], full(prompt + left + [9])[-1:], atol=1e-6)
    assert tiny_runner.fork(state, 99).length == state.length


def test_trim_then_extend(tiny_runner, full):
    sequence, retry = tokens(30, 10), tokens(31, 5)
    state = tiny_runner.new_state()
    tiny_runner.forward([(state, sequence)], logits=False)
    tiny_runner.trim(state, 6)  # rejected drafts
    assert state.length == 6
    tiny_runner.trim(state, 8)  # trimming never lengthens
    assert state.length == 6
    (rows,) = tiny_runner.forward([(state, retry)])
    assert torch.allclose(rows, full(sequence[:6] + retry)[6:], atol=1e-6)


def test_growth_keeps_every_cache(tiny_model, full):
    """A fresh store grows its capacity and its slots mid-run without losing what it holds."""
    runner = HFRunner(tiny_model)
    sequences = [tokens(40 + k, 80) for k in range(hf_runner._FIRST_SLOTS + 2)]
    states, rows = [], []
    for k, s in enumerate(sequences):  # each newcomer needs a slot; the oldest grow past the capacity
        states.append(runner.new_state())
        runner.forward([(states[-1], s[:3])], logits=False)
        rows = runner.forward([(st, seq[st.length : st.length + 4]) for st, seq in zip(states, sequences)])
    for st, s, r in zip(states, sequences, rows):
        assert torch.allclose(r, full(s)[st.length - 4 : st.length], atol=1e-6)
    assert runner.store.slots > hf_runner._FIRST_SLOTS and runner.store.capacity >= states[0].length


def test_dropped_states_give_their_slots_back(tiny_model):
    runner = HFRunner(tiny_model)
    prefixes = []
    for k in range(50):  # streams come and go; a few prefixes stay cached, as in the decoder
        state = runner.new_state()
        runner.forward([(state, tokens(k, 6))], logits=False)
        prefixes = [*prefixes[-3:], runner.fork(state, 4)]
        del state
    assert runner.store.slots == hf_runner._FIRST_SLOTS  # 5 live at most, ever: the first slots serve them all
    del prefixes
    gc.collect()
    assert sorted(runner.store.free) == list(range(runner.store.slots))


def test_model_keeps_its_own_attention(tiny_runner, tiny_model):
    """The slotted attention is on only inside the runner's forwards: the model still works on its own."""
    reference = copy.deepcopy(tiny_model)
    tiny_runner.forward([(tiny_runner.new_state(), tokens(50, 3))])
    assert tiny_model.config._attn_implementation == reference.config._attn_implementation
    sequence = tokens(51, 9)
    ids = torch.tensor([[0, 0, *sequence[:7]], sequence])
    mask = torch.tensor([[0, 0] + [1] * 7, [1] * 9])
    with torch.no_grad():
        ours, theirs = (m(ids, attention_mask=mask).logits for m in (tiny_model, reference))
    assert torch.allclose(ours[:, 2:], theirs[:, 2:], atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_linears(tiny_model, dtype):
    """The CPU's linears run over weights oneDNN packed once: a row's result is the same bit for bit whatever
    the rows beside it (one alone included), the model can still be deep-copied, and a weight changed in
    place is packed again."""
    model = copy.deepcopy(tiny_model).to(dtype)
    HFRunner(model)
    linear = model.model.layers[0].mlp.down_proj
    x = torch.randn(40, linear.in_features).to(dtype)
    if not _onednn_packs(dtype):  # a CPU without bfloat16's packed path keeps torch's linear, which still runs
        assert type(linear) is torch.nn.Linear
        with torch.no_grad():
            torch.testing.assert_close(linear(x), torch.nn.functional.linear(x, linear.weight))
        return
    assert type(linear).__name__ == "_OneDNNLinear"
    with torch.no_grad():
        together = linear(x)
        for rows in (slice(0, 1), slice(3, 4), slice(0, 7), slice(5, 38)):
            assert torch.equal(linear(x[rows]), together[rows])
        torch.testing.assert_close(together, torch.nn.functional.linear(x, linear.weight))
        twin = copy.deepcopy(model).model.layers[0].mlp.down_proj
        assert torch.equal(twin(x), together)
        linear.weight.mul_(2)
        torch.testing.assert_close(linear(x), 2 * together)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-3), (torch.bfloat16, 0.6)])
def test_lower_precision(tiny_model, full, dtype, atol):
    model = copy.deepcopy(tiny_model).to(dtype)
    runner = HFRunner(model)
    assert runner._kernel and runner._fused  # the CPU kernels: attention and the layers' element-wise ops
    sequences = [tokens(60, 12), tokens(61, 7)]
    states = [runner.new_state() for _ in sequences]
    runner.forward([(states[0], sequences[0][:5])], logits=False)
    rows = runner.forward([(states[0], sequences[0][5:]), (states[1], sequences[1])])
    for s, r, n in zip(sequences, rows, (7, 7)):
        assert r.dtype == torch.float32
        assert torch.allclose(r, full(s)[-n:], atol=atol), (r - full(s)[-n:]).abs().max()


@pytest.mark.parametrize("batched_attention", [None, True, False], ids=["cpu-kernel", "grid", "sdpa-per-sequence"])
def test_every_attention_path_matches_full_forwards(tiny_model, full, batched_attention):
    """The CPU decode kernel (the default), one attention call for the whole batch on the grid, and SDPA per
    sequence give the same rows: slot gaps, ragged counts, and a prompt chunk too long for the grid or the
    kernel, which attends on its own, included."""
    runner = HFRunner(tiny_model, batched_attention=batched_attention)
    assert runner._kernel == (batched_attention is None)
    pasts, news = [0, 5, 11, 3, 0], [4, 1, 6, 1, 1]
    sequences = [tokens(70 + k, p + n + 3) for k, (p, n) in enumerate(zip(pasts, news))]
    states = [runner.new_state() for _ in sequences]
    spare = runner.new_state()  # a slot inside the range that this batch does not use
    states.append(runner.new_state())
    seqs = [*sequences, tokens(79, 25)]
    runner.forward([(st, s[:p]) for st, s, p in zip(states, seqs, [*pasts, 2]) if p], logits=False)
    rows = runner.forward([(st, s[p : p + n]) for st, s, p, n in zip(states, seqs, [*pasts, 2], [*news, 20])])
    for s, r, p, n in zip(seqs, rows, [*pasts, 2], [*news, 20]):
        assert torch.allclose(r, full(s)[p : p + n], atol=1e-9)
    del spare


def test_without_a_compiler_the_cpu_keeps_sdpa(tiny_model, full, monkeypatch, caplog):
    """No C++ compiler: a warning that says what to install, and torch's SDPA and element-wise ops, same rows."""
    from fucina_jobs import native

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    native.library.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            runner = HFRunner(copy.deepcopy(tiny_model).float())
        assert not runner._kernel and not runner._fused
        assert "install a C++ compiler" in caplog.text
        sequence = tokens(75, 9)
        state = runner.new_state()
        runner.forward([(state, sequence[:5])], logits=False)
        (rows,) = runner.forward([(state, sequence[5:])])
        assert torch.allclose(rows, full(sequence)[5:], atol=1e-3)
    finally:
        native.library.cache_clear()


def test_logits_only_for_the_flagged_sequences(tiny_runner, full):
    """A prompt chunk rides along without logits: rows come back for the flagged sequences only, in order."""
    sequences = [tokens(80 + k, 9) for k in range(3)]
    states = [tiny_runner.new_state() for _ in sequences]
    rows = tiny_runner.forward([(st, s) for st, s in zip(states, sequences)], logits=[True, False, True])
    assert len(rows) == 2
    assert torch.allclose(rows[0], full(sequences[0]), atol=1e-9)
    assert torch.allclose(rows[1], full(sequences[2]), atol=1e-9)
    assert [st.length for st in states] == [9, 9, 9]
    (row,) = tiny_runner.forward([(states[1], [5])])
    assert torch.allclose(row, full(sequences[1] + [5])[-1:], atol=1e-9)


@pytest.mark.slow
def test_compiled_forward_matches_eager(tiny_model, full):
    """``compile=True`` (engine.compile): ragged steps of changing shapes through one dynamic graph, same rows.

    Not to 1e-9: the rotary tables are float32 on both paths, and inductor's
    vectorised cos/sin round differently from eager's (about 2e-6 here).
    """
    runner = HFRunner(copy.deepcopy(tiny_model), compile=True)
    sequences = [tokens(90 + k, 14) for k in range(3)]
    states = [runner.new_state() for _ in sequences]
    runner.forward([(states[0], sequences[0][:6]), (states[1], sequences[1][:2])], logits=False)
    for cut in ((6, 9), (2, 3), (0, 5)), ((9, 14), (3, 14), (5, 6)):
        rows = runner.forward([(st, s[a:b]) for st, s, (a, b) in zip(states, sequences, cut)])
        for s, r, (a, b) in zip(sequences, rows, cut):
            assert torch.allclose(r, full(s)[a:b], atol=1e-5), (r - full(s)[a:b]).abs().max()


def test_folded_heads_match_full_forwards(tiny_model, full):
    """The fold that bfloat16 and float16 runners use for short sequences (grouped query heads as extra
    queries, one mask row per head and token) gives the same rows, proved at float64 by forcing it on."""
    runner = HFRunner(tiny_model, batched_attention=False)  # SDPA per sequence, where the fold applies
    runner._fold_heads = True
    pasts, news = [0, 5, 11, 3, 0], [4, 1, 6, 1, 20]  # a fresh short sequence, and a chunk too long to fold
    sequences = [tokens(100 + k, p + n) for k, (p, n) in enumerate(zip(pasts, news))]
    states = [runner.new_state() for _ in sequences]
    runner.forward([(st, s[:p]) for st, s, p in zip(states, sequences, pasts) if p], logits=False)
    rows = runner.forward([(st, s[p:]) for st, s, p in zip(states, sequences, pasts)])
    for s, r, p in zip(sequences, rows, pasts):
        assert torch.allclose(r, full(s)[p:], atol=1e-9)
