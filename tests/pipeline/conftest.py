import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

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


def read_dir(path: Path) -> list[dict]:
    return [row for f in sorted(path.glob("*.parquet")) for row in pq.read_table(f).to_pylist()]


def assert_exactly_once(out: Path, expected_ids: set[str]) -> None:
    ids = [r["row_id"] for r in read_dir(out / "records")] + [r["row_id"] for r in read_dir(out / "rejects")]
    assert sorted(ids) == sorted(expected_ids), "every input row must appear exactly once in records plus rejects"
