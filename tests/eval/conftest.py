import os
from pathlib import Path

import pyarrow as pa
import pytest

from fucina_jobs.pipeline.sink import REJECT_SCHEMA, META_FIELDS
from fucina_jobs.pipeline.storage import write_json, write_table

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[2]


def make_run(path: Path, records: list[dict], rejects: list[dict], stats: list[dict] | None = None, manifest: dict | None = None) -> Path:
    """A hand-built run directory, laid out as runs were before versions and partitions (readers still read it)."""
    fill = lambda r: {"record_id": "r-" + r["row_id"], "finish_reason": "stop", "prompt_tokens": 10, "generated_tokens": 5, **r}  # noqa: E731
    write_table(path / "records" / "shard-00000.parquet", pa.Table.from_pylist([fill(r) for r in records], schema=pa.schema(META_FIELDS)))
    rej = [{"record_id": "r-" + r["row_id"], "text": "", "error": None, **r} for r in rejects]
    write_table(path / "rejects" / "shard-00000.parquet", pa.Table.from_pylist(rej, schema=REJECT_SCHEMA))
    for k, row in enumerate(stats or []):
        write_table(path / "stats" / f"shard-{k:05d}.parquet", pa.Table.from_pylist([row]))
    write_json(path / "manifest.json", manifest or {"name": "hand", "status": "complete", "fingerprint": "f"})
    return path


@pytest.fixture(scope="session")
def tokenizer():
    from fucina_jobs.models.loading import load_tokenizer

    return load_tokenizer()
