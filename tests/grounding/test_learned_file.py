"""The learned-cues file merged under a schema's own options: key by key, within ``lines`` too, in either spelling."""

import json

import pytest

from fucina_jobs.grounding import learned_file
from fucina_jobs.grounding.declaration import Lines, grounded_fields
from fucina_jobs.config import SHIPPED

SCHEMA = {"type": "object", "properties": {"shop": {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines"}}}}


def merged(own: dict, learned: dict) -> dict:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["shop"]["x-grounded"] = own
    return learned_file.apply(schema, {"shop": {"path": ["shop"], "x-grounded": learned}}, "test")["properties"]["shop"]["x-grounded"]


def test_own_options_win_key_by_key_within_lines_too():
    learned = {"lines": {"first": 3, "cut_before": "TEL", "ends_on": "BHD"}, "case": "upper"}
    own = {"span": "lines", "lines": {"first": 2}}
    assert merged(own, learned) == {"span": "lines", "case": "upper", "lines": {"first": 2, "cut_before": "TEL", "ends_on": "BHD"}}


def test_an_old_learned_file_merges_as_its_new_spelling_and_is_noted(caplog):
    old = {"first_lines": 3, "cut_before": "[0-9]{4,}|TEL", "ends_on": "BHD"}
    new = {"lines": {"first": 3, "cut_before": "[0-9]{4,}|TEL", "ends_on": "BHD"}}
    with caplog.at_level("WARNING"):
        from_old = merged({"span": "lines", "lines": {"first": 2}}, old)
    assert from_old == merged({"span": "lines", "lines": {"first": 2}}, new)  # the schema's own first still wins
    assert any("first_lines is lines.first" in r.message for r in caplog.records)
    (g,) = grounded_fields({"type": "object", "properties": {"shop": {**SCHEMA["properties"]["shop"], "x-grounded": from_old}}})
    assert g.lines == Lines(first=2, cut_before="[0-9]{4,}|TEL", ends_on="BHD")


@pytest.mark.parametrize("job", ["invoices", "receipts"])
def test_the_shipped_learned_files_write_only_the_new_spelling(job):
    document = json.loads((SHIPPED / f"jobs/{job}/learned.json").read_text(encoding="utf-8"))
    old = {"first_lines", "starts_on", "ends_on", "shortest", "cut_before", "to_block_end", "within_line", "largest", "smallest", "prefer_labels"}
    assert all(not old & set(field["x-grounded"]) for field in document["fields"].values())
    assert grounded_fields(json.loads((SHIPPED / "schemas/invoice.json").read_text(encoding="utf-8")))  # and the schemas read
