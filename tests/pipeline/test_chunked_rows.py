"""Chunked rows through the whole data path (real Ray, engine=canned: every chunk gets the canned output): one record a row."""

import json

import pytest

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, job_dict, read_dir

pytestmark = pytest.mark.usefixtures("local_ray")

SCHEMA = {
    "type": "object",
    "required": ["receipts"],
    "properties": {
        "receipts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["company", "date"],
                "additionalProperties": False,
                "properties": {"company": {"type": "string", "x-grounded": True}, "date": {"type": "string", "format": "date", "x-grounded": True}},
            },
        }
    },
}
RECEIPT = "ACME SDN BHD\nNO 5, JALAN BUKIT\nDATE 02/01/2019\nTHANK YOU"
CANNED = {"receipts": [{"company": "ACME SDN BHD", "date": "2019-01-02"}]}


def _job(tmp_path, rows, chunking=None, output=CANNED):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    chunking = {"enabled": True, "max_tokens": 48, "overlap_tokens": 20} if chunking is None else chunking
    raw = job_dict(
        tmp_path / "out",
        constraint={"json_schema": str(schema)},
        dataset={"path": str(data), "limit": None, "chunking": chunking},
        runtime={"replicas": 1, "shard_size": 2},
        prompt={"system": "", "template": "{text}"},
    )
    raw["engine"] = {"name": "canned", "output": json.dumps(output)}
    return Job(validate(raw), REPO)


def test_a_long_row_is_one_record_from_its_chunks_and_a_short_one_is_decoded_whole(tmp_path):
    long = "\n\n".join([RECEIPT] * 6)  # six receipts of the same shop: six items, at six places
    summary = _job(tmp_path, [{"id": "long", "text": long}, {"id": "short", "text": RECEIPT}]).run()
    assert_exactly_once(tmp_path / "out", {"long", "short"})
    records = {r["row_id"]: r for r in read_dir(tmp_path / "out", "records")}
    assert records["short"]["chunk_count"] == 1 and records["short"]["field_chunks"] is None
    assert dict(records["short"]["field_spans"])["receipts[0].company"] == [0, 12], "a row decoded whole: spans in its own text"
    row = records["long"]
    chunks = row["chunk_count"]
    assert chunks > 2 and summary.chunking == {"chunked_rows": 1, "chunks": chunks, "merge_conflicts": 0, "overlap_duplicates": 0}
    merged = json.loads(row["text"])
    assert merged["receipts"] == CANNED["receipts"] * len(merged["receipts"])
    spans = dict(row["field_spans"])
    starts = [spans[f"receipts[{i}].company"][0] for i in range(len(merged["receipts"]))]
    assert starts == sorted(set(starts)) and all(long[s : s + 12] == "ACME SDN BHD" for s in starts), "one item per place in the whole text"
    assert sorted(set(dict(row["field_chunks"]).values())) == list(range(chunks))
    [stats] = [s for s in read_dir(tmp_path / "out", "stats") if "long" in s["row_ids"]]
    assert (stats["chunked_rows"], stats["chunks"]) == (1, chunks)


def test_an_item_in_the_overlap_is_written_once(tmp_path):
    """One paragraph of 99 tokens, cut at a line: the shop and date lines are in both chunks, the same occurrence, one item."""
    text = "\n".join([*(f"ITEM {i} 1.00" for i in range(4)), "ACME SDN BHD", "DATE 02/01/2019", *(f"ITEM {i} 2.00" for i in range(4, 8))])
    summary = _job(tmp_path, [{"id": "r", "text": text}], chunking={"enabled": True, "max_tokens": 60, "overlap_tokens": 24}).run()
    [row] = read_dir(tmp_path / "out", "records")
    assert row["chunk_count"] == 2 and summary.chunking["overlap_duplicates"] == 1
    assert json.loads(row["text"]) == CANNED


