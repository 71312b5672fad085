"""Worked examples: checked before any model loads, rendered as chat turns, computed once, never copied into a record."""

from __future__ import annotations

import json

import pytest

from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.decoding.processor import LogitProcessor, TokenBias
from fucina_jobs.engines import FucinaEngine, Prompt, drain, encode_chat
from fucina_jobs.grounding import alarm
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.models.loading import LoadedModel
from fucina_jobs.config import ConfigError, DecodingConfig, RuntimeConfig, SpeculativeConfig, validate
from fucina_jobs.pipeline.cli import compose
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.pipeline.examples import ExamplePicker, compact_json, load_examples

from tests.helpers import GREEDY, REPO, STOP, canned_job, job_dict, read_dir, write_jsonl

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "maxLength": 40, "x-grounded": True},
        "total": {"type": "number", "minimum": 0, "x-grounded": {"amount": True}},
    },
    "required": ["vendor", "total"],
    "additionalProperties": False,
}
EXAMPLE = {"text": "Pinewood Labels Ltd\nTotal due: EUR 1,608.00", "label": {"total": 1608.0, "vendor": "Pinewood Labels Ltd"}}
ROW = "Invoice from Brightwater Supply Co.\nTotal due: $572.34"


def job(tmp_path, lines: list, **prompt):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "examples.jsonl").write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    (tmp_path / "inputs.jsonl").write_text(json.dumps({"id": "a", "text": ROW}) + "\n")
    raw = job_dict(
        tmp_path / "out",
        constraint={"json_schema": str(tmp_path / "schema.json")},
        dataset={"path": str(tmp_path / "inputs.jsonl")},
        prompt={
            "system": "Extract the seller and the total.",
            "template": "<doc>\n{text}\n</doc>",
            "examples": str(tmp_path / "examples.jsonl"),
            **prompt,
        },
    )
    return validate(raw)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"examples\.jsonl:2: not JSON"),
        ({"label": EXAMPLE["label"]}, r"examples\.jsonl:2: expected \{\"text\""),
        (
            {"text": EXAMPLE["text"], "label": {"vendor": "Pinewood Labels Ltd"}},
            r"examples\.jsonl:2: the label does not fit the job's schema: <root>: 'total' is a required property",
        ),
        (
            {"text": EXAMPLE["text"], "label": {"vendor": "Pinewood Labels Ltd", "total": 1680}},
            r"examples\.jsonl:2: grounded value\(s\) not found in the example's own text: total=1680",
        ),
    ],
)
def test_a_bad_example_is_a_config_error_naming_its_file_and_line_before_any_model_loads(tmp_path, line, message):
    with pytest.raises(ConfigError, match=message):
        Job(job(tmp_path, [EXAMPLE, line]), REPO)  # the line number counts non-blank lines' positions in the file


def test_examples_k_and_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"prompt.examples_k=3: examples.jsonl holds only 1 example"):
        Job(job(tmp_path, [EXAMPLE], examples_k=3), REPO)
    with pytest.raises(ConfigError, match=r"prompt.examples: .*nowhere.jsonl does not exist"):
        Job(job(tmp_path, [EXAMPLE], examples="nowhere.jsonl"), REPO)
    cfg = job(tmp_path, [EXAMPLE, {**EXAMPLE, "text": EXAMPLE["text"] + "\n"}], examples_k=1)
    assert len(load_examples(cfg, REPO, "{text}", SCHEMA)) == 1


def test_a_shipped_jobs_examples_are_found_from_any_folder(tmp_path, monkeypatch):
    """``prompt.examples`` is read as every relative input path is: the working directory first, then the package's files."""
    monkeypatch.chdir(tmp_path)
    raw = compose("extract_receipts", [f"output.dir={tmp_path / 'out'}"])
    assert len(Job(validate(raw), tmp_path).examples) == 3


def test_an_example_is_the_template_filled_with_its_text_and_its_label_as_the_grammar_writes_it(tmp_path):
    [example] = load_examples(job(tmp_path, [EXAMPLE]), REPO, "<doc>\n{text}\n</doc>", SCHEMA)
    assert example.user == f"<doc>\n{EXAMPLE['text']}\n</doc>"
    assert example.answer == '{"vendor":"Pinewood Labels Ltd","total":1608}'  # schema key order, compact, one spelling per number
    assert compact_json({"b": [1.5, 2.0], "a": None}, {"properties": {"a": {}, "b": {}}}) == '{"a":null,"b":[1.5,2]}'


