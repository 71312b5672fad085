"""Grammar-only conformance (``eval.mode=grammar``): MaskBench verdicts with no model, only its tokenizer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fucina_jobs.eval.evaluate import evaluate
from fucina_jobs.eval.maskbench import KNOWN_LIMITATIONS
from fucina_jobs.pipeline.config import ConfigError, validate

from .conftest import REPO

CONFORMANCE = REPO / "tests" / "data" / "conformance"
MASKBENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "maskbench-sample"


def _grammar_cfg(path, out, **eval_):
    return validate({"name": "conformance", "dataset": {"path": str(path), "format": "maskbench"},
                     "output": {"dir": str(out)}, "eval": {"mode": "grammar", **eval_}})


def test_conformance_suite_via_the_cli_has_no_wrong_verdicts(tmp_path):
    assert len(list(CONFORMANCE.glob("*.json"))) == 43
    res = subprocess.run([sys.executable, "-m", "fucina_jobs", "eval", "conf=conformance", f"output.dir={tmp_path}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "43 schemas, 0 compile errors, 267 instances, 0 wrong verdicts" in res.stdout
    scores = json.loads((tmp_path / "scores.json").read_text())
    g = scores["grammar"]
    assert g["files"] == g["compiled"] == 43 and g["wrong_verdicts"] == 0 and not g["unexpected"]
    assert g["valid"] > 0 and g["invalid"] > 0 and g["instances"] == g["valid"] + g["invalid"]
    assert set(g["by_feature"]) >= {"anyOf", "enum", "pattern", "$ref"}
    assert all(v["correct_rate"] == 1.0 for v in g["by_feature"].values())
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
    fewer = evaluate(validate({**_grammar_cfg(CONFORMANCE, tmp_path / "c").model_dump(), "dataset": {"path": str(CONFORMANCE), "format": "maskbench", "limit": 3}}), REPO)
    assert fewer.scores["grammar"]["files"] == 3 and fewer.scores["content_hash"] != first.scores["content_hash"]


def test_grammar_mode_needs_a_maskbench_dataset(tmp_path):
    cfg = validate({"dataset": {"path": "jobs/invoices/inputs.jsonl"}, "constraint": {"json_schema": "schemas/invoice.json"},
                    "output": {"dir": str(tmp_path)}, "eval": {"mode": "grammar"}})
    with pytest.raises(ConfigError, match="dataset.format=maskbench"):
        evaluate(cfg, REPO)
    with pytest.raises(ConfigError, match="no MaskBench"):
        evaluate(_grammar_cfg(tmp_path, tmp_path / "out"), REPO)


@pytest.mark.slow  # about 20 s
@pytest.mark.skipif(not MASKBENCH.is_dir(), reason=f"no MaskBench sample at {MASKBENCH}")
def test_shared_maskbench_sample(tmp_path):
    result = evaluate(_grammar_cfg(MASKBENCH, tmp_path), REPO)
    g = result.scores["grammar"]
    assert g["files"] == len(list(MASKBENCH.glob("*.json"))) and g["instances"] > 0
    assert g["wrong_verdicts"] == 0, {**g["valid_rejected"], **g["invalid_accepted"]}
    assert set(g["compile_errors"]) <= set(KNOWN_LIMITATIONS), set(g["compile_errors"]) - set(KNOWN_LIMITATIONS)
    assert all(v["known"] for v in g["compile_errors"].values()) and not g["unexpected"] and result.ok
    assert (tmp_path / "report.html").stat().st_size > 0
