"""Issue 28, the runtime half, on a real local Ray: untrusted row schemas, damaged shards, replica caps.

The engine is the canned one (every row gets the same output at once), so
these runs test the pipeline alone: what reaches post-validation, what a rerun
redoes, and that every row still ends exactly once.
"""

import json
import socket

import pytest

from fucina_jobs.eval.cli import compare_command
from fucina_jobs.review.cli import review_command
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, canned_job, manifest, read_dir, shard_files, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]

PER_ROW = {"constraint": {"json_schema": None}, "dataset": {"schema_field": "schema"}}


def _run(raw: dict):
    return Job(validate(raw), REPO).run()


def _if_pattern(pattern: str) -> str:
    """A row schema whose only use of ``pattern`` is in an ``if`` branch, which relaxation leaves to post-validation."""
    return json.dumps(
        {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "if": {"properties": {"code": {"pattern": pattern}}},
            "then": {"required": ["missing"]},
        }
    )


def test_a_catastrophic_pattern_rejects_its_row_and_the_shard_beside_it_commits(tmp_path):
    """Defect 4: ``^(a|aa)+$`` against 60 a's and a '!' backtracks for hours in ``re``, holding the GIL, so no shard committed."""
    rows = [
        {"id": "slow", "text": "code aaaa", "schema": _if_pattern("^(a|aa)+$")},
        {"id": "issue", "text": "code aaaa", "schema": _if_pattern("^([a-z]+)+$")},  # the issue's pattern: `regex` needs no time for it
        {"id": "plain-1", "text": "x", "schema": json.dumps({"type": "object"})},
        {"id": "plain-2", "text": "y", "schema": json.dumps({"type": "object"})},
    ]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    output = json.dumps({"code": "a" * 60 + "!"})
    summary = _run(canned_job(out, data, output, **PER_ROW, runtime={"shards_in_flight": 2}))  # both shards on the one replica at once
    assert summary.ok and summary.shards == 2 and manifest(out)["status"] == "complete"
    assert_exactly_once(out, {"slow", "issue", "plain-1", "plain-2"})
    rejects = {r["row_id"]: r for r in read_dir(out, "rejects")}
    assert set(rejects) == {"slow"} and rejects["slow"]["reason"] == "error"
    assert "'^(a|aa)+$' ran past the 2s limit" in rejects["slow"]["error"] and "backtracks catastrophically" in rejects["slow"]["error"]


def test_a_row_schema_that_is_not_json_rejects_that_row_alone(tmp_path):
    """Defect 5: one row's ``"not json {"`` failed its whole shard (9 rows), on every rerun."""
    rows = [{"id": f"ok-{i}", "text": "x", "schema": json.dumps({"type": "object"})} for i in range(7)]
    rows[2:2] = [
        {"id": "not-json", "text": "x", "schema": "not json {"},
        {"id": "a-list", "text": "x", "schema": "[1, 2]"},
        {"id": "bad-keyword", "text": "x", "schema": json.dumps({"properties": [1]})},
    ]  # crashed the grounding check
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    raw = canned_job(out, data, "{}", **PER_ROW, runtime={"shard_size": 10})
    summary = _run(raw)
    assert summary.ok and summary.shards == 1 and summary.records == 7 and summary.rejects == 3
    rejects = {r["row_id"]: r["error"] for r in read_dir(out, "rejects")}
    assert rejects == {
        "not-json": "row 'not-json': its schema (schema) is not JSON: Expecting value at character 0",
        "a-list": "row 'a-list': its schema (schema) is a JSON list, not a JSON Schema object",
        "bad-keyword": "row 'bad-keyword': its schema cannot be used: not a valid JSON Schema at properties: [1] is not of type 'object'",
    }
    again = _run(raw)
    assert again.ok and again.shards_resumed == 1 and again.shards_redone == 0
    assert_exactly_once(out, {r["id"] for r in rows})


