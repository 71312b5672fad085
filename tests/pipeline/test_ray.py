"""End to end on a real local Ray with 2 CPU replicas and the real default model."""

import json

import jsonschema
import pytest
import ray

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO, assert_exactly_once, job_dict, manifest, read_dir, shard_files

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
IDS4 = {f"inv-00{i}" for i in range(1, 5)}


def test_two_replicas_end_to_end_then_resume_then_a_changed_config_is_a_new_version(tmp_path):
    out = tmp_path / "run"
    summary = Job(validate(job_dict(out)), REPO).run()
    assert summary.ok and summary.records + summary.rejects == 4
    assert_exactly_once(out, IDS4)
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    for record in read_dir(out, "records"):
        jsonschema.validate(json.loads(record["text"]), schema)
    stats = read_dir(out, "stats")
    assert sorted(s["shard"] for s in stats) == [0, 1] and {s["replica"] for s in stats} == {0, 1}
    assert all(s["tokens_per_forward"] > 1 and s["accepted_forced"] > 0 for s in stats)
    first = manifest(out)
    assert first["status"] == "complete" and len(first["hashes"]["model"]) == 64 and first["totals"]["rows"] == 4

    before = {p: p.read_bytes() for p in shard_files(out, "records")}
    again = Job(validate(job_dict(out)), REPO).run()
    assert again.shards_resumed == 2 and again.records == summary.records
    assert {p: p.read_bytes() for p in shard_files(out, "records")} == before

    changed = Job(validate(job_dict(out, decoding={"max_tokens": 100}, dataset={"limit": 1})), REPO).run()
    assert changed.ok and changed.shards_resumed == 0 and changed.rows == 1
    assert manifest(out)["version"] != first["version"]  # a new version, read by default now
    assert_exactly_once(out, {"inv-001"})
    assert {p: p.read_bytes() for p in shard_files(out / f"version={first['version']}", "records")} == before  # the old one untouched
    fresh = Job(validate(job_dict(out, decoding={"max_tokens": 100}, dataset={"limit": 1}, output={"fresh": True})), REPO).run()
    assert fresh.shards_resumed == 0 and fresh.rows == 1
    assert_exactly_once(out, {"inv-001"})


def _kill_on_first_dispatch():
    """Kill the first shard's replica as the shard is sent, so it cannot finish however fast the machine decodes."""
    killed = []

    def on_dispatch(shard, actor):
        if not killed:
            killed.append(shard)
            ray.kill(actor, no_restart=False)

    return on_dispatch, killed


def test_replica_killed_mid_shard_is_restarted_and_its_shard_retried(tmp_path):
    out = tmp_path / "run"
    on_dispatch, killed = _kill_on_first_dispatch()
    summary = Job(validate(job_dict(out)), REPO).run(on_dispatch)
    assert killed and summary.retries >= 1 and summary.ok
    assert_exactly_once(out, IDS4)
    assert summary.rejects == sum(summary.reasons.values())


def test_shard_that_keeps_failing_becomes_rejects_with_the_error(tmp_path):
    out = tmp_path / "run"
    on_dispatch, killed = _kill_on_first_dispatch()
    summary = Job(validate(job_dict(out, runtime={"max_retries": 0})), REPO).run(on_dispatch)
    assert not summary.ok and summary.shards_failed == 1
    assert_exactly_once(out, IDS4)
    failed = [r for r in read_dir(out, "rejects") if r["reason"] == "error"]
    assert len(failed) == 2 and all("shard failed" in r["error"] for r in failed)


def test_regex_job_records_have_named_group_columns(tmp_path):
    raw = {
        "name": "extract_contacts",
        "constraint": {"regex": "schemas/contact.regex"},
        "dataset": {"path": "jobs/contacts/inputs.jsonl", "limit": 2},
        "prompt": {"system": "@jobs/contacts/system.txt", "template": "@jobs/contacts/template.txt"},
        "decoding": {"max_tokens": 80},
        "runtime": {"replicas": 1, "streams": 2},
        "output": {"dir": str(tmp_path / "contacts")},
    }
    summary = Job(validate(raw), REPO).run()
    assert summary.ok and summary.records + summary.rejects == 2
    for record in read_dir(tmp_path / "contacts", "records"):
        assert " | ".join([record["name"], record["email"], record["phone"]]) == record["text"]
        mean = dict(record["field_confidence_mean"])  # a regex job's values are its named groups
        assert set(mean) == {"name", "email", "phone"} and record["record_confidence"] == min(mean.values()) and 0 < min(mean.values()) <= 1