def test_a_chunk_that_fails_makes_the_row_a_reject_naming_the_chunk(tmp_path):
    """The canned receipt is in the first chunk's text only: the other chunks' copies are ungrounded there."""
    text = RECEIPT + "\n\n" + "\n".join(f"OTHER LINE {i}" for i in range(40))
    _job(tmp_path, [{"id": "r", "text": text}]).run()
    [reject] = read_dir(tmp_path / "out", "rejects")
    assert reject["reason"] == "ungrounded" and reject["error"].startswith("chunk 2 of ")
    assert read_dir(tmp_path / "out", "records") == []


def test_chunking_needs_a_json_schema_and_rules_that_apply(tmp_path):
    job = job_dict(tmp_path / "out", dataset={"chunking": {"enabled": True}})
    job["constraint"] = {"regex": "schemas/contact.regex"}
    with pytest.raises(ConfigError, match="dataset.chunking merges chunk records as their JSON schema says; constraint.regex has none"):
        Job(validate(job), REPO)
    schema = tmp_path / "bad.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "number", "x-merge": "sum"}}}))
    with pytest.raises(ConfigError, match="properties/n: x-merge='sum' does not apply to a scalar"):
        Job(validate(job_dict(tmp_path / "out", constraint={"json_schema": str(schema)}, dataset={"chunking": {"enabled": True}})), REPO)


def _write(tmp_path, text, finishes):
    """The writer's record for one row of two chunks, decoded with these finish reasons (a list the second kept filling)."""
    from fucina_jobs.pipeline.chunking import Chunk, chunk_id, gather
    from fucina_jobs.data.dataset import Row
    from fucina_jobs.pipeline.job_constraint import read_constraint
    from fucina_jobs.data.rundir import RunDir
    from fucina_jobs.pipeline.shard_writer import ShardWriter

    schema = tmp_path / "names.json"
    schema.write_text(
        json.dumps(
            {"type": "object", "required": ["party"], "properties": {"party": {"type": "array", "items": {"type": "string", "x-grounded": True}}}}
        )
    )
    cfg = validate(job_dict(tmp_path / "out", constraint={"json_schema": str(schema)}, dataset={"chunking": {"enabled": True}}))
    out = RunDir.for_config(str(tmp_path / "out"), REPO, "f" * 64)
    out.start_run()
    out.write_manifest({"run_id": "run"})
    half = text.index("\n\n") + 2
    pieces = [Chunk(0, 0, half), Chunk(1, half, len(text))]
    texts = ['{"party":["ACME, INC."]}', '{"party":["Foo LLC","Foo LLC","Foo LLC","Foo'] if finishes[0] == "stop" else ['{"party":["AC'] * 2
    outputs = [
        {"row_id": chunk_id("r", c.index), "text": t, "finish_reason": f, "generated_tokens": 7, "relaxations": []}
        for c, t, f in zip(pieces, texts, finishes)
    ]
    decoded = gather(outputs, {chunk_id("r", c.index): ("r", c) for c in pieces})
    ShardWriter(cfg, read_constraint(cfg.constraint, REPO), base=REPO, out=out, run_id="run").write(
        "k", 0, 0, [Row("r", 0, {"text": text})], decoded, {}
    )
    return read_dir(tmp_path / "out", "records"), read_dir(tmp_path / "out", "rejects")


def test_a_chunk_that_runs_out_of_tokens_is_left_out_and_the_row_is_still_a_record(tmp_path):
    text = "This agreement is between ACME, INC. and Foo LLC.\n\nFoo LLC shall keep it secret. Foo LLC agrees."
    [record], rejects = _write(tmp_path, text, ["stop", "length"])
    assert rejects == [] and json.loads(record["text"]) == {"party": ["ACME, INC."]}
    assert list(record["relaxations"]) == [f"chunk 2 of 2 (characters 51-{len(text)}) left out: it ran out of tokens after 7 (decoding.max_tokens)"]


def test_a_row_whose_every_chunk_runs_out_of_tokens_is_a_length_reject(tmp_path):
    records, [reject] = _write(tmp_path, "ACME, INC. signs.\n\nACME, INC. again.", ["length", "length"])
    assert records == [] and reject["reason"] == "length" and reject["error"].startswith("chunk 1 of 2")
