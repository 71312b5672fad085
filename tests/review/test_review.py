"""``review RUN_DIR``: the least certain values first, from the records' confidence columns."""

import subprocess
import sys

from fucina_jobs.review.cli import format_review, least_certain

from tests.helpers import REPO, make_run

RECORDS = [
    {
        "row_id": "inv-1",
        "text": '{"vendor":"Acme \\"Tools\\"","items":[{"qty":3}]}',
        "record_confidence": 0.4,
        "field_confidence_min": {"vendor": 0.9, "items[0].qty": 0.4},
        "field_confidence_mean": {"vendor": 0.95, "items[0].qty": 0.4},
    },
    {
        "row_id": "inv-2",
        "text": '{"vendor":"Bolt","items":[]}',
        "record_confidence": 0.2,
        "field_confidence_min": {"vendor": 0.2},
        "field_confidence_mean": {"vendor": 0.5},
    },
    {"row_id": "inv-3", "text": "ab-12", "record_confidence": 0.7, "field_confidence_min": {}, "field_confidence_mean": {}},  # a Lark job
]


def test_least_certain_values_first(tmp_path):
    from fucina_jobs.eval.runs import read_run

    run = read_run(make_run(tmp_path / "run", RECORDS, []))
    rows = least_certain(run.records, limit=10)
    assert [(r["row_id"], r["field"], r["value"], r["confidence"]) for r in rows] == [  # by each value's mean
        ("inv-1", "items[0].qty", "3", 0.4),
        ("inv-2", "vendor", '"Bolt"', 0.5),
        ("inv-3", "", "ab-12", 0.7),
        ("inv-1", "vendor", '"Acme \\"Tools\\""', 0.95),
    ]
    assert len(least_certain(run.records, limit=2)) == 2
    table = format_review(rows[:1]).splitlines()
    assert table[0].split() == ["confidence", "record_id", "row_id", "field", "value"]
    assert table[1].split() == ["0.400", "r-inv-1", "inv-1", "items[0].qty", "3"]


def test_review_command(tmp_path):
    run_dir = make_run(tmp_path / "run", RECORDS, [])
    out = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "review", str(run_dir), "--limit", "1"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[:4] == ["0.400", "r-inv-1", "inv-1", "items[0].qty"] and len(out.stdout.splitlines()) == 2
    missing = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "review", str(tmp_path / "nothing")], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 2 and "holds no records/" in missing.stderr
