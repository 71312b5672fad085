"""The llguidance ``Constraint`` with the real SmolLM2 tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import BaseModel

from tests.helpers import SPEC, STOP, VOCAB, allowed_mask, decode, Recorder
from tests.helpers import instance_accepted as _accepted
from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.constraint import Constraint, GrammarError

CONTROL = range(0, 17)  # SmolLM2's special tokens

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def instance_accepted(constraint, tokenizer, data) -> bool:
    return _accepted(constraint, tokenizer, data, separators=(",", ":"))  # the grammars here are compact


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def walk(constraint: Constraint, tokens: list[int]) -> None:
    """Commit ``tokens`` one by one, checking each is allowed and the stop is not, until the end."""
    for i, token in enumerate(tokens):
        mask = allowed_mask(constraint)
        assert mask[token], f"token {i} ({token}) was masked"
        assert not mask[STOP], f"stop allowed before the value was complete (at token {i})"
        constraint.commit(token)
    assert constraint.error() is None


def assert_only_stop(constraint: Constraint) -> None:
    mask = allowed_mask(constraint)
    assert mask[STOP] and int(mask.sum()) == 1


@pytest.fixture(scope="module")
def person(tokenizer):
    return Constraint.json_schema(PERSON, tokenizer, stop_token=STOP)


def test_json_schema_walk(person, tokenizer):
    c = person.clone()
    walk(c, encode(tokenizer, '{"name":"Ada Lovelace","age":36,"tags":["math","poet"]}'))
    assert_only_stop(c)
    assert c.is_complete
    c.commit(STOP)
    assert c.error() is None


def test_json_schema_rejects_what_the_schema_forbids(person, tokenizer):
    assert not instance_accepted(person, tokenizer, {"name": "Ada", "age": 3.5, "tags": []})
    assert not instance_accepted(person, tokenizer, {"name": "Ada", "age": 3})  # tags required
    assert not instance_accepted(person, tokenizer, {"name": "Ada", "age": 3, "tags": [], "x": 1})
    assert instance_accepted(person, tokenizer, {"name": "Ada", "age": 3, "tags": []})


def test_lark_walk(tokenizer):
    grammar = 'start: "add(" NUM "," NUM ")"\nNUM: /[0-9]+/\n'
    c = Constraint.lark(grammar, tokenizer, stop_token=STOP)
    tokens = encode(tokenizer, "add(12,345)")
    walk(c, tokens)
    assert_only_stop(c)
    c.reset()
    assert not allowed_mask(c)[encode(tokenizer, "sub")[0]]


def test_regex_walk(tokenizer):
    c = Constraint.regex(r"[a-z]+@[a-z]+\.com", tokenizer, stop_token=STOP)
    tokens = encode(tokenizer, "ada@example.com")
    walk(c, tokens)
    assert_only_stop(c)
    # A wrong character is masked mid-walk.
    c.reset()
    c.commit(encode(tokenizer, "ada")[0])
    assert not allowed_mask(c)[encode(tokenizer, "!")[0]]


def test_reset_rearms(person, tokenizer):
    c = person.clone()
    initial = allowed_mask(c)
    for token in encode(tokenizer, '{"name":"Bo'):
        c.commit(token)
    assert not torch.equal(allowed_mask(c), initial)
    c.reset()
    assert torch.equal(allowed_mask(c), initial)
    walk(c, encode(tokenizer, '{"name":"Bo","age":1,"tags":[]}'))
    assert_only_stop(c)


def test_control_tokens_never_allowed_inside_a_string(tokenizer):
    c = Constraint.json_schema({"type": "string"}, tokenizer, stop_token=STOP)
    pieces = tokenizer('"see <|im_end|> and <|im_start|>"', add_special_tokens=False, split_special_tokens=True).input_ids
    assert STOP not in pieces and 1 not in pieces  # the text stays text
    for i, token in enumerate(pieces):
        mask = allowed_mask(c)
        assert not mask[list(CONTROL)].any(), f"a control token was allowed at position {i}"
        assert mask[token]
        c.commit(token)
    assert_only_stop(c)
    # Without split_special_tokens the same text holds the control token, which the mask refuses.
    c.reset()
    joined = tokenizer('"<|im_end|>"', add_special_tokens=False).input_ids
    assert STOP in joined
    assert c.valid_prefix_len(joined) == joined.index(STOP)


def test_padded_vocab_ids_always_masked(tokenizer):
    width = VOCAB + 8
    c = Constraint.json_schema({"type": "string", "maxLength": 3}, tokenizer, vocab_size=width, stop_token=STOP)
    for token in encode(tokenizer, '"abc"'):
        row = torch.zeros(width)
        row[VOCAB:] = 1e9
        forced = c.process(row, [])
        if forced is None:
            assert torch.isinf(row[VOCAB:]).all() and (row[VOCAB:] < 0).all()
            assert torch.isfinite(row[token])
        else:
            assert forced == token
        c.commit(token)
    assert c.process(torch.zeros(width), []) == STOP  # the completed grammar names the stop token alone
    assert not allowed_mask(c, width)[VOCAB:].any()
    # A constraint sized to the tokenizer also masks the tail of a wider row.
    narrow = Constraint.json_schema({"type": "string"}, tokenizer, stop_token=STOP)
    row = torch.zeros(width)
    assert narrow.process(row, []) is None
    assert torch.isinf(row[VOCAB:]).all() and torch.isfinite(row).any()


def test_padded_vocab_end_to_end(tokenizer, padded_runner):
    c = Constraint.json_schema({"type": "string", "maxLength": 6}, tokenizer, vocab_size=padded_runner.vocab_size, stop_token=STOP)
    gen = decode(padded_runner, [Request("p", encode(tokenizer, "say something"), c.clone(), max_tokens=12)])["p"]
    assert gen.finish_reason == "stop", gen
    assert all(t < VOCAB for t in gen.tokens)
    assert isinstance(json.loads(tokenizer.decode(gen.tokens)), str)


@pytest.mark.parametrize(
    "kind, text, diagnostic",
    [
        ("json", '{"type": "foo"}', "Invalid type"),
        ("json", "{not json", "not valid JSON"),
        ("lark", "start: foo\n", "unknown name"),
        ("regex", "a(b", "unclosed group"),
    ],
)
def test_invalid_grammar_raises_with_name_and_diagnostic(tokenizer, tmp_path, kind, text, diagnostic):
    """A file (a ``Path``; a JSON schema's path may be a ``str`` too) names itself in the error."""
    path = tmp_path / f"bad.{kind}"
    path.write_text(text)
    factory = {"json": Constraint.json_schema, "lark": Constraint.lark, "regex": Constraint.regex}[kind]
    with pytest.raises(GrammarError) as info:
        factory(str(path) if kind == "json" else path, tokenizer)
    assert str(path) in str(info.value)
    assert diagnostic in str(info.value)


def test_a_str_is_the_grammar_itself_never_a_path_guessed_from_its_length(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "yes").write_text('start: "no"')
    assert Constraint.regex("yes", tokenizer, stop_token=STOP).name == "<inline>"
    assert Constraint.lark(tmp_path / "yes", tokenizer, stop_token=STOP).name == str(tmp_path / "yes")


def test_invalid_inline_grammar_names_inline(tokenizer):
    with pytest.raises(GrammarError, match="<inline>"):
        Constraint.lark("start: foo\n", tokenizer)


class Item(BaseModel):
    name: str
    qty: int


def test_schema_from_pydantic_model(tokenizer):
    c = Constraint.json_schema(Item, tokenizer, stop_token=STOP)
    assert c.name == "Item"
    assert instance_accepted(c, tokenizer, {"name": "bolt", "qty": 12})
    assert not instance_accepted(c, tokenizer, {"name": "bolt", "qty": "12"})
    assert not instance_accepted(c, tokenizer, {"name": "bolt"})


def test_schema_from_json_file(tokenizer, tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON))
    for source in (str(path), path):
        c = Constraint.json_schema(source, tokenizer, stop_token=STOP)
        assert c.name == str(path)
        assert instance_accepted(c, tokenizer, {"name": "x", "age": 1, "tags": ["a"]})
        assert not instance_accepted(c, tokenizer, {"name": "x", "age": "1", "tags": ["a"]})


