"""Prompts that share a prefix compute it once, and decode exactly as if they had not."""

from fucina_jobs.decoding.batch import BatchDecoder, Request
from fucina_jobs.decoding.prefix_cache import KEEP, cacheable, shared_prefix

from tests.helpers import GREEDY, STOPS, decode, RecordingRunner


def _prompts(tokenizer):
    shared = tokenizer.encode("You extract invoices. Reply with compact JSON and nothing else. " * 3)
    return shared, [shared + tokenizer.encode(f" Invoice {k}: total {k}00 EUR.") for k in range(3)]


def test_shared_prefix_is_prefilled_once(tiny_runner, tokenizer):
    shared, prompts = _prompts(tokenizer)
    runner = RecordingRunner(tiny_runner)
    decoder = BatchDecoder(runner, STOPS, GREEDY, streams=1)
    list(decoder.run([Request(str(k), p, max_tokens=4) for k, p in enumerate(prompts)]))
    first, *rest = [[len(tokens) for tokens in feed] for feed in runner.prefills]
    assert first == [len(prompts[0]) - 1]
    assert len(rest) == 2 and all(n < len(prompts[k + 1]) - len(shared) + 2 for k, [n] in enumerate(rest))
    assert decoder.prefixes.reused_tokens >= 2 * (len(shared) - 1)


def test_reused_prefix_decodes_like_a_fresh_prefill(tiny_runner, tokenizer):
    _, prompts = _prompts(tokenizer)
    together = decode(tiny_runner, [Request(str(k), p, seed=k, max_tokens=12) for k, p in enumerate(prompts)])
    for k, prompt in enumerate(prompts):
        alone = decode(tiny_runner, [Request(str(k), prompt, seed=k, max_tokens=12)])
        assert alone[str(k)].tokens == together[str(k)].tokens


def test_identical_prompt_needs_no_prefill(tiny_runner, tokenizer):
    _, prompts = _prompts(tokenizer)
    decoder = BatchDecoder(tiny_runner, STOPS, GREEDY, streams=2)
    out = {g.id: g.tokens for g in decoder.run([Request("a", prompts[0], max_tokens=6), Request("b", prompts[0], max_tokens=6)])}
    assert out["a"] == out["b"] and decoder.prefixes.reused_tokens == len(prompts[0]) - 1


def test_newcomers_prefill_in_chunks_inside_running_forwards(tiny_runner, tokenizer):
    """A long prompt rides along in the running stream's forwards, chunk by chunk, and changes no token."""
    short = tokenizer.encode("Invoice 1: total 100 EUR.")
    long = tokenizer.encode("You extract invoices. Reply with compact JSON and nothing else. " * 4)
    requests = lambda: [Request("short", short, seed=1, max_tokens=24), Request("long", long, seed=2, max_tokens=6)]  # noqa: E731
    runner = RecordingRunner(tiny_runner)
    together = {g.id: g.tokens for g in BatchDecoder(runner, STOPS, GREEDY, streams=2, prefill_tokens=8).run(requests())}
    assert all(sum(len(chunk) for chunk in feed) <= 8 for feed in runner.prefills)
    assert sum(len(chunk) for feed in runner.prefills for chunk in feed) == len(short) - 1 + len(long) - 1
    assert len(runner.prefills) > len(long) // 8
    assert len(runner.feeds) + len(runner.prefills) - runner.calls >= len(long) // 8  # chunks shared forwards with decode steps
    for request in requests():
        assert decode(tiny_runner, [request])[request.id].tokens == together[request.id]


def test_newcomers_prefill_together_once_their_shared_prefix_is_cached(tiny_runner, tokenizer):
    """The first prompt computes the shared prefix alone; the others then prefill only their own tails, in one forward."""
    shared = tokenizer.encode("You extract invoices. Reply with compact JSON and nothing else. " * 6)
    prompts = [shared + tokenizer.encode(f" Invoice {k}: total {k}00 EUR.") for k in range(3)]
    runner = RecordingRunner(tiny_runner)
    decoder = BatchDecoder(runner, STOPS, GREEDY, streams=3)
    out = {g.id: g.tokens for g in decoder.run([Request(str(k), p, seed=k, max_tokens=6) for k, p in enumerate(prompts)])}
    first, second, *rest = runner.prefills
    assert first == [prompts[0][:-1]]
    tails = [prompts[k][shared_prefix(cacheable(prompts[0]), cacheable(prompts[k])) : -1] for k in (1, 2)]
    assert len(shared) > 64 and second == tails and not rest
    assert decoder.prefixes.reused_tokens >= 2 * (len(shared) - 1)
    for k, prompt in enumerate(prompts):
        assert decode(tiny_runner, [Request(str(k), prompt, seed=k, max_tokens=6)])[str(k)].tokens == out[str(k)]


def test_unrelated_newcomers_prefill_in_one_forward(tiny_runner, tokenizer):
    prompts = [tokenizer.encode(text) for text in ("Invoice 7: total 700 EUR.", "Receipt from the bakery, 3 items.", "Hello there, world.")]
    runner = RecordingRunner(tiny_runner)
    list(BatchDecoder(runner, STOPS, GREEDY, streams=3).run([Request(str(k), p, max_tokens=4) for k, p in enumerate(prompts)]))
    assert runner.prefills[0] == [p[:-1] for p in prompts] and len(runner.prefills) == 1


def test_the_cache_keeps_what_the_runner_can_spare_and_never_grows_it(tiny_runner, tokenizer):
    """A row's prompt comes back after a shard's other rows (a repair): the cache holds more than ``KEEP`` prompts
    while the runner's store has room, and gives the oldest up rather than grow it."""
    decoder = BatchDecoder(tiny_runner, STOPS, GREEDY, streams=1)
    run = lambda texts: list(decoder.run([Request(t, tokenizer.encode(t), max_tokens=2) for t in texts]))  # noqa: E731
    run(["Hello."])
    slots = tiny_runner.store.slots
    receipts = [f"Receipt {k} from shop number {k * 7}, paid in cash, thank you." for k in range(slots)]
    run(receipts)
    assert KEEP < len(decoder.prefixes.entries) < slots
    again = receipts[-KEEP - 2]  # older than the last KEEP prompts
    reused = decoder.prefixes.reused_tokens
    run([again])
    assert decoder.prefixes.reused_tokens - reused == len(tokenizer.encode(again)) - 1
    run([f"Invoice {k} for {k * 3} apples." for k in range(2 * slots)])
    assert tiny_runner.store.slots == slots and len(decoder.prefixes.entries) > KEEP


def test_requests_added_first_take_streams_before_those_waiting(tiny_runner, tokenizer):
    decoder = BatchDecoder(tiny_runner, STOPS, GREEDY, streams=1)
    for name, first in (("a", False), ("b", False), ("c", True), ("d", True)):
        decoder.add(Request(name, tokenizer.encode(f"Note {name}."), max_tokens=2), first)
    done = [g.id for g in decoder.run([Request("e", tokenizer.encode("Note e."), max_tokens=2)])]
    assert done == ["c", "d", "a", "b", "e"]
