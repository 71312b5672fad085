"""A LoRA adapter fine-tuned from gold rows (``learn adapter=true``) and merged into the model at load (``model.adapter``).

A tiny random Llama with the real vocab, saved to a folder as a job's ``model.source``, learns a made-up extraction
task: order notes that write a code (``code: GGA365``) and always bill in euros.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.engines import build, encode_chat, stop_tokens
from fucina_jobs.learn_command import learn_command
from fucina_jobs.learning.adapter import Training, adapter_path, train
from fucina_jobs.learning.adapter_samples import SampleFormat, samples, value_spans
from fucina_jobs.models import adapters
from fucina_jobs.models.hf_runner import HFRunner
from fucina_jobs.models.loading import load_model, load_tokenizer
from fucina_jobs.pipeline import Job, compact_json
from tests.decoding.test_equivalence import RECORD, accepted, assert_same, make_requests
from tests.helpers import GREEDY, LOGIT_SCALE, SPEC, STOP, decode, tiny_llama, write_jsonl

SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": ["string", "null"], "maxLength": 12, "x-grounded": True}, "currency": {"type": "string"}},
    "required": ["code", "currency"],
    "additionalProperties": False,
}
SYSTEM, TEMPLATE = "Extract the order's code and currency as JSON.", "Order note:\n{text}"


def note(n: int) -> tuple[dict, dict]:
    rng = random.Random(n)
    code = "".join(rng.choice("ABCDEFGHJK") for _ in range(3)) + str(rng.randint(100, 999))
    return {"id": f"o{n}", "text": f"Order {n} from dock {rng.randint(1, 9)}. code: {code}. Paid by card."}, {"code": code, "currency": "EUR"}


NOTES = [note(n) for n in range(16)]


def tiny_model_dir(folder: Path, seed: int, sharp: bool = True) -> Path:
    """A random 2-layer Llama with SmolLM2's vocab and tokenizer, saved as a model folder; ``sharp``: its logits
    scaled as the decoding tests' are, so that n-gram drafts are accepted sometimes."""
    model = tiny_llama(seed=seed, logit_scale=LOGIT_SCALE if sharp else 1.0, dtype=torch.float32)
    model.save_pretrained(folder)
    load_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """A job folder: the notes, their gold, the tiny model, ``conf/codes.yaml``, and the adapter ``learn`` trained."""
    root = tmp_path_factory.mktemp("codes")
    for folder in ("conf", "data", "schemas"):
        (root / folder).mkdir()
    write_jsonl(root / "data/inputs.jsonl", [row for row, _ in NOTES])
    write_jsonl(root / "data/gold.jsonl", [{"id": row["id"], "label": label} for row, label in NOTES])
    (root / "schemas/codes.json").write_text(json.dumps(SCHEMA))
    tiny_model_dir(root / "model", seed=0)
    prompt = {"system": SYSTEM, "template": TEMPLATE}
    conf = {"defaults": ["base", "_self_"], "name": "codes", "model": {"source": str(root / "model"), "device": "cpu"}}
    conf |= {"constraint": {"json_schema": "schemas/codes.json"}, "dataset": {"path": "data/inputs.jsonl"}, "prompt": prompt}
    (root / "conf/codes.yaml").write_text(json.dumps(conf))
    return root


@pytest.fixture(scope="module")
def learned(job) -> dict:
    """``learn adapter=true`` on the job: its printout and the adapter's evidence."""
    mp = pytest.MonkeyPatch()
    mp.chdir(job)
    try:
        assert learn_command(["conf=codes", "gold=data/gold.jsonl", "adapter=true"]) == 0
    finally:
        mp.undo()
    return json.loads((job / adapter_path(Path("jobs/codes/learned.json")) / adapters.EVIDENCE).read_text())


def adapter_dir(job: Path) -> Path:
    return job / adapter_path(Path("jobs/codes/learned.json"))


