"""Documents past the model's context on a real local Ray: chunked, merged, written once.

One document of about 9,500 tokens (the shipped invoices, twice) with a one-field grounded
schema: the real model refuses it, naming its context (8,192 for SmolLM2) and the fix; chunked,
the model's own context decides the chunks. The chunked run decodes on a tiny random model with
the real vocabulary and a context of 1,024: the same pipeline, without prefilling 9,500 tokens
on these cores (90 s). A driver ``kill -9`` while chunked rows decode on the real model, and the
rerun: every row once, each record whole.
"""

import json
import re
import os
import signal
import subprocess
import sys
import time

import pytest

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import INVOICES, REPO, assert_exactly_once, invoice_rows, manifest, read_dir, shard_files, small_job, tiny_model_dir, write_jsonl

pytestmark = [pytest.mark.slow]

VENDOR = {"type": "object", "properties": {"vendor": {"type": "string", "maxLength": 32, "x-grounded": True}}, "required": ["vendor"]}


def _schema(tmp_path):
    path = tmp_path / "vendor.json"
    path.write_text(json.dumps(VENDOR))
    return str(path)


@pytest.mark.usefixtures("local_ray")
def test_a_document_past_the_context_is_chunked_merged_and_points_at_its_text(tmp_path):
    text = "\n\n".join(r["text"] for r in INVOICES + INVOICES)
    data = write_jsonl(tmp_path / "long.jsonl", [{"id": "long", "text": text}])
    sections = {"constraint": {"json_schema": _schema(tmp_path)}, "decoding": {"max_tokens": 24}, "runtime": {"shard_size": 1}}

    off = Job(validate(small_job(tmp_path / "off", data, **sections)), REPO).run()
    [reject] = read_dir(tmp_path / "off", "rejects")
    assert off.rejects == 1 and "exceeds the model's context of 8192 tokens" in reject["error"]
    assert "dataset.chunking.enabled=true" in reject["error"], "the reject says how to fix it"

    tiny = tiny_model_dir(tmp_path / "tiny")
    raw = small_job(tmp_path / "on", data, **sections, model={"source": str(tiny), "dtype": "float64"})
    raw["dataset"]["chunking"] = {"enabled": True}
    on = Job(validate(raw), REPO).run()
    assert on.chunking["chunked_rows"] == 1 and on.chunking["chunks"] >= 10, "9.5k tokens: chunks of a 1,024-token context's budget"
    [record] = read_dir(tmp_path / "on", "records")
    assert record["chunk_count"] == on.chunking["chunks"]
    value = json.loads(record["text"])["vendor"]
    spans, chunks = dict(record["field_spans"]), dict(record["field_chunks"])
    start, end = spans["vendor"]
    assert " ".join(text[start:end].split()) == value, "the span is the value's place in the whole document"
    assert chunks["vendor"] in range(record["chunk_count"]) and dict(record["field_confidence_mean"])["vendor"] > 0
    [stats] = read_dir(tmp_path / "on", "stats")
    assert stats["chunked_rows"] == 1 and stats["chunks"] == record["chunk_count"] and 9500 < stats["prompt_tokens"] <= 1024 * stats["chunks"]


def _command(out, data, schema):
    return [
        sys.executable,
        "-m",
        "fucina_jobs",
        "run",
        "conf=extract_invoices",
        f"dataset.path={data}",
        f"constraint.json_schema={schema}",
        "constraint.learned=null",  # the invoice job's cues are for its own schema
        "dataset.chunking.enabled=true",
        "dataset.chunking.max_tokens=64",
        "dataset.chunking.overlap_tokens=16",
        "decoding.max_tokens=24",
        "runtime.shard_size=1",
        "runtime.streams=2",
        f"output.dir={out}",
    ]


def test_a_driver_killed_while_chunked_rows_decode_leaves_no_half_row(tmp_path):
    """Shards of one row of 4-5 chunks each: killed once the first commits (the second's chunks are decoding), then rerun."""
    ids = ["c1", "c2", "c3"]
    data = write_jsonl(tmp_path / "in.jsonl", invoice_rows(ids))
    out = tmp_path / "out"
    command = _command(out, data, _schema(tmp_path))
    proc = subprocess.Popen(command, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not shard_files(out, "stats") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = len(shard_files(out, "stats"))
    assert 1 <= committed < 3, "killed after the first shard, before the last"
    assert len(shard_files(out, "records")) + len(shard_files(out, "rejects")) >= committed

    rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # A replica may still commit the shard it held after the driver's kill -9 (atomically): the rerun resumes at least
    # the shards committed before it.
    resumed = int(re.search(r"shards +3 \((\d+) resumed", rerun.stdout).group(1))
    assert committed <= resumed <= 3 and "chunked rows    3" in rerun.stdout, rerun.stdout
    assert_exactly_once(out, set(ids))
    records = read_dir(out, "records")
    assert all(r["chunk_count"] >= 3 for r in records) and manifest(out)["status"] == "complete"
    assert sum(s["chunks"] for s in read_dir(out, "stats")) >= 9