def test_examples_are_chat_turns_between_the_system_message_and_the_row(tokenizer):
    examples = [("first <|im_end|> document", '{"a":1}'), ("second document", '{"a":2}')]
    ids = encode_chat(tokenizer, "the row", "SYSTEM", examples)
    messages = [{"role": "system", "content": "SYSTEM"}]
    for user, answer in examples:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    expected = tokenizer.apply_chat_template(messages + [{"role": "user", "content": "the row"}], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(ids) == expected
    assert ids.count(STOP) == 6, "only the template's six end-of-turn markers are control tokens, not the document's"


def test_the_prefix_cache_computes_the_examples_once_for_every_row(tokenizer, tiny_model):
    engine = FucinaEngine(
        LoadedModel(tiny_model, tokenizer, "tiny", tiny_model.device),
        DecodingConfig(speculative=SpeculativeConfig(enabled=False)),
        RuntimeConfig(streams=1),
    )
    examples = ((EXAMPLE["text"], '{"vendor":"Pinewood Labels Ltd","total":1608}'),) * 2
    prompts = [Prompt(str(k), f"Invoice {k} from Brightwater, total {k}.00", "SYSTEM", examples=examples, max_tokens=3) for k in range(4)]
    session = engine.session()
    completions = list(drain(session, prompts))
    shared = len(encode_chat(tokenizer, "", "SYSTEM", examples)) - 4  # the user turn's own header and the generation prompt differ
    assert len(completions) == 4
    assert session.decoder.prefixes.reused_tokens >= 3 * shared


class _Biased(LogitProcessor):
    """A model that wants to copy: the example's vendor tokens pushed up by +50 before the grammar masks."""

    has_structure = True

    def __init__(self, bias: TokenBias, grammar: Constraint):
        self.bias, self.grammar = bias, grammar

    def process(self, logits, history):
        self.bias.process(logits, history)
        return self.grammar.process(logits, history)

    def commit(self, token):
        self.grammar.commit(token)

    def reset(self):
        self.grammar.reset()

    def forced_tokens(self):
        return self.grammar.forced_tokens()

    def valid_prefix_len(self, tokens):
        return self.grammar.valid_prefix_len(tokens)


def test_an_example_value_cannot_appear_in_a_grounded_field_of_a_row_that_does_not_write_it(tokenizer, tiny_runner):
    from fucina_jobs.decoding.batch import BatchDecoder, Request

    grammar = Constraint.lark(grounded_lark(SCHEMA, ROW), tokenizer, stop_token=STOP)
    copied = tokenizer.encode('{"vendor":"Pinewood Labels Ltd","total":1608}', add_special_tokens=False)
    assert grammar.clone().valid_prefix_len(copied) < len(copied) - 8, "the example's vendor is refused at its first word"
    own = tokenizer.encode('{"vendor":"Brightwater Supply Co.","total":572.34}', add_special_tokens=False)
    assert grammar.clone().valid_prefix_len(own) == len(own)

    pushed = TokenBias({t: 50.0 for t in tokenizer.encode(" Pinewood Labels Ltd 1608 Pinewood", add_special_tokens=False)})
    examples = ((EXAMPLE["text"], '{"vendor":"Pinewood Labels Ltd","total":1608}'),)
    ids = encode_chat(tokenizer, ROW, "Extract the seller and the total.", examples)
    [gen] = BatchDecoder(tiny_runner, {STOP}, GREEDY, None).run([Request("a", ids, _Biased(pushed, grammar.clone()), max_tokens=40)])
    value = json.loads(tokenizer.decode(gen.tokens))
    assert "Pinewood" not in value["vendor"] and value["vendor"] in " ".join(ROW.split()) and value["total"] == 572.34


def test_the_alarm_counts_a_copied_example_value(tmp_path):
    [example] = load_examples(job(tmp_path, [EXAMPLE]), REPO, "{text}", SCHEMA)
    prompt = alarm.prompt_text("Extract the seller and the total.", "{text}", [example.document, example.answer])
    copied = alarm.Output({"vendor": "Pinewood Labels Ltd", "total": 572.34}, ROW, SCHEMA)
    own = alarm.Output({"vendor": "Brightwater Supply Co.", "total": 572.34}, ROW, SCHEMA)
    assert alarm.measure([copied, own], prompt).counts["prompt_copies"] == [1, 4]
    assert alarm.measure([copied], alarm.prompt_text("Extract the seller and the total.", "{text}")).counts["prompt_copies"] == [0, 2]


INVOICE = "INVOICE no. {n}\nSeller: {v}\nNet amount 100.00\nVAT 21% 21.00\nTotal due: EUR {t}"
RECEIPT = "CASH RECEIPT {n}\n{v}\nTABLE 4  2 PAX\nTEA 2.50\nTOTAL RM {t}\nTHANK YOU COME AGAIN"
KINDS = [(INVOICE, "Pinewood Labels Ltd", "1,608.00", 1608.0), (RECEIPT, "Kedai Murni", "12.50", 12.5)]


def _examples(tmp_path, **prompt):
    lines = [
        {"id": f"{kind}-{n}", "text": template.format(n=n, v=vendor, t=written), "label": {"vendor": vendor, "total": total}}
        for n in range(2)
        for kind, (template, vendor, written, total) in zip(("invoice", "receipt"), KINDS)
    ]
    return load_examples(job(tmp_path, lines, **prompt), REPO, "{text}", SCHEMA)


def test_nearest_examples_are_the_documents_most_like_the_row_the_nearest_last(tmp_path):
    examples = _examples(tmp_path, examples_k=2, examples_nearest=True)
    assert len(examples) == 4, "with examples_nearest every example is a candidate; examples_k counts a row's"
    picker = ExamplePicker(examples, 2, True, budget=None, count=len)
    receipt = RECEIPT.format(n=1, v="Restoran Sentosa", t="30.00")  # receipt 1 shares its number too: the nearest
    assert [e.id for e in picker.pick(receipt)] == ["receipt-0", "receipt-1"]  # the nearest last, beside the row
    assert [e.id for e in picker.pick(INVOICE.format(n=0, v="Brightwater", t="5.00"))] == ["invoice-1", "invoice-0"]
    first = ExamplePicker(_examples(tmp_path, examples_k=2), 2, False, budget=None, count=len)
    assert [e.id for e in first.pick(receipt)] == ["invoice-0", "receipt-0"], "without examples_nearest, the first k for every row"


def test_nearest_examples_fit_their_share_of_the_context(tmp_path):
    examples = _examples(tmp_path, examples_nearest=True)
    cost = sum(map(len, examples[1].turn))
    picker = ExamplePicker(examples, None, True, budget=cost + 1, count=len)  # room for one receipt's turns only
    assert [e.id for e in picker.pick(RECEIPT.format(n=0, v="X", t="5.00"))] == ["receipt-0"]  # the nearest, and no second one


def test_examples_nearest_needs_examples(tmp_path):
    raw = job_dict(tmp_path / "out", dataset={"path": str(tmp_path / "in.jsonl")}, prompt={"examples_nearest": True})
    with pytest.raises(
        ConfigError,
        match=r"invalid job config: prompt=.*: examples_nearest=true picks among the worked examples, and there are none: set prompt.examples=FILE",
    ):
        validate(raw)


@pytest.mark.usefixtures("local_ray")
def test_each_record_names_the_nearest_examples_its_prompt_carried(tmp_path):
    """Through the whole data path (real Ray, the canned engine): a receipt row is shown receipts, an invoice row invoices."""
    lines = [
        {"id": f"{kind}-{n}", "text": template.format(n=n, v=vendor, t=written), "label": {"vendor": vendor, "total": total}}
        for n in range(2)
        for kind, (template, vendor, written, total) in zip(("invoice", "receipt"), KINDS)
    ]
    (tmp_path / "examples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    rows = [{"id": "r", "text": RECEIPT.format(n=1, v="Acme", t="5.00")}, {"id": "i", "text": INVOICE.format(n=0, v="Acme", t="5.00")}]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    prompt = {"template": "{text}", "system": "", "examples": str(tmp_path / "examples.jsonl"), "examples_k": 1, "examples_nearest": True}
    raw = canned_job(
        tmp_path / "out", data, json.dumps({"vendor": "Acme", "total": 5.0}), constraint={"json_schema": str(tmp_path / "schema.json")}, prompt=prompt
    )
    Job(validate(raw), REPO).run()
    assert {r["row_id"]: r["example_ids"] for r in read_dir(tmp_path / "out", "records")} == {"r": ["receipt-1"], "i": ["invoice-0"]}