def job_config(job: Path, **model) -> object:
    raw = {
        "name": "codes",
        "model": {"source": str(job / "model"), "device": "cpu", **model},
        "constraint": {"json_schema": str(job / "schemas/codes.json")},
        "dataset": {"path": str(job / "data/inputs.jsonl")},
        "prompt": {"system": SYSTEM, "template": TEMPLATE},
        "output": {"dir": str(job / "out")},
    }
    return validate(raw)


def sample_format(tokenizer) -> SampleFormat:
    """The notes' side of a sample, as ``learn`` builds it for a job: the chat prompt, compact JSON."""

    def prompt(row: dict, text: str) -> list[int]:
        return encode_chat(tokenizer, TEMPLATE.format(text=text), SYSTEM)

    answer = lambda label: compact_json(label, SCHEMA)  # noqa: E731
    return SampleFormat(prompt=prompt, answer=answer, tokenizer=tokenizer, stop=min(stop_tokens(tokenizer)))


# -- samples ---------------------------------------------------------------------------


def test_a_sample_reads_the_passages_that_write_the_values_and_answers_the_whole_record(tokenizer):
    row, label = NOTES[0]
    filler = "Terms of delivery apply to every order of the season. "
    long = {**row, "text": filler * 40 + row["text"] + " " + filler * 40}
    [whole], [cut] = (
        samples(SCHEMA, [(row["id"], row, label)], "text", sample_format(tokenizer)),
        samples(SCHEMA, [(row["id"], long, label)], "text", sample_format(tokenizer)),
    )
    assert tokenizer.decode(whole.prompt).count(row["text"]) == 1  # a short note is read whole
    prompt = tokenizer.decode(cut.prompt)
    assert row["text"] in prompt and prompt.count(filler.strip()) < 15  # the passage around the code, not 80 fillers
    assert tokenizer.decode(cut.target[:-1]) == compact_json(label, SCHEMA) == tokenizer.decode(whole.target[:-1])
    assert cut.target[-1] == STOP and set(cut.fields) == {"code", "currency"}


def test_field_spans_cover_each_value_of_the_answer():
    answer = compact_json({"code": "AB1", "currency": "EUR"}, SCHEMA)
    spans = value_spans(answer)
    assert {key: answer[a:b] for key, (a, b) in spans.items()} == {"code": '"AB1"', "currency": '"EUR"'}


# -- training ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_adapters_loss_falls_and_held_out_field_accuracy_rises(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(tmp_path, seed=2, sharp=False))
    rows = [(row["id"], row, label) for row, label in NOTES]
    train_set, held_out = (samples(SCHEMA, part, "text", sample_format(tokenizer)) for part in (rows[:12], rows[12:]))
    _, evidence = train(model, train_set, held_out, Training(epochs=5, learning_rate=1e-2), report=lambda line: None)
    losses = [e["loss"] for e in evidence["epochs"]]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    assert evidence["held_out_loss"]["after"] < evidence["held_out_loss"]["before"]
    assert evidence["held_out_accuracy"]["after"] > evidence["held_out_accuracy"]["before"]
    assert evidence["rows"] == {"train": 12, "held_out": 4}


@pytest.mark.slow
def test_learn_saves_the_adapter_beside_the_cues_with_its_evidence(job, learned):
    folder = adapter_dir(job)
    assert (folder / adapters.WEIGHTS).is_file() and (job / "jobs/codes/learned.json").is_file()
    assert learned["base_model"]["digest"] == adapters.weights_digest(job / "model")
    assert learned["rows"]["train"] + learned["rows"]["held_out"] == len(NOTES)
    assert learned["epochs"] and set(learned["held_out_accuracy"]) == {"before", "after"}
    assert learned["training"]["rank"] == 8


# -- at load ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_merged_adapter_gives_the_unmerged_models_logits(job, learned):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([encode_chat(load_tokenizer(str(job / "model")), TEMPLATE.format(text=NOTES[3][0]["text"]), SYSTEM)])
    merged = load_model(str(job / "model"), "cpu", "float64", str(adapter_dir(job))).model
    base = AutoModelForCausalLM.from_pretrained(job / "model", dtype=torch.float64).eval()
    with torch.no_grad():
        plain = base(ids).logits
        unmerged = PeftModel.from_pretrained(base, adapter_dir(job)).eval()(ids).logits
        logits = merged(ids).logits
    assert not any("lora" in name for name, _ in merged.named_parameters())  # a plain model again
    assert torch.allclose(logits, unmerged, atol=1e-9)
    assert (logits - plain).abs().max() > 1e-4  # and the adapter does change it