def test_clone_independence(person, tokenizer):
    base = person.clone()
    initial = allowed_mask(base)
    twin = base.clone()
    for token in encode(tokenizer, '{"name":"'):
        twin.commit(token)
    assert torch.equal(allowed_mask(base), initial)
    assert not torch.equal(allowed_mask(twin), initial)
    # And the other way round: advancing the original leaves the clone alone.
    twin_mask = allowed_mask(twin)
    for token in encode(tokenizer, '{"name":"x","age":4'):
        base.commit(token)
    assert torch.equal(allowed_mask(twin), twin_mask)


def test_lookaheads_are_pure(person, tokenizer):
    c = person.clone()
    prefix = encode(tokenizer, '{"name":"Ada","age":36')
    for token in prefix[:-1]:
        c.commit(token)
    mask = allowed_mask(c)
    forced = c.forced_tokens()
    probe = prefix[-1:] + encode(tokenizer, ',"tags":[]}') + [STOP]
    valid = c.valid_prefix_len(probe)
    assert valid == len(probe)  # the stop token completes a finished value
    assert c.valid_prefix_len(encode(tokenizer, "!!!")) == 0
    for _ in range(3):
        assert c.forced_tokens() == forced
        assert c.valid_prefix_len(probe) == valid
        assert torch.equal(allowed_mask(c), mask)
    walk(c, probe[:-1])
    assert_only_stop(c)


