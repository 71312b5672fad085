"""The driver is killed mid-job, then the same command resumes it."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, assert_exactly_once, shard_files

pytestmark = pytest.mark.slow


def _command(out):
    return [
        sys.executable,
        "-m",
        "fucina_jobs",
        "run",
        "conf=extract_invoices",
        "dataset.limit=6",
        "runtime.shard_size=2",
        "runtime.streams=2",
        "decoding.max_tokens=160",
        f"output.dir={out}",
    ]


def test_driver_killed_and_restarted_resumes_completed_shards(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_command(out), cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not shard_files(out, "stats") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert shard_files(out, "stats"), "the first shard never finished"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(shard_files(out, "stats"))
    assert done_before < 3, "the driver was killed before the job ended"

    rerun = subprocess.run(_command(out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # A replica may still commit the shards it held after the driver died (it writes its own files,
    # atomically): the rerun resumes at least every shard committed before the kill and decodes the rest.
    resumed = int(re.search(r"shards +3 \((\d+) resumed", rerun.stdout).group(1))
    assert done_before <= resumed <= 3, rerun.stdout
    assert_exactly_once(out, {f"inv-00{i}" for i in range(1, 7)})