@pytest.mark.slow
def test_plain_equals_speculative_with_the_merged_adapter(job, learned, tokenizer):
    from fucina_jobs.decoding.constraint import Constraint

    runner = HFRunner(load_model(str(job / "model"), "cpu", "float64", str(adapter_dir(job))).model)
    record = Constraint.json_schema(RECORD, tokenizer, stop_token=STOP)
    plain_requests, spec_requests = make_requests(tokenizer, "grammar", record), make_requests(tokenizer, "grammar", record)
    plain = decode(runner, plain_requests, params=GREEDY)
    spec = decode(runner, spec_requests, params=GREEDY, spec=SPEC)
    assert_same(plain, spec)
    assert accepted(spec) > 0


@pytest.mark.slow
def test_run_merges_the_adapter_and_its_version_changes_with_it(job, learned):
    plain, adapted = job_config(job), job_config(job, adapter=str(adapter_dir(job)))
    assert Job(plain, job).fingerprint != Job(adapted, job).fingerprint
    engine = build(adapted, str(job / "model"))
    assert not any("lora" in name for name, _ in engine.loaded.model.named_parameters())
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        ours = engine.loaded.model(ids).logits
        base = build(plain, str(job / "model")).loaded.model(ids).logits
    assert (ours - base).abs().max() > 1e-4


@pytest.mark.slow
def test_an_adapter_of_another_model_or_none_at_all_is_a_one_line_error(job, learned, tmp_path):
    other = tiny_model_dir(tmp_path / "other", seed=1)
    cfg = job_config(job, adapter=str(adapter_dir(job)))
    mismatched = Job(cfg.model_copy(update={"model": cfg.model.model_copy(update={"source": str(other)})}), job)
    with pytest.raises(ConfigError, match="trained on another model than model.source") as err:
        mismatched._check_model()
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="not an adapter folder") as err:
        Job(job_config(job, adapter=str(tmp_path / "missing")), job)
    assert "\n" not in str(err.value)


def test_an_adapter_from_one_gold_row_is_a_one_line_error(job, monkeypatch, capsys):
    monkeypatch.chdir(job)
    write_jsonl(job / "data/one.jsonl", [{"id": NOTES[0][0]["id"], "label": NOTES[0][1]}])
    assert learn_command(["conf=codes", "gold=data/one.jsonl", "out=one/learned.json", "adapter=true"]) == 2
    assert "adapter=true needs at least 2 gold rows, one to train on and one to stop on; 1 given" in capsys.readouterr().err


@pytest.mark.slow
def test_a_curve_with_the_adapter_scores_cues_adapter_and_both_on_the_held_out_rows(job, capsys):
    mp = pytest.MonkeyPatch()
    mp.chdir(job)
    try:
        assert learn_command(["conf=codes", "gold=data/gold.jsonl", "curve=6", "held_out=4", "adapter=true", "out=curve", "runtime.streams=4"]) == 0
    finally:
        mp.undo()
    table = capsys.readouterr().out
    assert "| gold rows learned from | arm | code | currency | mean | rejects | prompt copies | training min |" in table
    points = [line.split(" | ")[:2] for line in table.splitlines() if line.startswith("| 6 ")]
    assert points == [["| 6", "cues"], ["| 6", "adapter"], ["| 6", "both"]]
    evidence = json.loads((job / "curve/learned-6-adapter" / adapters.EVIDENCE).read_text())
    assert evidence["rows"] == {"train": 5, "held_out": 1}  # the first 6 gold rows only, a fifth of them held out
    versions = {arm: next((job / f"curve/run-6-{arm}").glob("version=*")).name for arm in ("cues", "adapter", "both")}
    assert len(set(versions.values())) == 3  # the same cues with and without the adapter are two versions: it was merged
