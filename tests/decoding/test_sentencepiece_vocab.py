"""The design record's tokenizer claims on a real SentencePiece vocabulary: Gemma 3's, 262,144 ids with
byte-fallback tokens (``<0xF0>``) and control tokens (``<bos>``, ``<end_of_turn>``), and vocab padding beyond
it. SmolLM2's byte-level BPE is the other family; ``test_constraint.py`` tests it."""

from __future__ import annotations

import json

import torch

from tests.helpers import allowed_mask, decode
from tests.model_families import tiny_family
from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.models.hf_runner import HFRunner

WIDTH = 262_144
EOS = 1  # <eos>: the stop a base Gemma's grammar forces
CONTROL = [0, 1, 2, 3, 4, 105, 106]  # <pad> <eos> <bos> <unk> <mask> <start_of_turn> <end_of_turn>


def string(gemma_tokenizer, max_length: int = 40) -> Constraint:
    return Constraint.json_schema({"type": "string", "maxLength": max_length}, gemma_tokenizer, stop_token=EOS)


def test_masks_span_every_one_of_the_262144_ids(gemma_tokenizer):
    c = string(gemma_tokenizer)
    assert c.vocab_size == len(gemma_tokenizer) == WIDTH
    mask = allowed_mask(c, WIDTH)
    assert mask.shape == (WIDTH,) and 0 < int(mask.sum()) < WIDTH
    assert mask[gemma_tokenizer.encode('"', add_special_tokens=False)[0]]  # the string's opening quote
    assert not mask[CONTROL].any()


def test_control_tokens_never_inside_a_string(gemma_tokenizer):
    c = string(gemma_tokenizer)
    pieces = gemma_tokenizer('"a <end_of_turn> and <bos> b"', add_special_tokens=False, split_special_tokens=True).input_ids
    assert not set(CONTROL) & set(pieces)  # the text stays text
    for i, token in enumerate(pieces):
        mask = allowed_mask(c, WIDTH)
        assert not mask[CONTROL].any(), f"a control token was allowed at position {i}"
        assert mask[token]
        c.commit(token)
    assert c.process(torch.zeros(WIDTH), []) == EOS  # stop forcing: the completed grammar names its stop alone


def test_byte_fallback_tokens_spell_what_the_vocabulary_has_no_piece_for(gemma_tokenizer):
    """A character with no piece of its own is written as its UTF-8 bytes, one ``<0x..>`` token each; the mask
    allows each byte in turn, and the string decodes whole."""
    text = json.dumps("ꙮ 𐍈 ok", ensure_ascii=False)
    ids = gemma_tokenizer(text, add_special_tokens=False).input_ids
    bytes_used = [t for t in gemma_tokenizer.convert_ids_to_tokens(ids) if t.startswith("<0x")]
    assert len(bytes_used) == 7  # 3 bytes for ꙮ, 4 for 𐍈
    c = string(gemma_tokenizer)
    for token in ids:
        assert allowed_mask(c, WIDTH)[token], gemma_tokenizer.convert_ids_to_tokens([token])
        c.commit(token)
    assert c.error() is None and c.process(torch.zeros(WIDTH), []) == EOS
    assert json.loads(gemma_tokenizer.decode(ids)) == "ꙮ 𐍈 ok"


def test_a_lone_continuation_byte_is_refused(gemma_tokenizer):
    """Bytes that make no UTF-8 character cannot open a JSON string's content."""
    c = string(gemma_tokenizer)
    c.commit(gemma_tokenizer.encode('"', add_special_tokens=False)[0])
    continuation = gemma_tokenizer.convert_tokens_to_ids("<0x80>")
    lead = gemma_tokenizer.convert_tokens_to_ids("<0xEA>")
    mask = allowed_mask(c, WIDTH)
    assert mask[lead] and not mask[continuation]


def test_a_padded_embedding_never_yields_a_padding_id(gemma_tokenizer):
    """A Gemma model whose embedding has 64 rows more than its tokenizer, the padding rows' logits made the
    largest of every row: decoded under a grammar, only tokenizer ids come out, and the string is valid JSON."""
    model = tiny_family("gemma3_text", WIDTH + 64, dtype=torch.float32)
    with torch.no_grad():
        model.get_output_embeddings().weight[WIDTH:] = 10 * model.get_output_embeddings().weight[:WIDTH].abs().max()
    runner = HFRunner(model)
    assert runner.vocab_size == WIDTH + 64
    c = Constraint.json_schema({"type": "string", "maxLength": 8}, gemma_tokenizer, vocab_size=runner.vocab_size, stop_token=EOS)
    prompt = gemma_tokenizer("Say a word:").input_ids
    gen = decode(runner, [Request("p", prompt, c, max_tokens=16)], stops={EOS})["p"]
    assert gen.finish_reason == "stop" and gen.tokens and all(t < WIDTH for t in gen.tokens)
    assert isinstance(json.loads(gemma_tokenizer.decode(gen.tokens)), str)
