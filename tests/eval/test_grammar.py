"""Grammar-only conformance (``eval.mode=grammar``): MaskBench verdicts with no model, only its tokenizer."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fucina_jobs.eval.evaluate import evaluate
from fucina_jobs.config import ConfigError, validate
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO

CONFORMANCE = SHIPPED / "jobs" / "conformance"
MASKBENCH = Path(__file__).resolve().parent / "data" / "maskbench"


def _grammar_cfg(path, out, **eval_):
    return validate(
        {
            "name": "conformance",
            "dataset": {"path": str(path), "format": "maskbench"},
            "output": {"dir": str(out)},
            "eval": {"mode": "grammar", **eval_},
        }
    )


def test_conformance_suite_via_the_cli_has_no_wrong_final_verdicts(tmp_path):
    assert len(list(CONFORMANCE.glob("*.json"))) == 51
    res = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "eval", "conf=conformance", f"output.dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "51 schemas, 51 compiled (100.0%), 8 relaxed; 298 instances, wrong verdicts: grammar 8, final 0 (0 invalid accepted)" in res.stdout
    assert len(res.stdout.splitlines()) <= 8
    scores = json.loads((tmp_path / "scores.json").read_text())
    g = scores["grammar"]
    assert g["files"] == g["compiled"] == 51 and g["stages"]["final"]["wrong"] == 0 and not g["unexplained"]
    assert g["valid"] > 0 and g["invalid"] > 0 and g["instances"] == g["valid"] + g["invalid"]
    assert set(g["relaxations"]) == {"not", "uniqueItems", "dependencies", "if/then/else", "format", "min/maxProperties", "oneOf", "regex"}
    assert set(g["by_feature"]) >= {"anyOf", "enum", "pattern", "$ref"}
    assert all(v["correct_rate"] == 1.0 for v in g["by_feature"].values())
    assert "model" not in scores["config"] and "dtype" not in scores["config"]  # grammar-only: no model runs
    verdicts = pq.read_table(tmp_path / "verdicts" / "verdicts.parquet").to_pylist()
    caught = [v for v in verdicts if v["accepted"] and not v["final"]]
    assert len(caught) == 8 and all(v["relaxations"] and v["expected"] is False for v in caught)
    t = scores["timing"]
    assert 0 < t["compile_ms"]["p50"] <= t["compile_ms"]["p99"] and 0 < t["mask_us"]["p50"] <= t["mask_us"]["p99"]
    assert len(scores["content_hash"]) == 64
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["mode"] == "grammar" and manifest["config"]["eval"]["mode"] == "grammar" and len(manifest["hashes"]["dataset"]) == 64
    md, page = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    assert "Grammar-only conformance" in md and "plots/conformance_by_feature.png" in md
    assert (tmp_path / "plots" / "conformance_by_feature.png").read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64," in page and "src='plots/" not in page  # self-contained


def test_rerun_gives_the_same_content_hash_and_a_limit_a_different_one(tmp_path):
    first = evaluate(_grammar_cfg(CONFORMANCE, tmp_path / "a", report=False), REPO)
    again = evaluate(_grammar_cfg(CONFORMANCE, tmp_path / "b", report=False), REPO)
    assert first.ok and first.scores["content_hash"] == again.scores["content_hash"]
    assert not (tmp_path / "a" / "report.html").exists()
    fewer = evaluate(
        validate(
            {**_grammar_cfg(CONFORMANCE, tmp_path / "c").model_dump(), "dataset": {"path": str(CONFORMANCE), "format": "maskbench", "limit": 3}}
        ),
        REPO,
    )
    assert fewer.scores["grammar"]["files"] == 3 and fewer.scores["content_hash"] != first.scores["content_hash"]


def test_exit_policy_known_causes_unexplained_causes_and_baseline_regressions(tmp_path):
    strict = _grammar_cfg(CONFORMANCE, tmp_path / "strict", report=False)
    strict = validate({**strict.model_dump(), "constraint": {"relax": "off"}})
    off = evaluate(strict, REPO)
    g = off.scores["grammar"]
    assert g["compiled"] == 43 and not g["unexplained"] and off.ok  # every refusal has a known cause
    assert all(e["known"] for e in g["compile_errors"].values())
    # Against a baseline, only regressions count: relaxing fixes 8 schemas and breaks none ...
    relaxed = evaluate(_grammar_cfg(CONFORMANCE, tmp_path / "relaxed", report=False, baseline=str(tmp_path / "strict")), REPO)
    assert relaxed.ok and relaxed.scores["regressions"]["count"] == 0
    # ... while going back to strict compilation is 8 schemas that no longer compile: exit 1.
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fucina_jobs",
            "eval",
            "conf=conformance",
            "constraint.relax=off",
            f"output.dir={tmp_path / 'again'}",
            f"eval.baseline={tmp_path / 'relaxed'}",
            "eval.report=false",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    assert "8 (no longer compiles 8)" in res.stdout
    # A cause no known limitation explains fails a run without a baseline.
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "dangling.json").write_text(json.dumps({"schema": {"$ref": "#/$defs/missing"}, "tests": [{"valid": True, "data": 1}]}))
    dangling = evaluate(_grammar_cfg(suite, tmp_path / "dangling", report=False), REPO)
    assert not dangling.ok and dangling.scores["grammar"]["unexplained"]


def test_grammar_mode_needs_a_maskbench_dataset(tmp_path):
    cfg = validate(
        {
            "dataset": {"path": "jobs/invoices/inputs.jsonl"},
            "constraint": {"json_schema": "schemas/invoice.json"},
            "output": {"dir": str(tmp_path)},
            "eval": {"mode": "grammar"},
        }
    )
    with pytest.raises(ConfigError, match="dataset.format=maskbench"):
        evaluate(cfg, REPO)
    with pytest.raises(ConfigError, match="no MaskBench"):
        evaluate(_grammar_cfg(tmp_path, tmp_path / "out"), REPO)


def test_maskbench_format_fixture(tmp_path):
    """tests/eval/data/maskbench: five schemas of our own in MaskBench's format, one relaxed (uniqueItems)."""
    result = evaluate(_grammar_cfg(MASKBENCH, tmp_path), REPO)
    g = result.scores["grammar"]
    assert (g["files"], g["compiled"], g["relaxed"], g["instances"], g["valid"]) == (5, 5, 1, 23, 7)
    assert g["stages"]["final"] == {"wrong": 0, "valid_rejected": 0, "invalid_accepted": 0} and g["coverage"] == 1.0
    assert set(g["relaxations"]) == {"uniqueItems"} and not g["compile_errors"] and not g["unexplained"] and result.ok
    assert (tmp_path / "report.html").stat().st_size > 0
