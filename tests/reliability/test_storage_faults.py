"""Issue 45: a nightly run against failing storage ends every row exactly once, or stops in one line naming the path.

The object store is moto's S3 server behind a real HTTP proxy on 127.0.0.1
(``checks/faulty_store.py``) that answers chosen requests 503 SlowDown, 500 or
400 ExpiredToken, cuts their connection (before the answer, or half-way through
an upload or an object's bytes) or stalls them; the job's own pyarrow S3 client
talks to it. Each fault the proxy serves costs one retry (``s3_retries.py``:
the SDK makes one attempt a request), so the counts are exact. The full disk is
a real 160 KiB tmpfs (root only: skipped elsewhere). The engine is the canned
one: the storage is under test, not the model.
"""

from __future__ import annotations

import errno
import json
import subprocess

import pyarrow as pa
import pytest

from checks.faulty_store import BUCKET, Rule, S3Store
from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.config import ConfigError, DatasetConfig, validate
from fucina_jobs.data.dataset import DatasetChanged, read_slice, scan
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.data import RunDir
from fucina_jobs.data.s3_retries import retries
from fucina_jobs.data.storage import Storage, StoreError

from tests.helpers import REPO, assert_exactly_once, manifest, once_on_dispatch, shard_files

pytestmark = pytest.mark.slow

ROWS = 12


@pytest.fixture(scope="module")
def store():
    """The failing store, started before Ray so that the replicas inherit its credentials; each test sets its own rules."""
    with S3Store() as s:
        yield s


@pytest.fixture
def rules(store):
    yield store.rules
    store.rules.clear()


def _job(tmp_path, out: str) -> dict:
    data = tmp_path / "in.jsonl"
    generate(data, ROWS)
    return job_config(data, out, 1, 2) | {"runtime": {"replicas": 1, "shard_size": 2, "max_retries": 1}}


IDS = {f"r{i:08d}" for i in range(ROWS)}


def _shard_retries(out: str) -> list[int]:
    """Each committed shard's ``store_retries`` (its stats row: the retries before its commit)."""
    return RunDir.open(out).read("stats", ["store_retries"]).column("store_retries").to_pylist()


def test_a_store_that_throttles_commits_a_few_times_is_retried_counted_and_every_row_lands_once(store, rules, local_ray, tmp_path):
    out = store.uri("runs/throttled")
    rules.append(Rule(method="PUT", key="/stats/", fault="slowdown", times=4))
    rules.append(Rule(method="PUT", key="/records/", fault="cut", times=2))
    summary = Job(validate(_job(tmp_path, out)), REPO).run()
    assert summary.ok and summary.retries == 0, "the store's retries absorbed every fault: no shard was decoded twice"
    assert [r.hits for r in rules] == [4, 2]
    assert summary.store_retries == 6 and manifest(out)["totals"]["store_retries"] == 6, "one retry for each fault served"
    assert sum(_shard_retries(out)) == 2, "a stats row counts its shard's records and rejects, not its own upload"
    assert manifest(out)["status"] == "complete"
    assert_exactly_once(out, IDS)


def test_connections_cut_mid_upload_and_mid_read_and_a_stalled_request_are_retried_and_counted(store, rules, local_ray, tmp_path):
    """The dataset and the outputs on the store: the scan's and the replicas' reads, and the commits, through the faults."""
    raw = _job(tmp_path, store.uri("runs/cut"))
    store.put("data/cut-run.jsonl", (tmp_path / "in.jsonl").read_bytes())
    raw["dataset"]["path"] = store.uri("data/cut-run.jsonl")
    rules.append(Rule(method="HEAD", key="/data/cut-run.jsonl", fault="stall", times=1))  # past the SDK's 3 s without an answer
    rules.append(Rule(method="GET", key="/data/cut-run.jsonl", fault="drop", times=3))  # half the bytes, then the connection cut
    rules.append(Rule(method="PUT", key="/rejects/", fault="drop", times=2))  # cut half-way through the upload
    summary = Job(validate(raw), REPO).run()
    assert [r.hits for r in rules] == [1, 3, 2]
    assert summary.ok and summary.retries == 0 and summary.store_retries == 6
    assert sum(_shard_retries(store.uri("runs/cut"))) >= 2, "the rejects' uploads, made by the replicas' unpickled filesystems"
    assert_exactly_once(store.uri("runs/cut"), IDS)


def test_commits_the_store_keeps_refusing_stop_the_run_in_one_line_and_a_rerun_ends_every_row_once(store, rules, local_ray, tmp_path):
    out = store.uri("runs/refused")
    raw = _job(tmp_path, out)
    rules.append(Rule(method="PUT", key="/stats/", fault="internal"))
    with pytest.raises(StoreError) as stop:
        Job(validate(raw), REPO).run()
    message = stop.value.strerror
    assert message.startswith("not written, the store still failing after 5 attempts (") and "\n" not in message, message
    assert stop.value.filename.startswith(f"s3://{BUCKET}/runs/refused/") and "/stats/" in stop.value.filename
    m = manifest(out)
    assert m["status"] == "failed" and "not written, the store still failing" in m["error"] and m["shards"] == []
    assert m["totals"]["store_retries"] == 4, "the driver's 4 retries of the commit that stopped the run (a failed attempt's are lost)"
    assert shard_files(out, "stats") == [] and shard_files(out, "records") == [], "no shard committed, no leftover kept"

    rules.clear()  # the store answers again
    again = Job(validate(raw), REPO).run()
    assert again.ok and again.shards_resumed == 0
    assert again.store_retries == 0 and manifest(out)["totals"]["store_retries"] == 0 and set(_shard_retries(out)) == {0}, "a clean run"
    assert manifest(out)["status"] == "complete"
    assert_exactly_once(out, IDS)


