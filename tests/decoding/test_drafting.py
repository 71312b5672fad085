"""Draft sources: prompt lookup, the cascade, the cost gate and ConstrainedSource."""

from __future__ import annotations

from dataclasses import replace
import pytest

from tests.helpers import GREEDY, SPEC, STOP, decode, repetitive_prompt
from fucina_jobs.decoding import batch
from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.constrained_source import ConstrainedSource
from fucina_jobs.decoding.drafting import Cascade, CostGate, DocumentLookup, Draft, PromptLookup, document_spans
from fucina_jobs.decoding.processor import LogitProcessor, TokenBias


# -- PromptLookup -----------------------------------------------------------------


def test_prompt_lookup_continues_the_match():
    draft = PromptLookup(max_ngram=4, min_ngram=2).propose([1, 2, 3, 4, 9, 9, 1, 2, 3], 3)
    assert draft.tokens == [4, 9, 9] and draft.source == "ngram" and draft.certain == 0


def test_prompt_lookup_takes_the_latest_match():
    assert PromptLookup(max_ngram=4, min_ngram=2).propose([1, 2, 5, 1, 2, 6, 1, 2], 2).tokens == [6, 1]


def test_prompt_lookup_prefers_the_longest_ngram():
    A, B = 40, 50
    history = [7, 1, 2, A, 8, 1, 2, B, 7, 1, 2]
    assert PromptLookup(max_ngram=3, min_ngram=2).propose(history, 1).tokens == [A]
    assert PromptLookup(max_ngram=2, min_ngram=2).propose(history, 1).tokens == [B]


def test_prompt_lookup_runs_to_the_end_of_history():
    # The continuation may overlap the suffix itself; it never reads past the history.
    assert PromptLookup(max_ngram=4, min_ngram=2).propose([5, 6, 5, 6], 8).tokens == [5, 6]


@pytest.mark.parametrize("history", [[], [1], [1, 2, 3, 4], [1, 2, 3, 1]])
def test_prompt_lookup_empty_without_a_match(history):
    assert PromptLookup(max_ngram=4, min_ngram=2).propose(history, 4).tokens == []


def test_prompt_lookup_equals_a_plain_search():
    """The byte search finds what a plain scan finds, also where a hit straddles two tokens' bytes."""
    import random

    def reference(history, n, max_len):
        starts = [i for i in range(len(history) - n) if history[i : i + n] == history[-n:]]
        return history[starts[-1] + n : starts[-1] + n + max_len] if starts else None

    rng = random.Random(0)
    for _ in range(500):
        # Few distinct small ids (many matches) and large ids whose bytes hold those small ones.
        history = [rng.choice([0, 1, 2, 256, 65536, 16777216, 257]) for _ in range(rng.randint(0, 40))]
        for n in range(1, 5):
            want = reference(history, n, 3) if len(history) > n else None
            got = PromptLookup(max_ngram=n, min_ngram=n).propose(history, 3).tokens
            assert got == (want or []), (history, n)


def test_prompt_lookup_min_ngram():
    history = [1, 2, 3, 1]
    assert PromptLookup(max_ngram=4, min_ngram=1).propose(history, 2).tokens == [2, 3]
    assert PromptLookup(max_ngram=4, min_ngram=2).propose(history, 2).tokens == []


# -- DocumentLookup ---------------------------------------------------------------


def test_document_lookup_continues_the_value_from_its_start():
    lookup = DocumentLookup([[5, 6, 7, 8], [6, 7, 8], [9, 6, 1]])
    assert lookup.propose([1, 2, 5], 8).tokens == [6, 7, 8]  # one token of the value is enough
    assert lookup.propose([1, 5, 6], 2).tokens == [7, 8] and lookup.propose([1, 5, 6], 2).source == "document"
    # [9, 6] begins a span: the value so far is the whole match, not its last token [6].
    assert lookup.propose([3, 9, 6], 4).tokens == [1]


def test_document_lookup_drafts_what_the_places_agree_on():
    lookup = DocumentLookup([[5, 6, 7, 1], [5, 6, 7, 2], [5, 6]])
    assert lookup.propose([5], 8).tokens == [6]  # one place's line ends after 6: the value may end there
    assert DocumentLookup([[5, 6, 7, 1], [5, 6, 7, 2]]).propose([5], 8).tokens == [6, 7]
    assert DocumentLookup([[5, 6, 7, 1], [5, 9]]).propose([5], 8).tokens == []


@pytest.mark.parametrize("history", [[], [4], [1, 2, 3], [6, 7, 8, 9]])
def test_document_lookup_empty_without_a_match(history):
    assert DocumentLookup([[5, 6], [6, 7, 8]]).propose(history, 4).tokens == []


