"""Issue 13 point 6: a job reads ``s3://`` and writes ``s3://``, on moto's S3 server on 127.0.0.1.

The endpoint rides in the URIs' query (``endpoint_override``, ``scheme``), so
the replicas' filesystems reach the same server; the dummy credentials come
from the environment, which Ray's workers inherit from this process.
"""

import pyarrow.fs as pafs
import pytest

from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, manifest, read_dir

pytestmark = pytest.mark.slow


def test_a_job_reads_and_writes_s3_and_a_rerun_decodes_nothing(s3, tmp_path, local_ray):
    local = tmp_path / "in.jsonl"
    generate(local, 25)
    parts = {"data/part-0.jsonl": local.read_bytes(), "data/part-1.jsonl": b'{"id": "extra", "text": "Invoice E-1 from Acme"}\n'}
    for key, body in parts.items():
        fs, path = pafs.FileSystem.from_uri(s3(key))
        with fs.open_output_stream(path) as f:
            f.write(body)
    data, out = s3("data/part-*.jsonl"), s3("runs/nightly")  # a glob, listed on the object store

    raw = job_config(local, out, 2, 10) | {"dataset": {"path": data}}  # the local file only places the job's schema
    first = Job(validate(raw), REPO).run()
    assert first.ok and first.rows == 26 and first.shards == 3
    ids = {f"r{i:08d}" for i in range(25)} | {"extra"}
    assert_exactly_once(out, ids)
    m = manifest(out)
    assert m["status"] == "complete" and m["run"] and len(m["shards"]) == 3
    assert {s["replica"] for s in read_dir(out, "stats")} <= {0, 1}

    again = Job(validate(raw), REPO).run()
    assert again.ok and again.shards_resumed == 3 and again.shards == 3
    assert manifest(out)["run"] is None, "a rerun with nothing new decodes nothing and writes no partition"
    assert_exactly_once(out, ids)
