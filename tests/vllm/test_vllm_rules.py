"""Rules, repair and voting on ``engine=vllm``: the exclusion grammar goes through the guidance backend, and each
sample's temperature and seed through vLLM's per-request sampling parameters."""

import json

import pytest

from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from ..grounding.test_job import SCHEMA
from tests.helpers import REPO, assert_exactly_once, job_dict, read_dir

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]
ROWS = [
    {"id": "a", "text": "Invoice from Brightwater Supply Co. to Halden Robotics LLC. Total due: $572.34"},
    {"id": "b", "text": "Lindqvist Druck GmbH bills Nordlicht Bakery for 12 posters. Amount payable: EUR 2,850.05"},
]


def run(tmp_path, name, rows, samples):
    inputs = tmp_path / f"{name}.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = job_dict(
        tmp_path / name,
        engine={"name": "vllm"},
        dataset={"path": str(inputs), "schema_field": "schema"},
        prompt={"system": "Extract the seller and the total due.", "template": "{text}"},
        decoding={"max_tokens": 48, "samples": samples},
        runtime={"replicas": 1, "streams": 4, "shard_size": 2},
    )
    raw["constraint"] = {}
    Job(validate(raw), REPO).run()
    assert_exactly_once(tmp_path / name, {r["id"] for r in rows})
    return {r["row_id"]: r for r in read_dir(tmp_path / name, "records")}


def test_vllm_repairs_with_the_exclusion_grammar_and_votes_over_its_samples(tmp_path):
    first = run(tmp_path, "first", [r | {"schema": SCHEMA} for r in ROWS], samples=1)
    vendors = {row_id: json.loads(r["text"])["vendor"] for row_id, r in first.items()}
    assert vendors.keys() == {"a", "b"}
    ruled = [r | {"schema": SCHEMA | {"x-rules": [{"name": "not_first", "check": f"vendor != {json.dumps(vendors[r['id']])}"}]}} for r in ROWS]
    for row_id, record in run(tmp_path, "ruled", ruled, samples=1).items():
        vendor = json.loads(record["text"])["vendor"]
        assert vendors[row_id] not in vendor and vendor in ROWS[row_id == "b"]["text"]  # another span, still grounded
        assert record["rule_failures"] == ["not_first"] and record["repair_attempts"] == 1
    voted = run(tmp_path, "voted", [r | {"schema": SCHEMA} for r in ROWS], samples=3)
    assert voted.keys() == {"a", "b"}
    for record in voted.values():
        shares = dict(record["field_agreement"])
        assert shares.keys() == {"vendor", "total"} and {round(3 * share) for share in shares.values()} <= {1, 2, 3}
        assert record["record_agreement"] == min(shares.values())