def test_forced_tokens_follow_the_schema(person, tokenizer):
    c = person.clone()
    forced = c.forced_tokens()
    assert forced and tokenizer.decode(forced) == '{"name'[: len(tokenizer.decode(forced))]
    for token in encode(tokenizer, '{"name":"Ada"'):
        c.commit(token)
    assert tokenizer.decode(c.forced_tokens()).startswith(',"age')


def test_matcher_failure_forces_the_stop(person, tokenizer):
    c = person.clone()
    c.commit(encode(tokenizer, "{")[0])
    assert c.error() is None
    bad = encode(tokenizer, "hello")[0]
    assert not allowed_mask(c)[bad]
    c.commit(bad)  # the sampler never does this; a broken caller might
    assert c.error() is not None and c.is_error
    assert_only_stop(c)
    assert c.forced_tokens() == [] and c.valid_prefix_len([STOP]) == 0
    c.commit(STOP)  # committing after the failure neither raises nor recovers
    assert c.error() is not None
    c.reset()  # reset re-arms a failed matcher
    assert c.error() is None and not allowed_mask(c)[STOP]
    walk(c, encode(tokenizer, '{"name":"x","age":1,"tags":[]}'))
    assert_only_stop(c)


def test_reset_after_completion(person, tokenizer):
    c = person.clone()
    value = encode(tokenizer, '{"name":"x","age":1,"tags":[]}')
    walk(c, value)
    c.commit(STOP)
    c.reset()
    walk(c, value)
    assert_only_stop(c)


class FailAt(Recorder):
    """Commits a grammar-invalid token to the inner constraint at commit ``n``."""

    def __init__(self, inner, n, bad):
        super().__init__(inner)
        self.n, self.bad = n, bad

    def commit(self, token):
        self.commits.append(int(token))
        self.inner.commit(self.bad if len(self.commits) == self.n else token)


@pytest.mark.parametrize("spec", [None, SPEC])
def test_matcher_failure_mid_decode_ends_the_stream(person, tokenizer, tiny_runner, spec):
    processor = FailAt(person.clone(), 3, bad=encode(tokenizer, "hello")[0])
    gen = decode(tiny_runner, [Request("f", encode(tokenizer, "a b c"), processor, max_tokens=40)], spec=spec)["f"]
    assert gen.finish_reason == "error"
    assert gen.error and gen.error == processor.inner.error()
    assert len(gen.tokens) <= 3


def test_one_processor_reused_sequentially_after_a_failure(person, tokenizer, tiny_runner):
    # streams=1 may reuse one processor object across requests: the decoder
    # resets it per request, and a failed first request must not poison the next.
    processor = FailAt(person.clone(), 2, bad=encode(tokenizer, "hello")[0])
    prompt = encode(tokenizer, "a b c")
    gens = decode(tiny_runner, [Request("bad", prompt, processor, max_tokens=30), Request("ok", prompt, processor, max_tokens=30)])
    assert gens["bad"].finish_reason == "error"
    fresh = decode(tiny_runner, [Request("ok", prompt, person.clone(), max_tokens=30)])["ok"]
    assert gens["ok"].finish_reason == fresh.finish_reason != "error"
    assert gens["ok"].tokens == fresh.tokens


