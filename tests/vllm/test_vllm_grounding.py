"""Grounded fields on ``engine=vllm``: the same per-row Lark grammar through the guidance backend, and the same post-check."""

import json

import pytest

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from ..grounding.test_job import ONE_REPLICA, SCHEMA
from tests.helpers import REPO, assert_exactly_once, job_dict, read_dir

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]


def test_vllm_grounds_values_and_rejects_ungrounded_ones(tmp_path):
    inputs = tmp_path / "inputs.jsonl"
    rows = [
        {"id": "written", "text": "Invoice from Brightwater Supply Co. Total due: $572.34"},
        {"id": "unwritten", "text": "Invoice from Brightwater Supply Co. The total is on the second page."},
    ]
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    raw = job_dict(
        tmp_path / "out",
        engine={"name": "vllm"},
        constraint={"json_schema": str(tmp_path / "schema.json")},
        dataset={"path": str(inputs)},
        prompt={"system": "Extract the seller and the total due.", "template": "{text}"},
        decoding={"max_tokens": 48},
        runtime=ONE_REPLICA,
    )
    summary = Job(validate(raw), REPO).run()
    assert_exactly_once(tmp_path / "out", {"written", "unwritten"})
    records, rejects = read_dir(tmp_path / "out", "records"), read_dir(tmp_path / "out", "rejects")
    assert [r["row_id"] for r in records] == ["written"]
    record = json.loads(records[0]["text"])
    assert record["total"] == 572.34 and record["vendor"] in rows[0]["text"]
    spans = dict(records[0]["field_spans"])  # found from the record and the text, as on the fucina engine
    assert rows[0]["text"][slice(*spans["total"])] == "$572.34" and rows[0]["text"][slice(*spans["vendor"])] == record["vendor"]
    assert [(r["row_id"], r["reason"]) for r in rejects] == [("unwritten", "ungrounded")]
    assert rejects[0]["text"] == ""  # no grammar could hold a true total: decided before decoding
    assert summary.alarm["counts"]["ungrounded_values"] == [0, 2]  # nothing made up: the one record's two values are grounded
