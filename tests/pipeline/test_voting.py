"""Voting over a row's samples: each field's majority, ties to the earlier sample, agreement as a share of all samples."""

import json
from dataclasses import replace

import pytest

from fucina_jobs.confidence import Confidence
from fucina_jobs.engines import Prompt
from fucina_jobs.config import RuntimeConfig
from fucina_jobs.pipeline.voting import sample_prompts, vote
from tests.helpers import GREEDY

HOT = replace(GREEDY, temperature=0.7)


def output(record, confidence=None, tokens=10):
    text = json.dumps(record) if record is not None else "{not json"
    return {
        "row_id": "r",
        "text": text,
        "finish_reason": "stop",
        "error": None,
        "prompt_tokens": 100,
        "generated_tokens": tokens,
        "confidence": confidence,
    }


def voted(records, valid=lambda text: True, confidences=None):
    outputs = [output(r, (confidences or [None] * len(records))[i], tokens=10 + i) for i, r in enumerate(records)]
    return vote(outputs, records, valid)


def test_each_field_keeps_its_majority_value_and_its_share_of_the_samples():
    result = voted([{"vendor": "A", "total": 10}, {"vendor": "B", "total": 12.0}, {"vendor": "B", "total": 10.0}])
    assert json.loads(result["text"]) == {"vendor": "B", "total": 10}  # 10 and 10.0 are one amount
    assert result["agreement"] == {"vendor": 2 / 3, "total": 2 / 3}
    assert (result["prompt_tokens"], result["generated_tokens"]) == (300, 33)  # the cost of every sample


def test_a_tie_goes_to_the_earlier_sample_and_a_left_out_field_is_a_vote():
    result = voted([{"vendor": "A", "note": "x"}, {"vendor": "B"}, {"vendor": "C"}, {"vendor": "B", "note": "y"}])
    assert json.loads(result["text"]) == {"vendor": "B"}  # two samples left the note out: it stays out
    assert result["agreement"] == {"vendor": 0.5, "note": 0.5}
    assert json.loads(voted([{"vendor": "A"}, {"vendor": "B"}])["text"]) == {"vendor": "A"}  # greedy wins a tie


def test_samples_that_did_not_validate_do_not_vote_but_count_in_the_share():
    result = voted([None, {"vendor": "B"}, {"vendor": "C"}, {"vendor": "C"}])
    assert json.loads(result["text"]) == {"vendor": "C"} and result["agreement"] == {"vendor": 0.5}
    nothing = voted([None, None, None])
    assert nothing["text"] == "{not json" and nothing["agreement"] is None and nothing["generated_tokens"] == 33


def test_token_confidence_is_the_mean_over_the_samples_that_wrote_the_kept_value():
    confidences = [
        Confidence(0.2, {"vendor": 0.2, "total": 0.9}, {"vendor": 0.4, "total": 0.95}),
        Confidence(0.5, {"vendor": 0.5, "total": 0.1}, {"vendor": 0.6, "total": 0.2}),
        Confidence(0.3, {"vendor": 0.3, "total": 0.8}, {"vendor": 0.8, "total": 0.85}),
    ]
    result = voted([{"vendor": "A", "total": 1}, {"vendor": "B", "total": 2}, {"vendor": "B", "total": 1}], confidences=confidences)
    c = result["confidence"]
    assert c.field_mean == pytest.approx({"vendor": 0.7, "total": 0.9}) and c.field_min == {"vendor": 0.3, "total": 0.8}
    assert c.record == pytest.approx(0.7)


def test_a_composed_record_that_does_not_validate_gives_way_to_the_sample_closest_to_it():
    records = [{"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 2, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 2}]
    result = voted(records, valid=lambda text: json.loads(text)["a"] == json.loads(text)["b"])
    assert json.loads(result["text"]) == {"a": 2, "b": 2}
    assert result["agreement"] == {"a": 3 / 5, "b": 3 / 5}


def test_sample_prompts_keep_the_rows_own_first_and_derive_the_others_seeds_from_its_seed():
    prompt = Prompt("inv-001", "text", seed=1234)
    samples = sample_prompts(prompt, 3, HOT)
    assert samples[0] is prompt and samples[0].params is None
    assert [s.params for s in samples[1:]] == [HOT, HOT]
    assert len({s.id for s in samples}) == len({s.seed for s in samples}) == 3
    assert [s.seed for s in sample_prompts(Prompt("inv-001", "text", seed=1234), 3, HOT)] == [s.seed for s in samples]
    assert sample_prompts(prompt, 1, HOT) == [prompt]


def test_a_rows_samples_decode_side_by_side_and_their_prompt_is_computed_once(tiny_model, tokenizer):
    from fucina_jobs.engines import FucinaEngine, encode_chat
    from fucina_jobs.models.loading import LoadedModel

    from tests.helpers import RecordingRunner

    engine = FucinaEngine(LoadedModel(tiny_model, tokenizer, "tiny", tiny_model.device), runtime=RuntimeConfig(streams=3))
    engine.runner = RecordingRunner(engine.runner)
    prompt = Prompt("row", "Invoice 42 from Alder Mills, total 360.", "Extract the invoice.", seed=5, max_tokens=12)
    completions = list(engine.generate(sample_prompts(prompt, 3, replace(GREEDY, temperature=1.5))))  # hot enough for the tiny model
    assert len(completions) == 3 and len({tuple(c.tokens) for c in completions}) > 1  # the hot samples differ
    prompt_tokens = len(encode_chat(tokenizer, prompt.text, prompt.system))
    assert sum(len(chunk) for forward in engine.runner.prefills for chunk in forward) == prompt_tokens - 1  # once, not three times
    assert max(len(rows) for rows in engine.runner.feeds) == 3  # the three streams decode in one forward
