"""The output layout (``RunDir``) without a job: versions, partitions, leftovers, and what readers pick."""

import datetime as dt

import pyarrow as pa

from fucina_jobs.data.rundir import RunDir, run_name
from fucina_jobs.data.storage import write_json, write_table

from tests.helpers import REPO, read_dir


def _version(out, fingerprint: str, run: str | None = None) -> RunDir:
    version = RunDir.for_config(str(out), REPO, fingerprint * 64)
    version.run = run
    return version


def _shard(version: RunDir, key: str, ids: list[str], commit: bool = True) -> None:
    version.write_outputs(key, pa.table({"row_id": ids}), pa.table({"row_id": pa.array([], pa.string())}))
    if commit:
        version.commit(key, pa.table({"row_ids": [ids], "row_digests": [["d"] * len(ids)], "failed": [False], "records": [len(ids)], "rejects": [0]}))


def test_shards_live_in_hive_partitions_of_their_version(tmp_path):
    version = _version(tmp_path, "a", "20261130T120501Z")
    assert version.file("stats", "k1") == f"{tmp_path}/version={'a' * 12}/stats/run=20261130T120501Z/shard-k1.parquet"
    _shard(version, "k1", ["x"])
    version.run = "20261201T020000Z"
    _shard(version, "k2", ["y", "z"])
    assert sorted((s.key, s.run, s.records) for s in version.committed()) == [("k1", "20261130T120501Z", 1), ("k2", "20261201T020000Z", 2)]
    assert sorted((r["row_id"], r["run"]) for r in read_dir(tmp_path, "records")) == [
        ("x", "20261130T120501Z"),
        ("y", "20261201T020000Z"),
        ("z", "20261201T020000Z"),
    ]


def test_a_new_run_never_takes_a_partition_name_in_use(tmp_path):
    """This second's name and the next are taken: the new run waits for a third, later than both."""
    now = dt.datetime.now(dt.timezone.utc)
    taken = [run_name(now), run_name(now + dt.timedelta(seconds=1))]
    version = _version(tmp_path, "a", taken[0])
    _shard(version, "k1", ["x"])
    version.run = taken[1]
    _shard(version, "k2", ["y"])
    name = version.start_run()
    assert name == version.run and name > max(taken)


def test_leftovers_are_uncommitted_shards_and_temporaries_in_any_partition(tmp_path):
    version = _version(tmp_path, "a", "20261130T120501Z")
    _shard(version, "kept", ["x"])
    version.run = "20261201T020000Z"
    _shard(version, "half", ["y"], commit=False)
    temporary = tmp_path / f"version={'a' * 12}" / "records" / "run=20261201T020000Z" / ".shard-half.parquet.1234"
    temporary.write_bytes(b"partial")
    assert version.remove_leftovers() == 3  # half's records and rejects, and the temporary
    assert [(f.kind, f.key) for f in sorted(version.shard_files())] == [("records", "kept"), ("rejects", "kept"), ("stats", "kept")]


def test_readers_take_the_newest_version_then_a_folder_from_before_versions(tmp_path):
    write_table(tmp_path / "records" / "shard-old.parquet", pa.table({"row_id": ["legacy"]}))
    write_json(tmp_path / "manifest.json", {"started": "2026-11-01T00:00:00+00:00"})
    assert [r["row_id"] for r in read_dir(tmp_path, "records")] == ["legacy"] and RunDir.open(tmp_path).path == str(tmp_path)
    for fingerprint, started in (("b", "2026-11-30T02:00:00+00:00"), ("a", "2026-11-29T02:00:00+00:00")):
        version = _version(tmp_path, fingerprint, "20261130T020000Z")
        version.write_manifest({"started": started})
        _shard(version, "k", [fingerprint])
    assert RunDir.open(tmp_path).version == "b" * 12
    assert [r["row_id"] for r in read_dir(tmp_path, "records")] == ["b"]
    assert [r["row_id"] for r in read_dir(tmp_path / f"version={'a' * 12}", "records")] == ["a"]
