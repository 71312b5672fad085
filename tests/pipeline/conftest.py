import os
import socket
from pathlib import Path

import pyarrow.fs as pafs
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


_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """A bucket on a private moto server; yields a function that turns a key into an ``s3://`` URI for it."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)  # dummy credentials, before Ray starts, so that its workers inherit them
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    query = f"endpoint_override=127.0.0.1:{port}&scheme=http"
    fs, _ = pafs.FileSystem.from_uri(f"s3://bucket?{query}&allow_bucket_creation=true")
    fs.create_dir("bucket")
    yield lambda key: f"s3://bucket/{key}?{query}"
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
