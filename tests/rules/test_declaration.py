"""``x-rules`` in a JSON schema: the forms a rule takes, and the one-line errors a bad one gets before any model loads."""

import json
import re

import pytest
import ray

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.rules.declaration import field_types, rules_of
from fucina_jobs.rules.expression import RuleError

from fucina_jobs.config import SHIPPED
from tests.helpers import REPO, job_dict

pytestmark = pytest.mark.usefixtures("without_ray")  # each checks that no Ray started

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "customer": {"type": ["string", "null"]},
        "currency": {"enum": ["USD", "EUR", None]},
        "issued": {"type": "string", "format": "date"},
        "total": {"type": "number"},
        "lines": {"type": "integer"},
        "paid": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "number"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def with_rules(*rules):
    return {**SCHEMA, "x-rules": list(rules)}


def test_the_fields_a_rule_can_read_and_their_types():
    assert field_types(SCHEMA) == {
        "vendor": "string",
        "customer": "string",
        "currency": "string",
        "issued": "date",
        "total": "number",
        "lines": "number",
        "paid": "bool",
        "address.city": "string",
    }


def test_a_rule_is_a_string_or_an_object():
    rules = rules_of(with_rules("vendor != customer", {"name": "positive", "check": "total > 0", "tolerance": 0.01}))
    assert [(r.name, r.expression.text, str(r.tolerance)) for r in rules] == [
        ("vendor != customer", "vendor != customer", "0"),
        ("positive", "total > 0", "0.01"),
    ]
    assert rules[1].explain({"total": -3}) == "positive: total > 0 (total=-3)"
    assert not rules[1].holds({"total": -3}) and rules[1].holds({"total": 3}) and rules[1].holds({})


def test_the_shipped_invoice_schema_declares_rules_its_gold_labels_keep():
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    rules = rules_of(schema)
    assert {r.name for r in rules} == {"amounts_add_up", "tax_below_subtotal", "due_after_issue"}
    for line in (SHIPPED / "jobs/invoices/gold.jsonl").read_text().splitlines():
        label = json.loads(line)["label"]
        assert [r.name for r in rules if not r.holds(label)] == [], label


@pytest.mark.parametrize(
    "declared, message",
    [
        ("total > 0", "x-rules must be a list of rules, not str"),
        (["totl > 0"], "x-rules[0] ('totl > 0'): unknown field 'totl'"),
        (["total > 0", {"check": "issued > total"}], "x-rules[1] ('issued > total'): 'issued > total': 'issued' is a date and 'total' a number"),
        ([{"check": "items > 0"}], "x-rules[0] ('items > 0'): unknown field 'items'"),
        ([{"name": "x"}], "x-rules[0]: a rule is a string, or an object with a 'check' string"),
        ([{"check": "total > 0", "tolrance": 1}], "x-rules[0]: unknown key(s) ['tolrance']"),
        ([{"check": "total > 0", "tolerance": -1}], "x-rules[0] ('total > 0'): tolerance must be a number >= 0"),
        (["total > 0", "total > 0"], "x-rules[1]: the name 'total > 0' is taken by an earlier rule"),
    ],
)
def test_bad_declarations_name_the_rule_and_what_is_wrong(declared, message):
    with pytest.raises(RuleError, match=re.escape(message)):
        rules_of({**SCHEMA, "x-rules": declared})


def test_rules_belong_at_the_root():
    nested = {**SCHEMA, "properties": {**SCHEMA["properties"], "address": {**SCHEMA["properties"]["address"], "x-rules": ["city != ''"]}}}
    with pytest.raises(RuleError, match="properties/address/x-rules: x-rules applies at the schema's root only"):
        rules_of(nested)


def test_a_bad_rule_in_the_job_schema_is_a_config_error_before_any_model_loads(tmp_path):
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    schema["x-rules"].append({"name": "typo", "check": "subtotl <= total"})
    (tmp_path / "invoice.json").write_text(json.dumps(schema))
    cfg = validate(job_dict(tmp_path / "out", constraint={"json_schema": str(tmp_path / "invoice.json")}))
    expected = f"constraint.json_schema: {tmp_path / 'invoice.json'}: x-rules[3] ('subtotl <= total'): unknown field 'subtotl'"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        Job(cfg, REPO)  # the driver checks the job before Ray starts or a model loads
    assert not ray.is_initialized()
