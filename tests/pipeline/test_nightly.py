"""Issue 13 point 4 with the canned engine: a run partition per run that decodes, a version per config.

The canned engine answers every row at once, so these runs cost Ray's start and
little else; what they check is the layout and what each rerun decodes.
"""

import json

import pyarrow.dataset as ds
import pytest

from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.data.rundir import RunDir

from tests.helpers import REPO, assert_exactly_once, manifest, read_dir, shard_files

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]


def _job(data, out, **changes):
    raw = job_config(data, out, 1, 10)
    for key, value in changes.items():
        raw[key] = {**raw[key], **value}
    return Job(validate(raw), REPO)


def _ids(rows: int) -> set[str]:
    return {f"r{i:08d}" for i in range(rows)}


def test_nightly_reruns_write_only_new_rows_into_a_new_partition_read_as_one_table(tmp_path):
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 30)
    first = _job(data, out).run()
    assert first.ok and first.shards == 3 and first.shards_resumed == 0
    night1 = manifest(out)["run"]

    with data.open("a") as f:  # the dataset grows by day
        f.write("".join(json.dumps({"id": f"new{i}", "text": f"Invoice N-{i} from Acme"}) + "\n" for i in range(5)))
    second = _job(data, out).run()
    assert second.ok and second.shards_resumed == 3 and second.shards == 4 and second.rows == 35
    night2 = manifest(out)["run"]
    assert night2 > night1 and manifest(out)["runs"] == [night1, night2]
    new = {f"new{i}" for i in range(5)}
    assert_exactly_once(out, _ids(30) | new)

    # Every partition as one table, the way a user reads it: pyarrow's hive partitioning gives the `run` column.
    version = RunDir.open(out)
    rows = [
        row
        for kind in ("records", "rejects")
        for row in ds.dataset(version.folder(kind), format="parquet", partitioning="hive").to_table(columns=["row_id", "run"]).to_pylist()
    ]
    assert sorted(r["row_id"] for r in rows) == sorted(_ids(30) | new)
    assert {r["row_id"] for r in rows if r["run"] == night2} == new, "the second night's partition holds only the new rows"

    third = _job(data, out).run()  # nothing new: no partition, nothing decoded
    assert third.ok and third.shards_resumed == 4 and third.shards == 4
    assert manifest(out)["run"] is None and manifest(out)["runs"] == [night1, night2]
    assert {r["run"] for r in read_dir(out, "stats")} == {night1, night2}


def test_a_config_change_is_a_new_version_and_fresh_restarts_only_its_own(tmp_path):
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 12)
    assert _job(data, out).run().ok
    old = manifest(out)
    old_files = {p: p.read_bytes() for kind in ("records", "rejects", "stats") for p in shard_files(out, kind)}

    changed = _job(data, out, prompt={"template": "Extract: {text}"}).run()  # a new fingerprint
    assert changed.ok and changed.shards_resumed == 0 and changed.rows == 12
    new = manifest(out)
    assert new["version"] != old["version"] and new["fingerprint"] != old["fingerprint"]
    assert sorted(p.name for p in out.glob("version=*")) == sorted(f"version={m['version']}" for m in (old, new))
    assert {p: p.read_bytes() for p in old_files} == old_files, "the old version is untouched"
    assert_exactly_once(out, _ids(12))  # the newest version
    assert_exactly_once(out / f"version={old['version']}", _ids(12))

    again = _job(data, out, prompt={"template": "Extract: {text}"}, output={"fresh": True}).run()
    assert again.ok and again.shards_resumed == 0
    assert_exactly_once(out, _ids(12))
    assert all(p.exists() for p in old_files), "output.fresh restarts this config's version only"


def test_a_shard_left_uncommitted_is_redone_into_the_new_partition(tmp_path):
    """What a kill between a shard's records and its commit leaves: the rerun redoes that shard alone."""
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 20)
    assert _job(data, out).run().ok
    night1 = manifest(out)["run"]
    victim = shard_files(out, "stats")[0]
    victim.unlink()

    rerun = _job(data, out).run()
    assert rerun.ok and rerun.shards_resumed == 1 and rerun.shards == 2
    assert_exactly_once(out, _ids(20))
    runs = [r["run"] for r in read_dir(out, "stats")]
    assert sorted(runs) == sorted([night1, manifest(out)["run"]])
