"""Issue 28, dataset input, through whole runs on a real local Ray with the null engine.

A dataset replaced or moved while the run runs, a compressed dataset, a text_dir
with a symlink loop and a row nested 100,000 deep: each run ends with a final
manifest and every row exactly once, and a rerun completes what is left. The
null engine answers at once, so a run costs Ray's round trips and little else.
"""

import gzip
import json
import os
import subprocess
import sys

import pytest

from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.run_info import file_hash

from tests.helpers import REPO, assert_exactly_once, manifest, once_on_dispatch, read_dir

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]


def _job(data, out, **changes) -> Job:
    raw = job_config(data, out, 1, 2)
    raw["runtime"] |= {"shards_in_flight": 1}  # one shard at a time: the fault lands between two shards
    for key, value in changes.items():
        raw[key] = {**raw[key], **value}
    return Job(validate(raw), REPO)


def _ids(data) -> list[str]:
    return [json.loads(line)["id"] for line in data.read_text().splitlines()]


def test_a_dataset_replaced_during_the_run_fails_the_shards_it_changed_and_a_rerun_completes(tmp_path):
    """Defect 1: the run said `complete`, decoded a row it never scanned and skipped one it did; the hash was the new file's."""
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 8)
    scanned, scanned_hash = _ids(data), file_hash(data)

    def nightly_export():  # one row added at the top, the file replaced atomically
        tmp = tmp_path / ".in.jsonl.part"
        tmp.write_text(json.dumps({"id": "new", "text": "Invoice N-1 from Acme"}) + "\n" + data.read_text())
        os.replace(tmp, data)

    first = _job(data, out).run(once_on_dispatch(1, nightly_export))
    m = manifest(out)
    assert not first.ok and m["status"] == "failed" and m["hashes"]["dataset"] == scanned_hash
    assert_exactly_once(out, set(scanned))  # every row the plan holds, once; none it does not ("new")
    changed = [r for r in read_dir(out, "rejects") if "changed during the run" in (r["error"] or "")]
    assert len(changed) >= 4 and all("rerun" in r["error"] for r in changed)

    rerun = _job(data, out).run()
    assert rerun.ok and rerun.shards_resumed >= 1 and manifest(out)["status"] == "complete"
    assert manifest(out)["hashes"]["dataset"] == file_hash(data)
    assert_exactly_once(out, set(_ids(data)))


def test_a_dataset_moved_during_the_run_ends_failed_with_every_row_accounted_for(tmp_path):
    """Tracebacks list: exit 1, "could not record the run's end", manifest `running`, the failed shard's rows unwritten."""
    data, out = tmp_path / "in.jsonl", tmp_path / "out"
    generate(data, 6)
    moved = tmp_path / "moved.jsonl"
    first = _job(data, out).run(once_on_dispatch(1, lambda: data.rename(moved)))
    m = manifest(out)
    assert not first.ok and m["status"] == "failed" and m["hashes"]["dataset"] == file_hash(moved)
    assert_exactly_once(out, set(_ids(moved)))
    gone = [r["error"] for r in read_dir(out, "rejects") if "is gone, moved or deleted during the run" in (r["error"] or "")]
    assert len(gone) >= 2
    with pytest.raises(ConfigError, match="does not exist"):
        _job(data, out)
    moved.rename(data)  # put back
    assert _job(data, out).run().ok and manifest(out)["status"] == "complete"
    assert_exactly_once(out, set(_ids(data)))


def test_a_compressed_dataset_and_hostile_rows_end_once_and_rerun_to_nothing(tmp_path):
    """Defect 2 and the RecursionError on every rerun: a gzip dataset across shards, with a row nested 100,000 deep."""
    plain, data, out = tmp_path / "plain.jsonl", tmp_path / "in.jsonl.gz", tmp_path / "out"
    generate(plain, 7)
    lines = plain.read_text().splitlines()
    lines.insert(3, json.dumps({"id": "deep", "text": "x"})[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    data.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    first = _job(data, out).run()
    assert first.ok and first.rows == 8 and first.shards == 4
    rejects = {r["row_id"]: r["error"] for r in read_dir(out, "rejects")}
    assert rejects == {"in.jsonl.gz:4": "in.jsonl.gz:4: JSON nested deeper than 128 levels"}
    assert_exactly_once(out, {f"r{i:08d}" for i in range(7)} | {"in.jsonl.gz:4"})
    again = _job(data, out).run()
    assert again.ok and again.shards_resumed == 4 and again.shards == 4


def test_a_text_dir_with_a_symlink_loop_reads_each_fileonce_on_dispatch(tmp_path):
    """Defect 7 end to end, and defect 3: an output.dir inside the folder is refused before anything runs."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    for i in range(3):
        (docs / f"inv{i}.txt").write_text(f"Ref inv{i}. Invoice INV-{i} from Acme GmbH, total 12.50 EUR.")
    os.symlink(".", docs / "loop")
    os.symlink("gone.txt", docs / "dangling.txt")
    raw = {"dataset": {"path": str(docs), "format": "text_dir"}}
    with pytest.raises(ConfigError, match="is inside dataset.path"):
        _job(docs, docs / "out", **raw)
    assert not (docs / "out").exists()
    assert _job(docs, out, **raw).run().ok
    assert_exactly_once(out, {"inv0", "inv1", "inv2", "loop", "dangling"})
    rejects = {r["row_id"]: r["error"] for r in read_dir(out, "rejects")}
    assert "a link to a folder that is read already (a loop)" in rejects["loop"] and "dangling symlink" in rejects["dangling"]
    again = _job(docs, out, **raw).run()
    assert again.ok and again.shards_resumed == again.shards == 3


@pytest.mark.parametrize(
    "name, make, words",
    [
        (
            "utf16",
            lambda d: d.joinpath("in.jsonl").write_bytes('{"id": "a", "text": "x"}\n'.encode("utf-16")) and d / "in.jsonl",
            ["in.jsonl is UTF-16 text", "save it as UTF-8"],
        ),
        ("output_inside", lambda d: d, ["is inside dataset.path", "which holds only this command's cli.log"]),
        ("stdin", lambda d: "/dev/stdin", ["/dev/stdin is a named pipe", "save it to a file first"]),
    ],
)
def test_the_command_line_says_each_input_mistake_in_one_line(tmp_path, name, make, words):
    """No traceback: one line on stderr, exit 2, before any model loads (the other mistakes: test_input_files.py, on ``scan``)."""
    path = make(tmp_path)
    fmt = ["dataset.format=text_dir"] if name == "output_inside" else []
    res = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "run", "conf=extract_invoices", f"dataset.path={path}", *fmt, f"output.dir={tmp_path}/out"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        input="{}\n",
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and all(word in lines[0] for word in words), res.stderr
