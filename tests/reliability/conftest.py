import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..pipeline.conftest import REPO, assert_exactly_once, job_dict, manifest, read_dir, s3, shard_files  # noqa: F401  (test modules import them from here)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

INVOICES = [json.loads(line) for line in (REPO / "jobs/invoices/inputs.jsonl").read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def invoice_rows(ids: list[str]) -> list[dict]:
    """Real invoice texts under new ids (the k-th id gets the k-th invoice)."""
    return [{"id": i, "text": INVOICES[k]["text"]} for k, i in enumerate(ids)]


def small_job(out: Path, data: Path, **sections) -> dict:
    """The invoice job on the dataset file ``data``, tiny: 8 tokens per row, one replica, two streams."""
    raw = job_dict(out, dataset={"path": str(data), "limit": None}, decoding={"max_tokens": 8},
                   runtime={"replicas": 1, "streams": 2, "shard_size": 2})
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def canned_job(out: Path, data: Path, answer: str, **sections) -> dict:
    """A job on ``data`` whose engine answers every row with ``answer`` at once (no model): the pipeline alone."""
    return small_job(out, data, engine={"name": "null", "output": answer}, **sections)


def cli(*args: str, timeout: float = 900, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fucina_jobs", "run", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, **popen)


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody can write into: a read-only tmpfs for root, a 0555 folder for everyone else."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root cannot mount a read-only tmpfs here, and root writes through file modes")
    yield path
    subprocess.run(["umount", str(path)], check=True)
