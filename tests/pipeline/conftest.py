import os
from pathlib import Path

import pytest

from fucina_jobs.pipeline.rundir import RunDir

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[2]


def job_dict(out: Path, **sections) -> dict:
    """The shipped invoice job as a raw config dict, with section overrides."""
    raw = {
        "name": "extract_invoices",
        "constraint": {"json_schema": "schemas/invoice.json"},
        "dataset": {"path": "jobs/invoices/inputs.jsonl", "limit": 4},
        "prompt": {"system": "@jobs/invoices/system.txt", "template": "@jobs/invoices/template.txt"},
        "decoding": {"max_tokens": 160},
        "runtime": {"replicas": 2, "streams": 2, "shard_size": 2},
        "output": {"dir": str(out)},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def read_dir(out: Path | str, kind: str) -> list[dict]:
    """Every row of one kind (records, rejects, stats) of output.dir's newest version, all run partitions (with ``run``)."""
    return RunDir.open(out).read(kind).to_pylist()


def shard_files(out: Path | str, kind: str) -> list[Path]:
    """The shard files of one kind in output.dir's newest version, every partition (no temporaries)."""
    return [Path(f.path) for f in RunDir.open(out).shard_files(kind) if f.key is not None]


def manifest(out: Path | str) -> dict | None:
    """The manifest of output.dir's newest version."""
    return RunDir.open(out).read_manifest()


def assert_exactly_once(out: Path | str, expected_ids: set[str]) -> None:
    ids = [r["row_id"] for r in read_dir(out, "records")] + [r["row_id"] for r in read_dir(out, "rejects")]
    assert sorted(ids) == sorted(expected_ids), "every input row must appear exactly once in records plus rejects"
