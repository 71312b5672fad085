"""Issue 13's data path on a real local Ray: the driver plans from an index, replicas read and write their own shards."""

import json

import pytest

from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.eval.runs import content_hash, read_run
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, job_dict, shard_files

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]


def test_canned_engine_run_writes_one_file_per_kind_per_shard_and_a_rerun_decodes_only_new_rows(tmp_path):
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 2500)
    first = Job(validate(job_config(data, out, 2, None)), REPO).run()
    assert first.ok and first.records == 2500 and first.shards == 3
    assert {kind: len(shard_files(out, kind)) for kind in ("records", "rejects", "stats")} == {"records": 3, "rejects": 3, "stats": 3}
    assert_exactly_once(out, {f"r{i:08d}" for i in range(2500)})

    with data.open("a") as f:  # the dataset grows overnight
        f.write("".join(json.dumps({"id": f"new{i}", "text": f"Invoice N-{i}"}) + "\n" for i in range(10)))
    again = Job(validate(job_config(data, out, 2, None)), REPO).run()
    assert again.ok and again.shards_resumed == 3 and again.shards == 4 and again.rows == 2510
    assert_exactly_once(out, {f"r{i:08d}" for i in range(2500)} | {f"new{i}" for i in range(10)})


def test_records_do_not_depend_on_the_data_path(tmp_path):
    """Shards of one row on two replicas, one shard held at a time (the data path before issue 13), and shards of
    two rows held together by one replica's continuous decoder give the same content hash."""
    runs = []
    for name, runtime in (("before", {"shard_size": 1, "replicas": 2, "shards_in_flight": 1}), ("after", {"shard_size": 2, "replicas": 1})):
        out = tmp_path / name
        assert Job(validate(job_dict(out, decoding={"max_tokens": 24}, runtime=runtime)), REPO).run().ok
        runs.append(content_hash(read_run(out)))
    assert runs[0] == runs[1]
