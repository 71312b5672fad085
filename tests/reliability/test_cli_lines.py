"""Issue 28: every command-line mistake of the issue is one line on stderr naming the problem, never a traceback.

One row of ``CASES`` per mistake: the real ``python -m fucina_jobs`` runs as a
subprocess, in a fresh folder that ``setup`` fills, and must exit with ``code``,
print no ``Traceback`` and exactly one line on stderr holding every one of
``words``. ``{tmp}`` in an argument is that folder. Add a case by adding a row.
"""

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers import REPO, make_run, ray_running

pytestmark = pytest.mark.slow


@dataclass
class Case:
    name: str
    args: list[str]
    words: list[str]
    code: int = 2
    setup: Callable[[Path], None] = lambda tmp: None
    env: Callable[[Path], dict[str, str]] = lambda tmp: {}
    skip: Callable[[], str | None] = lambda: None  # why this machine cannot pose the case, or None
    alone: bool = False  # needs no other Ray on this machine (the ``alone`` mark)


def _file(tmp: Path) -> None:
    (tmp / "afile").write_text("not a folder")


def _not_a_model(tmp: Path) -> None:
    (tmp / "notamodel").mkdir()
    (tmp / "notamodel" / "README.md").write_text("my notes")


def _damaged_run(tmp: Path) -> None:
    make_run(tmp / "run", [{"row_id": "a", "text": "{}"}], [])
    (tmp / "run" / "records" / "shard-00000.parquet").write_bytes(b"PAR1 truncated")


def _contacts_run(tmp: Path) -> None:
    config = {
        "name": "extract_contacts",
        "constraint": {"regex": "schemas/contact.regex"},
        "dataset": {"path": "jobs/contacts/inputs.jsonl"},
        "output": {"dir": str(tmp / "run")},
    }
    make_run(
        tmp / "run",
        [{"row_id": "c1", "text": "Ann | ann@x.org | 1"}],
        [],
        manifest={"name": "extract_contacts", "status": "complete", "fingerprint": "f", "config": config},
    )


def _stale_ray_start(tmp: Path) -> None:
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")


def _gcs_reachable() -> str | None:
    try:
        socket.create_connection(("storage.googleapis.com", 443), timeout=2).close()
    except OSError:
        return None
    return "Google Cloud Storage is reachable from here: without credentials it may answer"


RUN = ["run", "conf=extract_invoices", "output.dir={tmp}/out"]
CASES = [
    Case("run-empty-output-dir", ["run", "conf=extract_invoices", "output.dir="], ["output.dir is empty"]),
    Case("run-output-dir-is-a-file", ["run", "conf=extract_invoices", "output.dir={tmp}/afile"], ["/afile is a file, not a folder"], setup=_file),
    Case(
        "run-gs-output-without-credentials",
        ["run", "conf=extract_invoices", "output.dir=gs://fucina-no-bucket/out"],
        ["output.dir=gs://fucina-no-bucket/out"],
        skip=_gcs_reachable,
    ),
    Case(
        "run-ray-address-where-nothing-listens",
        [*RUN, "runtime.ray_address=127.0.0.1:9"],
        ["runtime.ray_address=127.0.0.1:9", "no Ray cluster answers"],
    ),
    Case(
        "run-ray-address-auto-after-the-cluster-went",
        [*RUN, "runtime.ray_address=auto"],
        ["runtime.ray_address=auto", "no Ray cluster answers"],
        setup=_stale_ray_start,
        env=lambda tmp: {"RAY_TMPDIR": str(tmp)},
        skip=ray_running,
        alone=True,
    ),
    Case("run-model-source-not-a-model", [*RUN, "model.source={tmp}/notamodel"], ["model.source", "without config.json"], setup=_not_a_model),
    Case("review-limit-0", ["review", "{tmp}", "--limit", "0"], ["--limit", "must be 1 or more, not 0"]),
    Case("review-limit-negative", ["review", "{tmp}", "--limit", "-1"], ["--limit", "must be 1 or more, not -1"]),
    Case("review-a-regular-file", ["review", "{tmp}/afile"], ["/afile is a file, not a folder"], setup=_file),
    Case("review-a-damaged-run", ["review", "{tmp}/run"], ["shard-00000.parquet is damaged"], setup=_damaged_run),
    Case("compare-a-damaged-run", ["compare", "{tmp}/run", "{tmp}/run"], ["shard-00000.parquet is damaged"], setup=_damaged_run),
    Case(
        "eval-run-dir-of-another-job",
        ["eval", "conf=eval_invoices", "eval.run_dir={tmp}/run", "output.dir={tmp}/hydra"],
        ["eval.run_dir=", "another job, 'extract_contacts'", "constraint.regex=schemas/contact.regex"],
        setup=_contacts_run,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.alone] if c.alone else []) for c in CASES])
def test_one_line_naming_the_problem(case: Case, tmp_path):
    if why := case.skip():
        pytest.skip(why)
    case.setup(tmp_path)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", **case.env(tmp_path)}
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    res = subprocess.run([sys.executable, "-m", "fucina_jobs", *args], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == case.code and "Traceback" not in res.stderr and len(lines) == 1, res.stderr[-3000:]
    for word in case.words:
        assert word in lines[0], lines[0]
    strays = [p.name for p in REPO.iterdir() if p.name.startswith(("version=", "gs:", "s3:")) or p.name in ("cli.log", ".lock", "logs")]
    assert not strays, f"written into the working directory: {strays}"