def test_credentials_that_expire_mid_run_stop_it_in_one_line_without_retrying_and_a_rerun_ends_every_row_once(store, rules, local_ray, tmp_path):
    out = store.uri("runs/expired")
    raw = _job(tmp_path, out) | {"runtime": {"replicas": 1, "shard_size": 2, "max_retries": 1, "shards_in_flight": 1}}
    before = retries()
    with pytest.raises(OSError) as stop:
        Job(validate(raw), REPO).run(once_on_dispatch(2, lambda: rules.append(Rule(fault="expired"))))  # every request from then on
    message = f"{stop.value.filename}: {stop.value.strerror}"
    assert stop.value.filename.startswith(f"s3://{BUCKET}/runs/expired/") and "The provided token has expired." in message and "\n" not in message
    assert retries() == before, "an expired token is not retried"
    assert rules[0].hits > 0
    rules.clear()  # fresh credentials
    again = Job(validate(raw), REPO).run()
    assert again.ok and again.shards_resumed >= 2 and again.store_retries == 0
    assert manifest(out)["status"] == "complete"
    assert_exactly_once(out, IDS)


def test_a_failed_upload_leaves_nothing_under_its_name(store, rules):
    """A stream that fails is closed by its ``with``, and that close would upload what was written: nothing may appear."""
    out = Storage.at(store.uri("runs/partial"), REPO)
    rules.append(Rule(method="PUT", key="/partial/", fault="cut"))
    with pytest.raises(StoreError, match="not written"):
        out.write_table(out.join("stats/shard-x.parquet"), pa.table({"rows": [1]}))
    rules.clear()
    assert out.list(out.root) == []


def test_an_object_cut_short_between_the_listing_and_the_read_is_an_error_naming_it(store, rules):
    body = b"".join(json.dumps({"id": f"r{i}", "text": f"Invoice {i}"}).encode() + b"\n" for i in range(40))
    store.put("data/cut.jsonl", body)
    cfg = DatasetConfig(path=store.uri("data/cut.jsonl"))
    # The first read of the object, after its listing: a nightly export rewrites it shorter (through moto, past the proxy).
    rules.append(Rule(method="GET", key="/data/cut.jsonl", fault=None, times=1, before=lambda: store.put("data/cut.jsonl", body[:100])))
    with pytest.raises(ConfigError) as err:
        scan(cfg, REPO)
    message = str(err.value)
    assert message.startswith(f"dataset.path s3://{BUCKET}/data/cut.jsonl changed while the scan read it: {len(body)} bytes")
    assert "100 bytes" in message and "\n" not in message


def test_an_input_the_store_keeps_failing_stops_the_scan_naming_the_object_not_the_file(store, rules):
    """After its retries a GET is the store's error, named by its object: not "cannot read it to the end" of a damaged file."""
    store.put("data/refused.jsonl", b'{"id": "r0", "text": "Invoice 0"}\n')
    rules.append(Rule(method="GET", key="/data/refused.jsonl", fault="internal"))
    with pytest.raises(OSError) as err:
        scan(DatasetConfig(path=store.uri("data/refused.jsonl")), REPO)
    assert err.value.filename == f"s3://{BUCKET}/data/refused.jsonl"
    assert err.value.strerror.startswith("the store still failing after 5 attempts (AWS Error UNKNOWN (HTTP status 500)")
    assert rules[0].hits == 5


def test_a_file_cut_short_after_the_scan_is_named_by_the_replica_not_read_as_fewer_rows(tmp_path):
    path = tmp_path / "in.jsonl"
    generate(path, 6)
    cfg = DatasetConfig(path=str(path))
    index = scan(cfg, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetChanged, match=rf"^dataset.path changed during the run: {path} is cut short \(\d+ bytes.*; {len(data)} bytes"):
        read_slice(cfg, index.slice(index.table.slice(3, 3)))


@pytest.fixture
def small_disk(tmp_path):
    """A real 160 KiB filesystem (tmpfs): root only. A run sets 64 KiB of it aside (``rundir.RESERVE_BYTES``), shards fill the rest."""
    path = tmp_path / "disk"
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("no tmpfs can be mounted here (root only)")
    yield path
    subprocess.run(["umount", str(path)], check=True)


def test_a_full_disk_commits_no_partial_shard_and_a_rerun_with_space_ends_every_row_once(small_disk, local_ray, tmp_path):
    out = small_disk / "out"
    raw = _job(tmp_path, str(out)) | {"runtime": {"replicas": 1, "shard_size": 1, "max_retries": 0}}
    with pytest.raises(OSError) as full:
        Job(validate(raw), REPO).run()
    assert full.value.errno == errno.ENOSPC and full.value.filename.startswith(str(out)), full.value
    failed = RunDir.open(out).read("stats", ["failed"]).column("failed").to_pylist()  # a failed shard's rejects may have fit
    assert 0 < len(failed) < ROWS, "the disk filled part-way"
    assert manifest(out)["status"] == "failed", "the reserve made room for the manifest that says so"
    assert not [p for p in out.rglob("*") if p.name.startswith((".shard-", ".reserve"))], "no temporary of a failed write, no reserve, is left"
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)  # the user frees space
    again = Job(validate(raw), REPO).run()
    assert again.ok and (again.shards_resumed, again.shards_redone) == (failed.count(False), failed.count(True))
    assert_exactly_once(out, IDS)
