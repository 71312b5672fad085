"""``bench reports`` without a model: the reports it builds from a receipts folder, and how items are matched to gold."""

import json

import pytest

from fucina_jobs.bench.reports import build_reports, match_items


def _receipts(folder, n: int, unlabeled: int = 0):
    """A receipts-dev folder: ``n`` receipts with full gold labels, then ``unlabeled`` whose total is unknown."""
    folder.mkdir()
    inputs = [{"id": f"r{i}", "text": f"SHOP {i}\nTOTAL {i}.00"} for i in range(n + unlabeled)]
    gold = [
        {"id": f"r{i}", "label": {"company": f"Shop {i}", "date": "2018-03-01", "total": float(i) if i < n else None}} for i in range(n + unlabeled)
    ]
    for name, rows in (("inputs.jsonl", inputs), ("gold.jsonl", gold)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_reports_join_distinct_fully_labelled_receipts_a_blank_line_apart(tmp_path):
    reports = build_reports(_receipts(tmp_path / "dev", 10, unlabeled=3), count=3, sizes=(2, 3), seed=7)
    ids = [r["id"] for report in reports for r in report.receipts]
    assert [r.id for r in reports] == ["report-0", "report-1", "report-2"] and all(2 <= len(r.receipts) <= 3 for r in reports)
    assert len(ids) == len(set(ids)) and not set(ids) & {"r10", "r11", "r12"}  # each receipt once; none without a total
    first = reports[0]
    assert first.text == "\n\n".join(r["text"] for r in first.receipts)
    assert [g["company"] for g in first.gold] == [f"Shop {r['id'][1:]}" for r in first.receipts]
    assert build_reports(tmp_path / "dev", count=3, sizes=(2, 3), seed=7)[0].receipts == first.receipts  # the seed fixes them


def test_too_few_receipts_for_the_reports_asked_is_an_error_naming_the_folder(tmp_path):
    dev = _receipts(tmp_path / "dev", 4)
    with pytest.raises(SystemExit, match=f"--dev {dev}: 4 usable receipts are not enough for 3 reports of 2-2"):
        build_reports(dev, count=3, sizes=(2, 2), seed=0)


def test_each_gold_receipt_is_matched_once_and_a_second_match_is_a_duplicate():
    gold = [{"company": "Acme Ltd", "date": "2018-03-01", "total": 10.0}, {"company": "Bolt", "date": "2018-03-02", "total": 5.0}]
    items = [
        {"company": "ACME LTD", "date": "2018-03-01", "total": "10.004"},  # text normalised, numbers within 0.01
        {"company": "Acme Ltd", "date": "2018-03-01", "total": 10},  # Acme again: a duplicate
        {"company": "Bolt", "date": "2018-03-02", "total": 5.5},  # a wrong total: no match
    ]
    assert match_items(gold, items) == (1, 1)
    assert match_items(gold, items, fields=("company", "date")) == (2, 1)  # on company and date alone, Bolt matches
