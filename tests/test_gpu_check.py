"""checks/gpu.sh must at least run its CPU dry-run: a GPU is not always at hand."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_passes_reference_and_prints_table():
    env = dict(os.environ, PYTHON=sys.executable)
    run = subprocess.run(
        ["bash", "checks/gpu.sh", "--dry-run", "--streams", "1,2", "--max-tokens", "8", "--check-steps", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[0].split() == ["streams", "arm", "forward", "tok/s", "tok/fwd", "ms/step", "fwd%", "proc%"]
    rows = [line.split() for line in lines[1:-1]]
    assert [row[:3] for row in rows] == [
        [n, arm, forward] for n in ("1", "2") for arm in ("plain", "ngram", "json") for forward in ("eager", "compiled")
    ]
    assert all(len(row) == 8 for row in rows), "an arm failed: " + run.stderr[-2000:]
    processor_share = {(row[0], row[1]): float(row[7]) for row in rows}
    assert processor_share[("2", "json")] > 0 and processor_share[("2", "plain")] == 0  # only the json arm runs a grammar
    assert lines[-1] == "reference check: PASS"
    assert "first compiled run" in run.stderr and "compile for the table's dtype" in run.stderr