def test_document_spans_start_at_words_and_end_at_lines(tokenizer):
    text = "Invoice No.:   BWS-2025-0147\nBill To: Halden Robotics LLC"
    encode = lambda texts: tokenizer(texts, add_special_tokens=False).input_ids  # noqa: E731
    spans = [tokenizer.decode(s) for s in document_spans(text, encode)]
    assert spans[:4] == ["Invoice No.:   BWS-2025-0147", "No.:   BWS-2025-0147", "BWS-2025-0147", "2025-0147"]
    assert spans[-3:] == ["Halden Robotics LLC", "Robotics LLC", "LLC"]
    # The document writes " B", "WS"; a value that copies it starts "B", "WS", and its draft follows from there.
    value = tokenizer.encode('{"invoice_number":"B', add_special_tokens=False)
    draft = DocumentLookup(document_spans(text, encode)).propose(value, 8)
    assert tokenizer.decode(draft.tokens) == "WS-2025-0"


# -- fakes ------------------------------------------------------------------------


class FakeSource:
    def __init__(self, tokens, name="fake"):
        self.tokens, self.name = list(tokens), name
        self.proposals: list[tuple[list[int], int]] = []
        self.feedbacks: list[int] = []
        self.truncations: list[int] = []

    def propose(self, history, max_len):
        self.proposals.append((list(history), max_len))
        return Draft(self.tokens[:max_len], self.name if self.tokens else "")

    def feedback(self, accepted):
        self.feedbacks.append(accepted)

    def truncate_pending(self, n):
        self.truncations.append(n)


class FakeStructure(LogitProcessor):
    has_structure = True

    def __init__(self, forced=(), valid=None, spelled=()):
        self.forced, self.valid, self.spelled = list(forced), valid, list(spelled)
        self.probes: list[list[int]] = []

    def forced_tokens(self):
        return list(self.forced)

    def likely_tokens(self):
        return list(self.forced) + list(self.spelled)

    def valid_prefix_len(self, tokens):
        self.probes.append(list(tokens))
        return len(tokens) if self.valid is None else min(self.valid, len(tokens))


# -- Cascade -----------------------------------------------------------------------


def test_cascade_asks_in_order_and_falls_through():
    empty, second = FakeSource([]), FakeSource([3, 4], "second")
    cascade = Cascade([empty, second])
    draft = cascade.propose([1, 2], 5)
    assert draft.tokens == [3, 4] and draft.source == "second"
    assert len(empty.proposals) == 1 and len(second.proposals) == 1
    cascade.feedback(1)
    assert second.feedbacks == [1] and empty.feedbacks == []


def test_cascade_cools_down_a_bad_source():
    bad, backup = FakeSource([1, 2, 3, 4], "bad"), FakeSource([9], "backup")
    cascade = Cascade([bad, backup], window=4, min_acceptance=0.5, cooldown=3)
    for _ in range(4):
        assert cascade.propose([0], 4).source == "bad"
        cascade.feedback(1)  # 1 of 4: 25% < 50%
    assert cascade.cooldowns[0] == 3
    for _ in range(3):
        assert cascade.propose([0], 4).source == "backup"
        cascade.feedback(1)
    assert len(bad.proposals) == 4
    assert cascade.propose([0], 4).source == "bad"  # probed again after the cooldown
    assert len(bad.proposals) == 5 and len(cascade.recent[0]) == 0


def test_cascade_keeps_a_good_source():
    good = FakeSource([1, 2, 3, 4])
    cascade = Cascade([good], window=4, min_acceptance=0.5, cooldown=3)
    for _ in range(12):
        assert cascade.propose([0], 4).tokens
        cascade.feedback(3)
    assert cascade.cooldowns == [0]


def test_cascade_counts_only_tokens_really_tried():
    source = FakeSource([1, 2, 3, 4])
    cascade = Cascade([source], window=4, min_acceptance=0.5, cooldown=3)
    for _ in range(8):
        cascade.propose([0], 4)
        cascade.truncate_pending(1)
        cascade.feedback(1)  # 1 of 1 tried: a perfect source, not 1 of 4
    assert cascade.cooldowns == [0]
    assert source.truncations == [1] * 8
    assert list(cascade.recent[0]) == [(1, 1)] * 4


def test_cascade_ignores_feedback_without_a_live_draft():
    source = FakeSource([])
    cascade = Cascade([source], window=1)
    assert cascade.propose([0], 4).tokens == []
    cascade.feedback(0)
    cascade.truncate_pending(0)
    assert source.feedbacks == [] and source.truncations == [] and cascade.cooldowns == [0]


# -- CostGate ----------------------------------------------------------------------


def test_cost_gate_mutes_and_reopens():
    gate = CostGate(min_tokens_per_forward=1.5, window=4, probe_every=3)
    for _ in range(3):
        gate.record(1)
        assert gate.open
    gate.record(1)
    assert not gate.open
    for _ in range(3):
        assert not gate.open
        gate.tick_muted()
    assert gate.open
    assert len(gate.recent) == 0  # a fresh window after the probe


