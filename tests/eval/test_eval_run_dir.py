"""``eval`` on an existing run (``eval.run_dir``), the config surface and the maskbench dataset: no model."""

import json
import subprocess
import sys

import pytest

from fucina_jobs.eval.evaluate import evaluate, load_gold
from fucina_jobs.config import ConfigError, validate
from fucina_jobs.data.dataset import read_rows
from fucina_jobs.run_info import fingerprint
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO, make_run

GOLD = [
    {"id": "a", "label": {"vendor": "Acme GmbH", "date": "2025-03-02", "total": 12.5}},
    {"id": "b", "label": {"vendor": "Bolt", "date": "2025-03-03", "total": 20}},
    {"id": "c", "label": {"vendor": "Cogs", "date": "2025-03-04", "total": 30}},
]
STATS = [
    {
        "shard": k,
        "replica": k,
        "rows": 2,
        "records": 1,
        "rejects": 1,
        "prompt_tokens": 50,
        "generated_tokens": 40,
        "forward_passes": 10,
        "tokens_per_forward": 4.0,
        "tok_s": 20.0 + k,
        "wall_s": 2.0,
        "drafted_forced": 10,
        "accepted_forced": 10,
        "drafted_ngram": 20,
        "accepted_ngram": 10 + k,
        "acceptance": 0.7,
        "mask_us_p50": 50.0,
        "mask_us_p99": 400.0,
    }
    for k in range(2)
]


def _job_raw(out, gold, **eval_):
    return {
        "name": "hand",
        "constraint": {"json_schema": "schemas/invoice.json"},
        "dataset": {"path": "jobs/invoices/inputs.jsonl"},
        "output": {"dir": str(out)},
        "eval": {"gold": str(gold), **eval_},
    }


@pytest.fixture
def hand_run(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(g) + "\n" for g in GOLD))
    records = [
        {"row_id": "a", "text": '{"vendor": "ACME  gmbh", "date": "2 March 2025", "total": 12.50}'},
        {"row_id": "b", "text": '{"vendor": "Bolt", "date": "2025-03-03", "total": 21}'},
    ]
    rejects = [{"row_id": "c", "reason": "length", "text": '{"vendor": "Co'}, {"row_id": "d", "reason": "schema_violation", "text": "{}"}]
    run = make_run(
        tmp_path / "run", records, rejects, STATS, manifest={"status": "complete", "fingerprint": "f", "config": _job_raw(tmp_path / "x", gold)}
    )
    return run, gold


def test_scores_and_reports_from_an_existing_run(hand_run, tmp_path):
    run, gold = hand_run
    result = evaluate(validate(_job_raw(tmp_path / "unused", gold, run_dir=str(run))), REPO)
    assert result.ok and result.run_dir == str(run)
    scores = json.loads((run / "scores.json").read_text())
    c = scores["conformance"]
    assert (c["rows"], c["parsed"], c["validated"], c["rejects_by_reason"]) == (4, 3, 2, {"length": 1, "schema_violation": 1})
    acc = scores["accuracy"]
    assert acc["all_fields_correct"] == {"correct": 1, "total": 3, "rate": pytest.approx(1 / 3)}
    assert acc["fields"]["total"]["correct"] == 1 and acc["fields"]["vendor"]["correct"] == 2 and acc["run_rows_without_gold"] == 1
    assert scores["efficiency"]["tokens_per_record"] == 20 and scores["efficiency"]["acceptance"]["ngram"]["accepted"] == 21
    assert len(scores["content_hash"]) == 64 and scores["fingerprint"] == "f"
    md, page = (run / "report.md").read_text(), (run / "report.html").read_text()
    assert "| total | 1 | 3 | 33.3% |" in md and "| length | 1 |" in md
    for plot in ("accuracy_per_field", "acceptance_per_shard", "tok_s_per_shard"):
        assert f"plots/{plot}.png" in md and (run / "plots" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64,") == 3 and "plots/" not in page


def test_eval_cli_on_an_existing_run(hand_run, tmp_path):
    run, gold = hand_run
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fucina_jobs",
            "eval",
            "conf=eval_invoices",
            f"eval.run_dir={run}",
            f"eval.gold={gold}",
            "eval.report=false",
            f"output.dir={tmp_path / 'hydra'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "parse 75.0%, validate 50.0%" in res.stdout and "all fields correct 33.3% of 3" in res.stdout
    assert (run / "scores.json").exists() and not (run / "report.html").exists()


def test_eval_cli_rejects_bad_eval_keys_before_any_work():
    res = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "eval", "conf=eval_invoices", "eval.mode=judge"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 2 and "eval.mode='judge'" in res.stderr


def test_missing_run_and_bad_gold_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="holds no run"):
        evaluate(validate(_job_raw(tmp_path, tmp_path / "g", run_dir=str(tmp_path / "nothing"))), REPO)
    bad = tmp_path / "gold.jsonl"
    bad.write_text('{"id": "a", "label": {}}\n{"id": "b"}\n')
    with pytest.raises(ConfigError, match="gold.jsonl:2"):
        load_gold(bad)


def test_eval_section_defaults_and_fingerprint(tmp_path):
    raw = _job_raw(tmp_path, "g.jsonl")
    cfg = validate(raw)
    assert cfg.eval.mode == "generate" and cfg.eval.numeric_tolerance == 0.01 and cfg.eval.report and cfg.eval.run_dir is None
    other = validate({**raw, "eval": {"gold": None, "numeric_tolerance": 0.5, "mode": "grammar", "report": False}})
    assert fingerprint(cfg) == fingerprint(other)  # scoring settings never change what a run outputs
    assert fingerprint(cfg) != fingerprint(validate({**raw, "decoding": {"seed": 1}}))
    with pytest.raises(ConfigError, match="eval.numeric_tolerance"):
        validate({**raw, "eval": {"numeric_tolerance": -1}})


def test_maskbench_dataset_is_one_row_per_file_with_its_schema(tmp_path):
    cfg = validate({"dataset": {"path": "jobs/conformance", "format": "maskbench", "limit": 5}, "output": {"dir": str(tmp_path)}})
    assert cfg.dataset.schema_field == "schema" and cfg.constraint.kind is None
    rows = read_rows(cfg.dataset, REPO)
    assert len(rows) == 5 and rows[0].id == "additional_properties_false" and all(r.problem is None for r in rows)
    suite = json.loads((SHIPPED / "jobs/conformance/additional_properties_false.json").read_text())
    assert rows[0].fields["schema"] == suite["schema"] and rows[0].fields["features"] == suite["meta"]["features"]
    assert json.dumps(suite["schema"]) in rows[0].fields["text"] and "JSON schema" in rows[0].fields["text"]
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"tests": []}')
    problems = [
        r.problem for r in read_rows(validate({"dataset": {"path": str(tmp_path), "format": "maskbench"}, "output": {"dir": "x"}}).dataset, REPO)
    ]
    assert "not valid JSON" in problems[0] and "not a MaskBench file" in problems[1]


def test_a_row_schema_jsonschema_cannot_apply_becomes_an_error_reject():
    from fucina_jobs.data.sink import Validator

    record, reason, message = Validator("json_schema")('{"a": 1}', "stop", None, {"properties": {"a": {"$ref": "#/defs/missing"}}})
    assert record is None and reason == "error" and "the schema cannot be checked" in message