def test_allows_reads_the_mask_that_process_applies(tokenizer):
    """The conformance walk reads single bits (``allows``); they must be the mask ``process`` applies."""
    c = Constraint.json_schema(PERSON, tokenizer, stop_token=STOP)
    sample = sorted(set(range(0, VOCAB, 97)) | {STOP})
    for token in encode(tokenizer, '{"name":"Ada","age":3,"tags":[]}') + [None]:
        mask = allowed_mask(c)
        probe = sorted(set(sample) | set(torch.nonzero(mask).flatten().tolist()))
        assert [c.allows(t) for t in probe] == [bool(mask[t]) for t in probe]
        if token is not None:
            c.commit(token)
    assert c.allows(STOP)


@pytest.mark.parametrize("width", [70, 96, 100])
def test_apply_bitmask_matches_the_bits(width):
    """Every column keeps its logit exactly when its bit is set; columns past the words are masked."""
    import numpy as np

    from fucina_jobs.decoding.constraint import apply_bitmask

    rng = np.random.default_rng(width)
    bitmask = rng.integers(-(2**31), 2**31, size=(3, 3), dtype=np.int64).astype(np.int32)
    bitmask[1] = -1  # all allowed
    bitmask[2, 1] = 0  # a word with nothing allowed
    logits = torch.randn(3, width, dtype=torch.float32)
    masked = logits.clone()
    apply_bitmask(masked, bitmask)
    for row in range(3):
        for col in range(width):
            bit = col < 96 and (int(bitmask[row, col // 32]) >> (col % 32)) & 1
            assert masked[row, col] == (logits[row, col] if bit else float("-inf"))


def test_matcher_failure_with_a_stop_token_in_a_words_top_bit(tokenizer):
    c = Constraint.json_schema({"type": "string"}, tokenizer, stop_token=31)
    c.commit(encode(tokenizer, "hello")[0])  # not a string's opening quote: the matcher fails
    assert c.is_error
    assert torch.nonzero(allowed_mask(c)).flatten().tolist() == [31]


@pytest.mark.parametrize("case", ["few words", "most words", "nothing", "everything", "bits past the row"])
def test_one_row_is_masked_alike_by_the_kernel_and_by_numpy(case):
    """The sampler's row takes the C++ kernel, a batch of rows numpy's unpack: exactly the allowed logits
    stay either way, and bits past the row's width are ignored."""
    import numpy as np

    from fucina_jobs import native
    from fucina_jobs.decoding.constraint import apply_bitmask

    assert native.library() is not None, "the CPU kernels did not build: is g++ installed?"
    rng = np.random.default_rng(len(case))
    words, width = 400, 400 * 32 - 7
    bitmask = np.zeros(words, np.int32)
    if case in ("few words", "most words"):
        chosen = rng.choice(words, 6 if case == "few words" else 390, replace=False)
        bitmask[chosen] = rng.integers(1, 2**32, size=len(chosen), dtype=np.int64).astype(np.uint32).view(np.int32)
    elif case == "everything":
        bitmask[:] = -1
    elif case == "bits past the row":
        bitmask[-1] = -1  # its top 7 bits lie past the row
    logits = torch.randn(width)
    by_kernel, by_numpy = logits.clone(), logits.clone()[None]
    apply_bitmask(by_kernel, bitmask)
    apply_bitmask(by_numpy, bitmask[None])
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:width].astype(bool)
    assert torch.equal(by_kernel, torch.where(torch.from_numpy(bits), logits, float("-inf")))
    assert torch.equal(by_kernel, by_numpy[0])


def test_without_a_compiler_one_row_is_masked_by_numpy(monkeypatch):
    import numpy as np

    from fucina_jobs import native
    from fucina_jobs.decoding import constraint

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    native.library.cache_clear()
    constraint._apply_bitmask_kernel.cache_clear()
    try:
        assert constraint._apply_bitmask_kernel() is None
        bitmask = np.zeros(4, np.int32)
        bitmask[2] = 0b1011
        logits = torch.randn(100)
        masked = logits.clone()
        constraint.apply_bitmask(masked, bitmask)
        assert torch.isfinite(masked).nonzero().flatten().tolist() == [64, 65, 67]
        assert torch.equal(masked[[64, 65, 67]], logits[[64, 65, 67]])
    finally:
        native.library.cache_clear()
        constraint._apply_bitmask_kernel.cache_clear()


@pytest.mark.parametrize("bit", [0, 5, 31, 32 * 7 + 31, 32 * 9])
def test_only_allowed_names_a_lone_bit(bit):
    import numpy as np

    from fucina_jobs.decoding.constraint import only_allowed

    bitmask = np.zeros(10, np.int32)
    bitmask.view(np.uint32)[bit >> 5] = np.uint32(1 << (bit & 31))
    assert only_allowed(bitmask) == bit
    other = bitmask.copy()
    other.view(np.uint32)[(bit >> 5) ^ 1] |= np.uint32(1)  # a second word
    assert only_allowed(other) is None
    twin = bitmask.copy()
    twin.view(np.uint32)[bit >> 5] |= np.uint32(1 << ((bit + 1) & 31))  # a second bit in the same word
    assert only_allowed(twin) is None
    assert only_allowed(np.zeros(10, np.int32)) is None


# -- rows processed ahead (the batch decoder's path) --------------------------------


def processed_in_turn(constraint: Constraint, rows: torch.Tensor, path: list[int]) -> list[int | None]:
    """What ``process`` returns for each row with ``path[:i]`` committed before row ``i``, on a copy."""
    twin = constraint.clone()
    twin._matcher = constraint._matcher.deep_copy()  # the same state (a clone starts from its source's state too)
    out = []
    for i, row in enumerate(rows):
        out.append(twin.process(row, []))
        if i < len(path):
            twin.commit(path[i])
    return out


def process_paths(jobs):
    """``(constraint, rows, history, path)`` jobs through ``look_paths`` and its ``process``, as a batch step does."""
    looked = Constraint.look_paths([(c, history, path, len(rows)) for c, rows, history, path in jobs])
    return looked.process([rows for _, rows, _, _ in jobs])


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
def test_rows_processed_ahead_are_processed_as_in_turn(person, tokenizer, kernel, monkeypatch):
    """One ``look_paths`` call for several constraints in different states: every row it processes is
    masked, or its token named, as ``process`` would once the path before it was committed; it leaves the
    constraints' states alone, and stops where a path leaves the grammar or ends it. The rows are masked
    in one C++ call, or without a compiler one by one."""
    from fucina_jobs.decoding import constraint

    if not kernel:
        monkeypatch.setattr(constraint, "_apply_bitmasks_kernel", lambda: None)
    value = encode(tokenizer, '{"name":"Ada","age":36,"tags":["x"]}')
    cases = [
        ([], value[:5]),  # a fresh matcher, forced rows first
        (value[:3], value[3:9]),  # inside a string, then the key after it
        (value[:10], value[10:] + [STOP, 5]),  # runs to the end of the grammar: the rows after the stop are left
        (value[:4], value[4:6] + encode(tokenizer, "!!!") + value[6:8]),  # an invalid token: the rows after it are left
        (value[:6], []),  # no drafts: one row
        (value, []),  # complete: only the stop
    ]
    torch.manual_seed(0)
    constraints, jobs, expected = [], [], []
    for done, path in cases:
        c = person.clone()
        for token in done:
            c.commit(token)
        rows = torch.randn(len(path) + 1, VOCAB)
        reference = rows.clone()
        expected.append((processed_in_turn(c, reference, path), reference))
        constraints.append((c, c.forced_tokens(), c.valid_prefix_len(value)))
        jobs.append((c, rows, [], path))
    results = process_paths(jobs)
    for (c, rows, _, path), got, (want, reference), (_, forced, valid) in zip(jobs, results, expected, constraints):
        assert 1 <= len(got) <= len(rows) and got == want[: len(got)]
        for i, result in enumerate(got):
            if result is None:  # a masked row: bit for bit what process left
                assert torch.equal(rows[i], reference[i])
        assert c.forced_tokens() == forced and c.valid_prefix_len(value) == valid  # the state did not move
    assert [len(got) for got in results] == [6, 7, len(value) - 10 + 1, 3, 1, 1]
    assert sum(r is not None for got in results for r in got) > 0 and sum(r is None for got in results for r in got) > 0


def test_a_failed_matcher_is_left_to_process(person, tokenizer):
    c = person.clone()
    c.commit(encode(tokenizer, "{")[0])
    c.commit(encode(tokenizer, "hello")[0])
    assert c.is_error
    assert process_paths([(c, torch.zeros(2, VOCAB), [], [5])]) == [[]]
