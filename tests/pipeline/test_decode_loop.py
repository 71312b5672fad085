"""One continuous decoder per replica: shards share its streams, and it never drains between two held shards."""

from __future__ import annotations

import pytest

from fucina_jobs.engines import FucinaEngine, Prompt
from fucina_jobs.models.loading import LoadedModel
from fucina_jobs.config import DecodingConfig, RuntimeConfig
from fucina_jobs.pipeline.decode_loop import DecodeLoop


@pytest.fixture(scope="module")
def engine(tiny_model, tokenizer):
    loaded = LoadedModel(tiny_model, tokenizer, "tiny", tiny_model.device)
    return FucinaEngine(loaded, DecodingConfig(temperature=0.8), RuntimeConfig(streams=2))


def shard(name: str, lengths: list[int]) -> list[Prompt]:
    return [Prompt(f"{name}{i}", f"document {name} number {i}", seed=i, max_tokens=n) for i, n in enumerate(lengths)]


def test_shards_held_together_decode_as_they_would_alone(engine):
    first, second = shard("a", [3, 12]), shard("b", [5, 4, 9])
    alone = {c.id: c.tokens for c in engine.generate(first + second)}
    loop = DecodeLoop(engine, streams=2)
    held = [loop.submit(first), loop.submit(second)]
    together = {c.id: c.tokens for batch in held for c in batch.result(2)[0]}
    assert together == alone


def test_a_held_shard_keeps_the_streams_busy_at_the_first_ones_end(engine):
    """The first shard's short row frees a stream: with the next shard held, its row takes it at once."""
    loop = DecodeLoop(engine, streams=2)
    first = loop.submit(shard("a", [2, 14]))
    second = loop.submit(shard("b", [14, 14]))
    _, held_occupancy = first.result(2)
    second.result(2)
    _, alone_occupancy = loop.submit(shard("c", [2, 14])).result(2)  # nothing else held: one stream idles
    assert held_occupancy == 1.0
    assert alone_occupancy < 0.8


def test_a_shard_with_no_prompts_is_done_at_once(engine):
    assert DecodeLoop(engine, streams=2).decode([]) == ([], None)
