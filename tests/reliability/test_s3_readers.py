"""Issue 28: ``review``, ``compare`` and ``eval`` read an ``s3://`` output through the pipeline's storage layer.

They parsed the URI as a local path: "holds no records" about a complete run,
and a local ``./s3:/bucket/...`` folder in the working directory. The store is
moto's S3 server on 127.0.0.1 (``s3`` fixture, started before Ray so that the
replicas inherit its credentials).
"""

import json
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from fucina_jobs.eval.cli import compare_command
from fucina_jobs.review.cli import review_command
from fucina_jobs.eval.runs import read_run
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import make_run
from ..review.test_review import RECORDS
from tests.helpers import REPO, canned_job, write_jsonl

pytestmark = pytest.mark.slow

SCHEMA = str(REPO / "tests/grounding/data/invoice_ungrounded.json")
INVOICE = {
    "invoice_number": "Q-1",
    "invoice_date": "2025-01-01",
    "due_date": "2025-01-31",
    "vendor": "Acme",
    "customer": "Bolt",
    "currency": "EUR",
    "subtotal": 10,
    "tax": 0,
    "total": 10,
}


def _upload(local, uri: str) -> None:
    fs, path = pafs.FileSystem.from_uri(uri)
    pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def test_review_compare_and_eval_read_an_s3_run(s3, local_ray, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # where a URI read as a path would leave ./s3:/bucket/...
    ids = ["a", "b", "c"]
    data = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": "Invoice Q-1"} for i in ids])
    out = s3("runs/canned")
    summary = Job(
        validate(canned_job(tmp_path / "unused", data, json.dumps(INVOICE), constraint={"json_schema": SCHEMA}, output={"dir": out})), REPO
    ).run()
    assert summary.ok and summary.records == 3

    assert sorted(r["row_id"] for r in read_run(out).records) == ids
    assert compare_command([out, out]) == 0 and "identical outputs" in capsys.readouterr().out

    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": i, "label": INVOICE} for i in ids])
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fucina_jobs",
            "eval",
            "conf=eval_invoices",
            f"eval.run_dir='{out}'",
            f"eval.gold={gold}",
            f"dataset.path={data}",
            f"constraint.json_schema={SCHEMA}",
            f"output.dir={tmp_path / 'hydra'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "all fields correct 100.0% of 3" in res.stdout
    scores = read_run(out).scores
    assert scores["accuracy"]["rows_scored"] == 3 and scores["run_dir"].startswith("s3://bucket/runs/canned/version=")

    hand = s3("runs/hand")
    _upload(make_run(tmp_path / "hand", RECORDS, []), hand)
    assert review_command([hand, "--limit", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:4] == ["0.400", "r-inv-1", "inv-1", "items[0].qty"] and len(table) == 3
    assert not (tmp_path / "s3:").exists()