def test_cost_gate_stays_open_when_speculation_pays():
    gate = CostGate(min_tokens_per_forward=1.5, window=4, probe_every=3)
    for committed in [1, 2, 1, 3, 2, 1, 2, 2]:
        gate.record(committed)
        assert gate.open


class WrongDrafts:
    """Always drafts a token the processor bans: every draft is rejected."""

    def __init__(self, token):
        self.token = token

    def propose(self, history, max_len):
        return Draft([self.token] * max_len, "wrong")

    def feedback(self, accepted):
        assert accepted == 0

    def truncate_pending(self, n):
        pass


def test_a_useless_drafter_is_muted_and_changes_nothing(tokenizer, tiny_runner, monkeypatch):
    banned = 49151
    prompt = repetitive_prompt(tokenizer)
    request = lambda: Request("w", prompt, TokenBias.banned([banned]), max_tokens=40)  # noqa: E731
    plain = decode(tiny_runner, [request()])["w"]
    monkeypatch.setattr(batch, "_drafter", lambda spec, processor, document: WrongDrafts(banned))
    spec = decode(tiny_runner, [request()], spec=replace(SPEC, max_draft=2))["w"]
    assert spec.tokens == plain.tokens
    assert spec.stats.drafted["wrong"] > 0 and spec.stats.accepted["wrong"] == 0
    assert spec.stats.muted_steps > 0
    assert spec.stats.forwards == plain.stats.forwards == 40


class Scripted(FakeSource):
    def __init__(self, tokens, certain):
        super().__init__(tokens, "scripted")
        self.certain = certain

    def propose(self, history, max_len):
        draft = super().propose(history, max_len)
        draft.certain = self.certain
        return draft


@pytest.mark.parametrize("certain", [0, 3])
def test_stream_cuts_drafts_at_the_stop_token(monkeypatch, certain):
    source = Scripted([5, 6, STOP, 7], certain)
    monkeypatch.setattr(batch, "_drafter", lambda spec, processor, document: source)
    stream = batch.Stream(Request("x", [1, 2, 3], None, max_tokens=20), GREEDY, SPEC)
    assert stream.plan(frozenset({STOP})) == [3, 5, 6]
    assert stream.draft.tokens == [5, 6] and stream.draft.certain == min(certain, 2)
    assert source.truncations == [2]


def test_stream_draft_room_respects_the_budget(monkeypatch):
    source = FakeSource(range(10, 30))
    monkeypatch.setattr(batch, "_drafter", lambda spec, processor, document: source)
    stream = batch.Stream(Request("x", [1, 2, 3], None, max_tokens=4), GREEDY, replace(SPEC, max_draft=8))
    assert stream.plan(frozenset({STOP})) == [3, 10, 11, 12]  # 3 drafts + the bonus = the 4-token budget
    assert source.proposals[-1][1] == 3


# -- ConstrainedSource ---------------------------------------------------------------


def test_forced_span_precedes_the_inner_draft():
    inner = FakeSource([7, 8, 9], "ngram")
    source = ConstrainedSource(inner, FakeStructure(forced=[5, 6]))
    draft = source.propose([1, 2], 8)
    assert draft.tokens == [5, 6, 7, 8, 9] and draft.certain == 2 and draft.source == "ngram"
    assert inner.proposals == [([1, 2, 5, 6], 6)]  # the inner source continues after the span


def test_forced_span_alone_when_it_fills_the_room():
    inner = FakeSource([7])
    source = ConstrainedSource(inner, FakeStructure(forced=[5, 6, 7, 8]))
    draft = source.propose([1], 3)
    assert draft.tokens == [5, 6, 7] and draft.certain == 3 and draft.source == "forced"
    assert inner.proposals == []
    source.feedback(3)
    source.truncate_pending(1)
    assert inner.feedbacks == [] and inner.truncations == []


def test_forced_span_without_inner_draft_is_labelled_forced():
    inner = FakeSource([])
    draft = ConstrainedSource(inner, FakeStructure(forced=[5])).propose([1], 4)
    assert draft.tokens == [5] and draft.certain == 1 and draft.source == "forced"


def test_inner_draft_cut_at_the_first_invalid_token():
    inner = FakeSource([7, 8, 9], "ngram")
    processor = FakeStructure(forced=[5], valid=2)
    source = ConstrainedSource(inner, processor)
    draft = source.propose([1], 8)
    assert draft.tokens == [5, 7] and draft.certain == 1
    assert processor.probes == [[5, 7, 8, 9]]
    assert inner.truncations == [1]  # told its pending draft is one token long
    source.feedback(2)
    assert inner.feedbacks == [1]


