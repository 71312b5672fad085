import datetime as dt
import json

import pyarrow as pa

from fucina_jobs.data.rundir import RunDir
from fucina_jobs.data.sink import Outcome, Validator, json_schema_fields, outcome_tables, record_schema
from fucina_jobs.config import SHIPPED

from tests.helpers import REPO

INVOICE = json.loads((SHIPPED / "schemas/invoice.json").read_text())
GOOD = json.loads((SHIPPED / "jobs/invoices/gold.jsonl").read_text().splitlines()[0])["label"]


def test_invoice_schema_maps_to_typed_columns():
    types = {f.name: f.type for f in json_schema_fields(INVOICE)}
    assert types["invoice_date"] == pa.date32() and types["total"] == pa.float64() and types["currency"] == pa.string()


def test_nested_schema_maps_to_struct_list_and_map():
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "who": {"type": "object", "properties": {"age": {"type": "integer"}}},
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "unit": {"enum": ["kg", "g", None]},
        },
    }
    types = {f.name: f.type for f in json_schema_fields(schema)}
    assert types == {
        "tags": pa.list_(pa.string()),
        "who": pa.struct([("age", pa.int64())]),
        "extra": pa.map_(pa.string(), pa.float64()),
        "unit": pa.string(),  # a null member is a null in the column
    }


def test_validator_reasons():
    v = Validator("json_schema", INVOICE)
    assert v(json.dumps(GOOD), "stop", None)[1] is None
    assert v('{"invoice_number": ', "stop", None)[1] == "invalid_json"
    bad = dict(GOOD, invoice_date="2025-13-45")
    record, reason, message = v(json.dumps(bad), "stop", None)
    assert reason == "schema_violation" and "invoice_date" in message
    assert v("{", "length", None)[1] == "length"
    assert v("", "error", "matcher failed")[1:] == ("error", "matcher failed")


def test_regex_validator_gives_named_groups():
    regex = (SHIPPED / "schemas/contact.regex").read_text().strip()
    v = Validator("regex", regex)
    assert v("Ada Lovelace | ada@example.org | +44 20 7946 0000", "stop", None)[0] == {
        "name": "Ada Lovelace",
        "email": "ada@example.org",
        "phone": "+44 20 7946 0000",
    }
    assert v("nobody", "stop", None)[1] == "schema_violation"


def test_outcomes_are_typed_and_accounted_then_written_into_the_run_partition(tmp_path):
    schema = record_schema(json_schema_fields(INVOICE))
    outcomes = [
        Outcome("inv-001", json.dumps(GOOD), "stop", prompt_tokens=10, generated_tokens=5, record=GOOD),
        Outcome("inv-002", "{", "length", prompt_tokens=10, generated_tokens=5, reason="length", error="budget"),
    ]
    records, rejects = outcome_tables(outcomes, schema, lambda r: "id-" + r)
    assert (records.num_rows, rejects.num_rows) == (1, 1)
    out = RunDir.for_config(str(tmp_path), REPO, "f" * 64)
    run = out.start_run()
    out.write_outputs("00003", records, rejects)
    (record,) = out.read("records").to_pylist()
    assert record["record_id"] == "id-inv-001" and isinstance(record["invoice_date"], dt.date) and record["total"] == GOOD["total"]
    assert record["run"] == run
    (reject,) = out.read("rejects").to_pylist()
    assert reject["reason"] == "length" and reject["text"] == "{"
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()], "no temporary files are left behind"


def test_pydantic_model_is_checked_after_the_schema():
    from pydantic import BaseModel, field_validator

    class Invoice(BaseModel):
        subtotal: float
        tax: float
        total: float

        @field_validator("total")
        @classmethod
        def _adds_up(cls, total, info):
            if abs(info.data["subtotal"] + info.data["tax"] - total) > 0.01:
                raise ValueError("total is not subtotal + tax")
            return total

    v = Validator("json_schema", INVOICE, Invoice)
    assert v(json.dumps(GOOD), "stop", None)[1] is None
    record, reason, message = v(json.dumps(dict(GOOD, total=GOOD["total"] + 5)), "stop", None)
    assert reason == "schema_violation" and "Invoice" in message and "subtotal + tax" in message


def test_a_shard_commits_only_while_the_manifest_names_its_run(tmp_path):
    """A replica that outlives a killed driver must not commit into the next run's plan."""
    import pytest

    from fucina_jobs.config import validate
    from fucina_jobs.data.dataset import Row
    from fucina_jobs.pipeline.job_constraint import read_constraint
    from fucina_jobs.pipeline.shard_writer import RunSuperseded, ShardWriter

    from tests.helpers import job_dict

    cfg = validate(job_dict(tmp_path))
    constraint = read_constraint(cfg.constraint, REPO)
    rows = [Row("a", 0, {"text": "x"}, "a problem")]
    out = RunDir.for_config(str(tmp_path), REPO, "f" * 64)
    out.start_run()
    out.write_manifest({"run_id": "new-run"})
    with pytest.raises(RunSuperseded):
        ShardWriter(cfg, constraint, base=REPO, out=out, run_id="old-run").write("k1", 0, 0, rows, [], {})
    assert not out.committed()
    summary = ShardWriter(cfg, constraint, base=REPO, out=out, run_id="new-run").write("k1", 0, 0, rows, [], {})
    assert summary.rejects == 1 and [s.key for s in out.committed()] == ["k1"]
