"""Cutting a long text into chunks: within the budget, at the strongest boundary, overlapping so a cut value is whole once."""

import pytest

from fucina_jobs.pipeline.chunking import SLACK, Chunk, Chunker, ChunkingError, chunk_id, cut, gather
from fucina_jobs.config import ChunkingConfig


def words(text: str) -> list[int]:
    """One token per word and per run of spaces: a tokenizer whose counts are easy to check by eye."""
    import re

    return [m.start() for m in re.finditer(r"\S+|\s+", text)]


def tokens(text: str, chunk: Chunk) -> int:
    return sum(chunk.start <= s < chunk.end for s in words(text))


def test_a_text_that_fits_is_one_chunk():
    text = "one two three"
    assert cut(text, words(text), budget=10, overlap=2) == [Chunk(0, 0, len(text))]


def test_chunks_fit_the_budget_cover_the_text_and_overlap():
    text = "\n".join(f"line {i} has five words" for i in range(40))
    chunks = cut(text, words(text), budget=60, overlap=20)
    assert len(chunks) > 3
    assert all(tokens(text, c) <= 60 for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for before, after in zip(chunks, chunks[1:]):
        assert before.start < after.start < before.end, "consecutive chunks overlap and move on"
        assert text[after.start - 1] == "\n" and text[before.end - 1] == "\n", "cut at line boundaries"
        assert tokens(text, Chunk(0, after.start, before.end)) <= 20


def test_a_value_across_a_cut_is_whole_in_the_next_chunk():
    """A name printed over two lines, at the end of the first chunk, is whole in the second."""
    filler = "".join(f"item {i} costs {i}.00\n" for i in range(6))  # 8 tokens a line
    text = f"{filler}NORDLICHT\nBAKERY GMBH\n{filler}"
    first, second, *_ = cut(text, words(text), budget=6 * 8 + 3, overlap=24)  # the budget ends inside the name
    name = slice(text.index("NORDLICHT"), text.index("GMBH") + 4)
    assert first.end == text.index("BAKERY"), "cut at the last line break within the budget: inside the name"
    assert second.start <= name.start and name.stop <= second.end, "the name is whole in the next chunk"


def test_paragraphs_are_preferred_to_lines_and_a_cut_between_two_needs_no_overlap():
    """A blank line past the budget's first quarter wins over the later line breaks; it splits no value, so the next chunk starts there."""
    receipt = "\n".join(["SHOP SDN BHD", "DATE 01/02/2019", "ITEM 1 2.00", "ITEM 2 3.00", "TOTAL 5.00"])  # 25 tokens, and 1 for the blank line
    text = "\n\n".join([receipt] * 8)
    chunks = cut(text, words(text), budget=60, overlap=20)
    assert len(chunks) == 4, "two receipts a chunk"
    for before, after in zip(chunks, chunks[1:]):
        assert text[before.end - 2 : before.end] == "\n\n" and after.start == before.end


def test_a_paragraph_longer_than_a_chunk_is_cut_at_a_line_and_overlaps():
    """A short paragraph ends the first chunk (a blank line beats the long one's lines); the long one is cut at lines, overlapping."""
    short = "SHOP A\nTOTAL 1.00"
    long = "\n".join(f"ITEM {i} 1.00" for i in range(20))  # 100 tokens
    text = f"{short}\n\n{long}"
    first, second, third, *_ = cut(text, words(text), budget=40, overlap=12)
    assert first.end == second.start == text.index("ITEM 0"), "cut at the blank line, no overlap"
    assert text[second.end - 1] == "\n" and third.start < second.end and text[third.start - 1] == "\n"
    assert tokens(text, Chunk(0, third.start, second.end)) <= 12


def test_sentences_then_words_then_a_hard_cut():
    prose = " ".join(f"Sentence {i} is here." for i in range(30))
    chunks = cut(prose, words(prose), budget=25, overlap=6)
    assert all(prose[c.end - 2 : c.end] == ". " for c in chunks[:-1])
    blob = "x" * 500  # one word longer than a chunk: only a hard cut helps
    starts = list(range(0, 500, 5))
    chunks = cut(blob, starts, budget=20, overlap=5)
    assert [c.end - c.start for c in chunks[:-1]] == [100] * (len(chunks) - 1) and chunks[-1].end == 500


def test_an_overlap_larger_than_half_a_chunk_is_held_to_half():
    text = "\n".join(f"w{i}" for i in range(200))
    chunks = cut(text, words(text), budget=40, overlap=39)
    for before, after in zip(chunks, chunks[1:]):
        assert after.start - before.start >= 1
        assert tokens(text, Chunk(0, after.start, before.end)) <= 20


def test_gather_puts_a_rows_chunks_together_in_text_order():
    chunks = {chunk_id("r", 1): ("r", Chunk(1, 5, 9)), chunk_id("r", 0): ("r", Chunk(0, 0, 6))}
    outputs = [{"row_id": "a", "relaxations": []}, {"row_id": chunk_id("r", 1), "relaxations": []}, {"row_id": chunk_id("r", 0), "relaxations": []}]
    a, r = gather(outputs, chunks)
    assert a == outputs[0]
    assert r["row_id"] == "r" and [c["chunk"].index for c in r["chunks"]] == [0, 1]


class _Tokenizer:
    """Words as tokens, through the calls the chunker makes (``encode_chat``'s and the offsets)."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=False):
        starts = words(text)
        result = {"input_ids": list(range(len(starts))), "offset_mapping": [(s, s + 1) for s in starts]}
        return type("Encoding", (dict,), {"input_ids": property(lambda self: self["input_ids"])})(result)


def test_the_budget_is_what_the_context_leaves_after_the_prompt_and_max_tokens():
    chunker = Chunker(
        ChunkingConfig(enabled=True), _Tokenizer(), context=400, system="read it", template="<doc> {text} </doc>", text_field="text", max_tokens=100
    )
    bare = chunker.budget({"text": ""})
    assert 400 - 100 - SLACK - 20 < bare < 400 - 100 - SLACK
    capped = Chunker(
        ChunkingConfig(enabled=True, max_tokens=64, overlap_tokens=16),
        _Tokenizer(),
        context=400,
        system=None,
        template="{text}",
        text_field="text",
        max_tokens=100,
    )
    assert capped.budget({}) == 64
    text = " ".join(f"w{i}" for i in range(300))
    assert all(tokens(text, c) <= 64 for c in capped.chunks({"text": text}))
    assert len(chunker.chunks({"text": "short text"})) == 1


def test_a_prompt_that_leaves_no_room_says_what_to_shorten():
    chunker = Chunker(ChunkingConfig(enabled=True), _Tokenizer(), context=120, system="s " * 40, template="{text}", text_field="text", max_tokens=64)
    with pytest.raises(ChunkingError, match="decoding.max_tokens=64 .* context of 120"):
        chunker.chunks({"text": "anything"})


def test_real_tokenizer_chunks_fit_the_context(tokenizer):
    """With SmolLM2's tokenizer, every chunk's prompt plus max_tokens fits 8192: counted in the whole text, checked in the prompt."""
    from fucina_jobs.engines import encode_chat

    text = "\n\n".join(f"SHOP {i} SDN BHD\nNO. {i}, JALAN {i}\nDATE: {i % 28 + 1:02d}/03/2018\nTOTAL RM {i * 3}.50" for i in range(2500))
    system, template = "Extract every receipt.", "<document>\n{text}\n</document>\n"
    chunker = Chunker(ChunkingConfig(enabled=True), tokenizer, context=8192, system=system, template=template, text_field="text", max_tokens=256)
    chunks = chunker.chunks({"text": text})
    assert len(chunks) > 4
    assert all(len(encode_chat(tokenizer, template.format(text=text[c.start : c.end]), system)) + 256 <= 8192 for c in chunks)