def test_inner_draft_fully_invalid():
    inner = FakeSource([7, 8], "ngram")
    source = ConstrainedSource(inner, FakeStructure(valid=0))
    draft = source.propose([1], 8)
    assert draft.tokens == [] and draft.certain == 0
    assert inner.truncations == [0]
    source.feedback(0)
    assert inner.feedbacks == []


def test_valid_inner_draft_is_not_truncated():
    inner = FakeSource([7, 8], "ngram")
    source = ConstrainedSource(inner, FakeStructure())
    assert source.propose([1], 8).tokens == [7, 8]
    assert inner.truncations == []
    source.feedback(2)
    assert inner.feedbacks == [2]


def test_truncation_forwarded_only_for_the_inner_part():
    inner = FakeSource([7, 8], "ngram")
    source = ConstrainedSource(inner, FakeStructure(forced=[5, 6]))
    source.propose([1], 8)  # [5, 6 | 7, 8]
    source.truncate_pending(3)  # keeps one inner token
    assert inner.truncations == [1]
    source.truncate_pending(1)  # cuts into the forced span: no inner tokens left
    assert inner.truncations == [1, 0]
    source.feedback(1)
    assert inner.feedbacks == []


def test_feedback_discounts_the_forced_span():
    inner = FakeSource([7, 8, 9], "ngram")
    source = ConstrainedSource(inner, FakeStructure(forced=[5, 6]))
    source.propose([1], 8)
    source.feedback(1)  # rejected inside the forced span (cannot happen with a mask, but must not underflow)
    source.propose([1], 8)
    source.feedback(4)
    source.propose([1], 8)
    source.feedback(5)
    assert inner.feedbacks == [0, 2, 3]


class Continues(FakeSource):
    """Drafts only after a given history end."""

    def __init__(self, after, tokens):
        super().__init__(tokens, "inner")
        self.after = list(after)

    def propose(self, history, max_len):
        self.proposals.append((list(history), max_len))
        ok = list(history[-len(self.after) :]) == self.after
        return Draft(self.tokens[:max_len] if ok else [], self.name if ok else "")


def test_spelled_bytes_lead_when_the_inner_source_has_nothing():
    inner = Continues([1, 5, 30], [7, 8])  # drafts only once the spelled token 30 is in the history
    source = ConstrainedSource(inner, FakeStructure(forced=[5], spelled=[30]))
    draft = source.propose([1], 8)
    assert draft.tokens == [5, 30, 7, 8] and draft.certain == 1 and draft.source == "inner"
    assert inner.proposals == [([1, 5], 7), ([1, 5, 30], 6)]
    source.feedback(3)  # the spelled token and one inner token
    assert inner.feedbacks == [1]


def test_the_inner_source_keeps_its_draft_over_spelled_bytes():
    inner = Continues([1, 5], [7, 8])  # a value's rest: "H" then "ald", where the grammar spells "a"
    source = ConstrainedSource(inner, FakeStructure(forced=[5], spelled=[30]))
    assert source.propose([1], 8).tokens == [5, 7, 8]
    assert len(inner.proposals) == 1


def test_spelled_bytes_alone_are_labelled_forced_and_uncertain():
    draft = ConstrainedSource(FakeSource([]), FakeStructure(spelled=[30, 31])).propose([1], 8)
    assert draft.tokens == [30, 31] and draft.certain == 0 and draft.source == "forced"


def test_constrained_source_over_a_real_constraint(tokenizer):
    from fucina_jobs.decoding.constraint import Constraint

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    c = Constraint.json_schema(schema, tokenizer, stop_token=STOP)
    source = ConstrainedSource(Cascade([PromptLookup(max_ngram=4, min_ngram=2)]), c)
    forced = c.forced_tokens()
    draft = source.propose([], 8)
    assert draft.tokens[: len(forced)] == forced and draft.certain == len(forced) > 0 and draft.source == "forced"
    # The forced bytes go on past llguidance's forced tokens, spelled out, where the value's first token could merge.
    assert tokenizer.decode(forced) == '{"city' and tokenizer.decode(draft.tokens) == '{"city":"'
    assert draft.tokens == c.likely_tokens()
    # Inside the city value the n-gram source copies '", and ...' from the document:
    # '",' continues the JSON, ' and' does not, so the draft is cut right there.
    value = tokenizer.encode('{"city":"Oslo', add_special_tokens=False)
    for token in value:
        c.commit(token)
    history = tokenizer.encode('city "Oslo", and', add_special_tokens=False) + value
    guess = PromptLookup(max_ngram=4, min_ngram=2).propose(history, 8).tokens
    assert tokenizer.decode(guess[:2]) == '", and'
    draft = source.propose(history, 8)
    assert draft.certain == 0 and draft.tokens == guess[:1]
