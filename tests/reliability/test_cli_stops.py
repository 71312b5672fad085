"""Issues 12 and 28 through the command line: a second run on a busy output.dir, Ctrl-C and SIGTERM, then a rerun.

The first run is a real ``python -m fucina_jobs run`` process: the lock it holds
must stop a second run at once, and SIGINT to its process group (what a
terminal's Ctrl-C sends) or SIGTERM to the driver (what systemd and Kubernetes
send) must stop it cleanly, so that a rerun resumes.
"""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, invoice_rows, manifest, shard_files, small_job, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
IDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def _wait_for(predicate, proc, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.2)


@contextmanager
def _cli_run(tmp_path):
    """A real ``run`` of the invoice job on ``IDS`` (8 tokens a row, shards of 2), in a process group of its own; yields it,
    its dataset and its output.dir, and kills what is left of it when the test ends."""
    data = write_jsonl(tmp_path / "in.jsonl", invoice_rows(IDS))
    out = tmp_path / "out"
    args = [
        f"dataset.path={data}",
        "dataset.limit=null",
        "decoding.max_tokens=8",
        "runtime.replicas=1",
        "runtime.streams=2",
        "runtime.shard_size=2",
        f"output.dir={out}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fucina_jobs", "run", "conf=extract_invoices", *args],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as under a terminal, even if pytest runs in the background
    try:
        yield proc, data, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _rerun_resumes(out, data) -> None:
    m = manifest(out)
    resumed = Job(validate(small_job(out, data, constraint={"learned": "jobs/invoices/learned.json"})), REPO).run()  # the CLI's job
    assert resumed.ok and resumed.shards_resumed == len(m["shards"])
    assert_exactly_once(out, set(IDS))
    assert manifest(out)["status"] == "complete"


def test_busy_output_dir_then_ctrl_c_then_rerun(tmp_path):
    with _cli_run(tmp_path) as (proc, data, out):
        _wait_for(lambda: manifest(out) is not None, proc, "manifest")
        with pytest.raises(ConfigError, match=rf"in use by another run \(pid {proc.pid}\)"):
            Job(validate(small_job(out, data)), REPO).run()

        _wait_for(lambda: shard_files(out, "stats"), proc, "committed shard")
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert "interrupted: rerun the same command to resume" in stderr
    m = manifest(out)
    assert m["status"] == "interrupted" and 1 <= len(m["shards"]) < 4
    _rerun_resumes(out, data)


def test_sigterm_is_a_clean_stop_and_the_rerun_resumes(tmp_path):
    """Issue 28: SIGTERM (what systemd and Kubernetes send) aborted the driver (exit 134, a native stack dump), manifest `running`."""
    with _cli_run(tmp_path) as (proc, data, out):
        _wait_for(lambda: shard_files(out, "stats"), proc, "committed shard")
        os.kill(proc.pid, signal.SIGTERM)  # the driver alone, as `kill PID` and Kubernetes send it
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr and "SIGTERM received" not in stderr and "interrupted by SIGTERM: rerun the same command" in stderr
    m = manifest(out)
    assert m["status"] == "interrupted" and m["error"].startswith("stopped by SIGTERM") and 1 <= len(m["shards"]) < 4
    _rerun_resumes(out, data)
