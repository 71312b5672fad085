"""Prompt conventions read from the model, not assumed: BOS where the tokenizer adds one, the stops its
generation config, EOS and chat template give, and a completion prompt for a base model with no chat template."""

from __future__ import annotations

import pytest
from transformers import GenerationConfig

from tests.helpers import STOP
from fucina_jobs.engines import encode_chat, stop_tokens
from fucina_jobs.engines.fucina import end_of_turn

BOS, EOS, END_OF_TURN = 2, 1, 106  # Gemma 3's
#: Gemma's instruction-tuned chat template, in short: the base model ships none.
GEMMA_CHAT = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
    "{{ m.content }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def test_a_base_model_gets_a_completion_prompt_after_its_bos(gemma_tokenizer):
    assert not gemma_tokenizer.chat_template
    ids = encode_chat(gemma_tokenizer, "Invoice 7, total 12.50", "Extract the total.", [("Invoice 3, total 4", '{"total":4}')])
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert gemma_tokenizer.decode(ids[1:]) == 'Extract the total.\n\nInvoice 3, total 4\nAnswer:\n{"total":4}\n\nInvoice 7, total 12.50\nAnswer:\n'


def test_a_template_that_writes_its_bos_gets_no_second_one(gemma_tokenizer, monkeypatch):
    monkeypatch.setattr(gemma_tokenizer, "chat_template", GEMMA_CHAT)
    ids = encode_chat(gemma_tokenizer, "a document <end_of_turn>", "instructions")
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert ids.count(END_OF_TURN) == 2  # the system and user turns' markers; the document's text stays text
    assert gemma_tokenizer.decode(ids).endswith("a document <end_of_turn><end_of_turn>\n<start_of_turn>model\n")


def test_a_chat_model_whose_tokenizer_adds_no_bos_gets_none(tokenizer):
    ids = encode_chat(tokenizer, "hello")
    assert tokenizer.decode(ids).startswith("<|im_start|>") and ids == tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_the_end_of_turn_is_read_off_the_chat_template(tokenizer, gemma_tokenizer, monkeypatch):
    assert end_of_turn(tokenizer) == STOP  # ChatML's <|im_end|>
    assert end_of_turn(gemma_tokenizer) is None
    monkeypatch.setattr(gemma_tokenizer, "chat_template", GEMMA_CHAT)
    assert end_of_turn(gemma_tokenizer) == END_OF_TURN
    assert stop_tokens(gemma_tokenizer) == {EOS, END_OF_TURN}


@pytest.mark.parametrize("eos, stops", [(EOS, {EOS}), ([EOS, END_OF_TURN, 50], {EOS, END_OF_TURN, 50})])
def test_stops_include_the_generation_configs(gemma_tokenizer, tmp_path, eos, stops):
    GenerationConfig(eos_token_id=eos).save_pretrained(tmp_path)
    assert stop_tokens(gemma_tokenizer, str(tmp_path)) == stops
    assert stop_tokens(gemma_tokenizer, str(tmp_path / "none")) == {EOS}  # no generation config: the tokenizer's


def test_the_generation_config_is_read_without_the_network(gemma_tokenizer, monkeypatch):
    """A hub id not in the cache (or a model built in memory) has no generation config to read here: asking the
    hub would cost an offline machine a minute of retries, for a file the model's loading already had."""

    asked = []

    def no_network(url, *args, **kwargs):
        asked.append(url)
        raise OSError("no network in this test")

    monkeypatch.setattr("huggingface_hub.file_download.get_hf_file_metadata", no_network)  # what a download asks first
    assert stop_tokens(gemma_tokenizer, "someone/a-model-never-downloaded") == {EOS}
    assert asked == []