def test_a_row_schemas_ref_to_a_file_or_a_url_reads_nothing_and_opens_no_connection(tmp_path):
    """Found clean by issue 28, and kept so: an untrusted ``$ref`` is that row's reject, never a read or a request."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/x"
        rows = [
            {"id": "file", "text": "x", "schema": json.dumps({"$ref": "file:///etc/passwd"})},
            {"id": "http", "text": "x", "schema": json.dumps({"type": "object", "properties": {"a": {"$ref": url}}})},
            {"id": "ok", "text": "x", "schema": json.dumps({"type": "object"})},
        ]
        out = tmp_path / "out"
        summary = _run(canned_job(out, write_jsonl(tmp_path / "in.jsonl", rows), '{"a": "root:x:0:0"}', **PER_ROW, runtime={"shard_size": 3}))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert summary.ok and summary.records == 1
    rejects = {r["row_id"]: r for r in read_dir(out, "rejects")}
    assert set(rejects) == {"file", "http"} and all(r["reason"] == "error" for r in rejects.values())
    assert "file:///etc/passwd" in rejects["file"]["error"] and url in rejects["http"]["error"]
    assert_exactly_once(out, {"file", "http", "ok"})


def test_a_damaged_shard_is_a_one_line_error_for_readers_and_redone_by_a_rerun(tmp_path, capsys):
    """A truncated or zero-byte shard file ended rerun, review and compare in ArrowInvalid until it was deleted by hand."""
    ids = ["a", "b", "c", "d"]
    data = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": i} for i in ids])
    out = tmp_path / "out"
    raw = canned_job(out, data, "{}", constraint={"json_schema": str(REPO / "tests/grounding/data/invoice_ungrounded.json")})
    assert _run(raw).shards == 2
    truncated = sorted(shard_files(out, "rejects"))[0]
    truncated.write_bytes(truncated.read_bytes()[:40])  # what a crash on a full disk elsewhere leaves
    sorted(shard_files(out, "stats"))[1].write_bytes(b"")

    capsys.readouterr()  # the run's progress bar
    for command in (lambda: review_command([str(out)]), lambda: compare_command([str(out), str(out)])):
        assert command() == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is damaged (" in err and "Traceback" not in err, err

    rerun = _run(raw)
    assert rerun.ok and rerun.shards_resumed == 0 and rerun.shards == 2
    assert_exactly_once(out, set(ids))
    assert manifest(out)["status"] == "complete" and compare_command([str(out), str(out)]) == 0


def test_replicas_are_capped_at_the_shards_to_decode(tmp_path, caplog):
    """``runtime.replicas=64`` for 3 shards started over 56 Ray workers and took 13 GB in a minute."""
    data = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "text": "x"} for i in range(6)])
    out = tmp_path / "out"
    raw = canned_job(
        out, data, "{}", constraint={"json_schema": str(REPO / "tests/grounding/data/invoice_ungrounded.json")}, runtime={"replicas": 64}
    )
    with caplog.at_level("WARNING", logger="fucina_jobs.pipeline.ray_pool"):
        summary = _run(raw)
    assert summary.ok and summary.shards == 3
    assert "runtime.replicas=64: starting 3, one per shard to decode" in caplog.text
    assert {s["replica"] for s in read_dir(out, "stats")} <= {0, 1, 2}
    assert_exactly_once(out, {f"r{i}" for i in range(6)})


def test_fresh_on_a_run_of_ours_keeps_the_users_own_logs(tmp_path):
    """Defect 6, beside a run of ours: output.fresh=true deleted ``logs/replica-set-rs0.log`` (a replica set's log, the user's)."""
    data = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "x"}])
    out = tmp_path / "out"
    raw = canned_job(out, data, "{}", constraint={"json_schema": str(REPO / "tests/grounding/data/invoice_ungrounded.json")})
    _run(raw)
    theirs = out / "logs" / "replica-set-rs0.log"
    theirs.write_text("mongod")
    assert (out / "logs" / "replica-0.log").exists()
    raw["output"]["fresh"] = True
    assert _run(raw).shards_resumed == 0
    assert theirs.read_text() == "mongod"
    assert_exactly_once(out, {"a"})
