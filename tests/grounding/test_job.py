"""Grounding through the job pipeline with the real model: ``ungrounded`` rejects and the run alarm."""

import json

import pytest

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, job_dict, manifest, read_dir

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
ONE_REPLICA = {"replicas": 1, "streams": 2, "shard_size": 2}
SCHEMA = {
    "type": "object",
    "properties": {"vendor": {"type": "string", "maxLength": 40, "x-grounded": True}, "total": {"type": "number", "minimum": 0, "x-grounded": True}},
    "required": ["vendor", "total"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("where", ["job_schema", "row_schema"])
def test_a_value_the_document_does_not_write_is_rejected_as_ungrounded(tmp_path, where):
    inputs = tmp_path / "inputs.jsonl"
    rows = [
        {"id": "written", "text": "Invoice from Brightwater Supply Co. Total due: $572.34"},
        {"id": "unwritten", "text": "Invoice from Brightwater Supply Co. The total is on the second page."},
    ]
    if where == "row_schema":  # dataset.schema_field: each row carries its schema, grounded the same way
        rows = [{**r, "schema": SCHEMA} for r in rows]
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    raw = job_dict(
        tmp_path / "out",
        dataset={"path": str(inputs), "schema_field": "schema" if where == "row_schema" else None},
        prompt={"system": "Extract the seller and the total due.", "template": "{text}"},
        decoding={"max_tokens": 48},
        runtime=ONE_REPLICA,
    )
    raw["constraint"] = {"json_schema": str(tmp_path / "schema.json")} if where == "job_schema" else {}
    summary = Job(validate(raw), REPO).run()
    assert_exactly_once(tmp_path / "out", {"written", "unwritten"})
    records, rejects = read_dir(tmp_path / "out", "records"), read_dir(tmp_path / "out", "rejects")
    assert [r["row_id"] for r in records] == ["written"]
    assert json.loads(records[0]["text"])["total"] == 572.34  # the only number written: the grammar forces it
    spans = dict(records[0]["field_spans"])  # where each value sits in the row's text
    assert rows[0]["text"][slice(*spans["total"])] == "$572.34"
    assert rows[0]["text"][slice(*spans["vendor"])] == json.loads(records[0]["text"])["vendor"]
    # No number to take: no grammar could hold a true total, so the row is rejected before it is decoded.
    assert [(r["row_id"], r["reason"]) for r in rejects] == [("unwritten", "ungrounded")]
    assert rejects[0]["error"] == "the text writes no value for total (no number within the schema's bounds is written); decided before decoding"
    assert rejects[0]["text"] == ""
    assert summary.reasons == {"ungrounded": 1}
    assert summary.alarm["counts"]["ungrounded_values"] == [0, 2]  # nothing was made up: the one record's two values are grounded


def test_the_alarm_fires_on_a_run_that_copies_its_example(tmp_path):
    """The old shipped prompt: a worked example in the system prompt, no grounding. Its records copy the example."""
    data = "tests/grounding/data"
    raw = job_dict(
        tmp_path / "out",
        constraint={"json_schema": f"{data}/invoice_ungrounded.json"},
        prompt={"system": f"@{data}/system_with_example.txt", "template": f"@{data}/template_with_example.txt"},
        runtime=ONE_REPLICA,
    )
    summary = Job(validate(raw), REPO).run()
    assert summary.records == 4
    assert summary.alarm["shares"]["prompt_copies"] > 0.05
    assert any("copied from the prompt" in w for w in summary.alarm["warnings"])
    assert manifest(tmp_path / "out")["totals"]["alarm"]["warnings"] == summary.alarm["warnings"]
