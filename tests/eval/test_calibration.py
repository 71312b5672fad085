"""Calibration and AUROC of field confidence, on hand-made inputs with known answers."""

import pytest

from fucina_jobs.eval.calibration import auroc, confidence_scores, expected_calibration_error, field_confidence, reliability
from fucina_jobs.eval.evaluate import evaluate
from fucina_jobs.config import validate

from tests.helpers import REPO, make_run


def test_auroc_on_known_rankings():
    assert auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert auroc([0.5] * 4, [True, False, True, False]) == 0.5  # ties count half
    # pairs (correct, wrong): (0.9,0.7) (0.9,0.3) (0.6,0.7) (0.6,0.3) (0.3,0.7) (0.3,0.3) -> 1+1+0+1+0+0.5 = 3.5 of 6
    assert auroc([0.9, 0.6, 0.3, 0.7, 0.3], [True, True, True, False, False]) == pytest.approx(3.5 / 6)
    assert auroc([0.9, 0.1], [True, True]) is None and auroc([], []) is None


def test_reliability_bins_and_calibration_error():
    table = reliability([0.05, 0.15, 0.95, 1.0, 0.99], [False, True, True, True, False], bins=10)
    assert [b["fields"] for b in table] == [1, 1, 0, 0, 0, 0, 0, 0, 0, 3]  # 1.0 falls in the last bin
    assert table[9]["accuracy"] == pytest.approx(2 / 3) and table[9]["mean_confidence"] == pytest.approx(0.98)
    assert table[2]["accuracy"] is None and table[0]["low"] == 0.0 and table[9]["high"] == 1.0
    expected = (0.05 + 0.85 + 3 * abs(2 / 3 - 0.98)) / 5
    assert expected_calibration_error(table) == pytest.approx(expected)
    assert expected_calibration_error(reliability([], [])) is None


def test_field_confidence_of_nested_values_is_their_least_certain_leaf():
    per_path = {"vendor": 0.9, "items[0].name": 0.7, "items[1].qty": 0.4, "items_total": 0.1}
    assert field_confidence(per_path, "vendor") == 0.9
    assert field_confidence(per_path, "items") == 0.4
    assert field_confidence(per_path, "missing") is None


def test_confidence_scores_against_gold():
    gold = {"a": {"vendor": "Acme", "total": 10}, "b": {"vendor": "Bolt", "total": 20}, "c": {"vendor": "Cog", "total": 5}}
    records = [
        {"row_id": "a", "field_confidence_min": [("vendor", 0.9), ("total", 0.2)], "field_confidence_mean": [("vendor", 0.95), ("total", 0.9)]},
        {"row_id": "b", "field_confidence_min": {"vendor": 0.3, "total": 0.95}, "field_confidence_mean": {"vendor": 0.45, "total": 0.97}},
        {"row_id": "z", "field_confidence_min": {"vendor": 0.1}, "field_confidence_mean": {"vendor": 0.1}},  # no gold: not scored
    ]
    predictions = {"a": {"vendor": "ACME", "total": 10.0}, "b": {"vendor": "Pinewood", "total": 20}, "c": None, "z": {"vendor": "?"}}
    c = confidence_scores(gold, records, predictions)
    assert c["fields_scored"] == 4  # the reject "c" has no confidence and is left out
    assert c["auroc"] == 1.0  # the one wrong field (b.vendor) is the least certain, by its mean
    assert c["auroc_of_min"] == pytest.approx(2 / 3)  # by the minimum, a.total (right) scores below it
    assert c["per_field"]["vendor"] == {"fields": 2, "mean_confidence": pytest.approx(0.7), "accuracy": 0.5}
    assert sum(b["fields"] for b in c["bins"]) == 4 and c["expected_calibration_error"] is not None


def test_eval_of_an_existing_run_reports_calibration(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": "a", "label": {"vendor": "Acme", "total": 10}}\n{"id": "b", "label": {"vendor": "Bolt", "total": 20}}\n')
    records = [
        {
            "row_id": "a",
            "text": '{"vendor":"Acme","total":10}',
            "record_confidence": 0.8,
            "field_confidence_min": {"vendor": 0.9, "total": 0.8},
            "field_confidence_mean": {"vendor": 0.95, "total": 0.8},
        },
        {
            "row_id": "b",
            "text": '{"vendor":"Pinewood","total":20}',
            "record_confidence": 0.45,
            "field_confidence_min": {"vendor": 0.2, "total": 0.7},
            "field_confidence_mean": {"vendor": 0.45, "total": 0.7},
        },
    ]
    run = make_run(tmp_path / "run", records, [])
    raw = {
        "name": "hand",
        "constraint": {"json_schema": "schemas/invoice.json"},
        "dataset": {"path": "jobs/invoices/inputs.jsonl"},
        "output": {"dir": str(tmp_path / "unused")},
        "eval": {"gold": str(gold), "run_dir": str(run)},
    }
    scores = evaluate(validate(raw), REPO).scores
    assert scores["confidence"]["fields_scored"] == 4 and scores["confidence"]["auroc"] == 1.0
    md = (run / "report.md").read_text()
    assert "## Confidence calibration" in md and "| 0.9-1.0 | 1 | 0.95 | 100.0% |" in md and "| vendor | 2 | 0.70 | 50.0% |" in md
    assert (run / "plots" / "calibration.png").read_bytes()[:4] == b"\x89PNG"
