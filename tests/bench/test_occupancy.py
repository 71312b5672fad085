"""``bench occupancy`` without a model: the rows it cycles and the table it prints."""

import json

from fucina_jobs.bench.inputs import DEFAULT_JOB
from fucina_jobs.bench.occupancy import _rows, format_occupancy


def test_rows_past_the_shipped_invoices_cycle_them_under_new_ids(tmp_path):
    shipped = [json.loads(line) for line in (DEFAULT_JOB / "inputs.jsonl").read_text().splitlines()]
    _rows(tmp_path / "rows.jsonl", len(shipped) + 2)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows[: len(shipped)] == shipped
    assert [r["id"] for r in rows[len(shipped) :]] == [f"{shipped[0]['id']}#1", f"{shipped[1]['id']}#1"]
    assert rows[len(shipped)]["text"] == shipped[0]["text"]


def test_the_table_has_one_line_per_arm():
    arm = {
        "shards": 3,
        "occupancy_min": 0.5,
        "occupancy_per_shard": [0.5, 1.0, 0.75],
        "wall_s": 12.34,
        "records": 24,
        "rejects": 0,
        "content_hash": "abc123",
    }
    text = format_occupancy({"rows": 24, "arms": [arm | {"held": 1, "occupancy_mean": 0.75}, arm | {"held": 2, "occupancy_mean": 0.9}]})
    lines = text.splitlines()
    assert lines[0] == "bench occupancy: the invoice job, 24 rows, 4 streams, shards of 8"
    assert len(lines) == 2 + 2 + 2  # title, blank, header and rule, two arms
    assert lines[-2].split()[:4] == ["1", "3", "0.750", "0.500"] and "0.50 1.00 0.75" in lines[-2] and lines[-1].split()[2] == "0.900"
