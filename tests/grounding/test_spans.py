"""Spans: each grounded value's offsets in its source text, on documents that make offsets hard."""

import json

import pytest

from fucina_jobs.grounding.declaration import grounded_arrays, grounded_fields
from fucina_jobs.grounding.spans import check_spans, value_spans

from fucina_jobs.config import SHIPPED

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "x-grounded": True},
        "customer": {"type": ["string", "null"], "x-grounded": {"case": "insensitive"}},
        "note": {"type": "string", "x-grounded": {"whitespace": "exact"}},
        "date": {"type": "string", "format": "date", "x-grounded": True},
        "currency": {"enum": ["EUR", "USD"], "x-grounded": {"spellings": {"EUR": ["€"], "USD": ["$"]}}},
        "total": {"type": "number", "x-grounded": {"amount": True}},
        "tax": {"type": "number", "x-grounded": {"amount": True, "allow": [0]}},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "x-grounded": True}, "qty": {"type": "integer", "x-grounded": True}},
            },
        },
    },
}
FIELDS = grounded_fields(SCHEMA)


def spans_of(record, text):
    spans = value_spans(record, FIELDS, text)
    check = check_spans(record, FIELDS, text, spans)
    assert not check.mismatched, check.mismatched
    return {path: text[start:end] for path, (start, end) in spans.items()}


def test_a_name_across_a_line_break_and_json_escapes():
    text = 'From: ACME "Tools"\n   GmbH\\Werk 2\nTotal: 1.234,50 € (tax 0)'
    record = {"vendor": 'ACME "Tools" GmbH\\Werk 2', "total": 1234.5, "currency": "EUR"}
    assert spans_of(record, text) == {"vendor": 'ACME "Tools"\n   GmbH\\Werk 2', "total": "1.234,50 €", "currency": "€"}


def test_offsets_are_code_points_after_emoji_combining_marks_and_cjk():
    text = "🧾🧾 Cafe\u0301 Zürich 株式会社 — Rechnung vom 2025年1月14日, Summe $9.00"
    record = {"vendor": "株式会社", "date": "2025-01-14", "total": 9, "customer": "CAFE\u0301 ZÜRICH"}
    assert spans_of(record, text) == {"vendor": "株式会社", "date": "2025年1月14日", "total": "$9.00", "customer": "Cafe\u0301 Zürich"}
    assert text.index("株式会社") == value_spans(record, FIELDS, text)["vendor"][0]


def test_a_case_folded_value_that_changes_length():
    text = "Kunde: STRASSENBAU AG, Straße 1"
    assert spans_of({"customer": "straße 1"}, text) == {"customer": "Straße 1"}
    assert spans_of({"customer": "strassenbau ag"}, text) == {"customer": "STRASSENBAU AG"}


def test_a_repeated_value_points_at_its_first_whole_word_occurrence():
    text = "Supplies Ltd bought from Ply Supplies; Ply Supplies, invoice 12.50 USD, paid 12.50 USD"
    spans = value_spans({"vendor": "Ply Supplies", "total": 12.5}, FIELDS, text)
    assert spans["vendor"] == (text.index("Ply Supplies"), text.index("Ply Supplies") + len("Ply Supplies"))
    assert text[slice(*spans["total"])] == "12.50 USD" and spans["total"][0] == text.index("12.50")
    # A string the text writes only inside a longer word still gets that span (the post-check accepts substrings).
    assert spans_of({"vendor": "upplies"}, text) == {"vendor": "upplies"}


def test_whitespace_exact_keeps_the_texts_own_spacing():
    text = "Note:  two  spaces\nand a break"
    assert spans_of({"note": "two  spaces\nand"}, text) == {"note": "two  spaces\nand"}


def test_numbers_dates_and_enums_point_at_their_written_form():
    text = "Date: 3rd April 2025. Credit (45.00), net CHF 6'750.00, VAT 1,340 EUR, due 04/15/2025"
    record = {"date": "2025-04-15", "total": -45, "tax": 1340, "currency": "EUR", "items": [{"name": "Credit", "qty": 45}, {"name": "VAT"}]}
    assert spans_of(record, text) == {
        "date": "04/15/2025",
        "total": "(45.00)",
        "tax": "1,340 EUR",
        "currency": "EUR",
        "items[0].name": "Credit",
        "items[0].qty": "(45.00)",
        "items[1].name": "VAT",
    }
    assert spans_of({"date": "2025-04-03"}, text) == {"date": "3rd April 2025"}


def test_an_allowed_value_the_text_does_not_write_has_no_span_and_null_is_no_value():
    text = "Total: $10.00, no tax"
    record = {"total": 10, "tax": 0, "customer": None}
    spans = value_spans(record, FIELDS, text)
    assert set(spans) == {"total"}
    check = check_spans(record, FIELDS, text, spans)
    assert (check.values, check.located, check.unwritten, check.mismatched) == (2, 1, 1, [])


def test_a_wrong_or_missing_span_is_counted():
    text = "Vendor: Acme, total $5.00"
    record = {"vendor": "Acme", "total": 5}
    check = check_spans(record, FIELDS, text, {"vendor": [0, 4]})
    assert check.located == 0 and len(check.mismatched) == 2
    assert check.mismatched[0] == "vendor='Acme': text[0:4] is 'Vend'"
    assert check.mismatched[1].startswith("total=5: no span, but the text writes it")


def test_every_gold_value_of_the_shipped_invoices_is_located():
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    fields = grounded_fields(schema)
    texts = {r["id"]: r["text"] for r in map(json.loads, (SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines())}
    located = 0
    for line in (SHIPPED / "jobs/invoices/gold.jsonl").read_text().splitlines():
        gold = json.loads(line)
        text = texts[gold["id"]]
        check = check_spans(gold["label"], fields, text, value_spans(gold["label"], fields, text))
        assert not check.mismatched, (gold["id"], check.mismatched)
        located += check.located
    assert located == 24 * 9


@pytest.mark.parametrize("value", [572.34, "572.34"])
def test_a_value_of_the_wrong_type_has_no_span(value):
    fields = grounded_fields({"type": "object", "properties": {"vendor": {"type": "string", "x-grounded": True}}})
    assert value_spans({"vendor": value}, fields, "total 572.34") == ({} if value == 572.34 else {"vendor": (6, 12)})


# -- repeated values: the record's order, and items grounded by paragraph ----------

RECEIPT = {
    "type": "object",
    "properties": {
        "company": {"type": "string", "x-grounded": True},
        "date": {"type": "string", "format": "date", "x-grounded": True},
        "total": {"type": "number", "x-grounded": {"amount": True}},
        "note": {"type": "string"},
    },
}
REPORT = {"type": "object", "properties": {"receipts": {"type": "array", "items": RECEIPT}}}


def spans_in(record, schema, text):
    return value_spans(record, grounded_fields(schema), text, grounded_arrays(schema))


def located(record, schema, text):
    return {path: text[start:end] for path, (start, end) in spans_in(record, schema, text).items()}


def test_repeated_values_are_located_in_the_records_order():
    """The same shop and total on two receipts: each item's values are the ones after the item before."""
    text = "ACME SDN BHD\nDATE 25/12/2018\nITEM 9.00\nTOTAL 9.00\n\nACME SDN\nBHD\n01/01/2019\nTOTAL RM 9.00 CASH 10.00"
    record = {
        "receipts": [
            {"company": "ACME SDN BHD", "date": "2018-12-25", "total": 9.0, "note": "x"},
            {"company": "ACME SDN BHD", "date": "2019-01-01", "total": 9},
        ]
    }
    spans = spans_in(record, REPORT, text)
    assert [text[s:e] for s, e in spans.values()] == ["ACME SDN BHD", "25/12/2018", "9.00", "ACME SDN\nBHD", "01/01/2019", "RM 9.00"]
    assert spans["receipts[1].total"][0] > spans["receipts[1].date"][0] > spans["receipts[0].total"][0]
    assert "receipts[0].note" not in spans, "only grounded values are located"


def test_a_value_printed_before_the_previous_one_takes_its_first_occurrence():
    text = "Invoice from Nordlicht Bakery\nTotal EUR 1,428.00\nDated 3 March 2025"
    record = {"total": 1428, "date": "2025-03-03", "company": "Nordlicht Bakery"}
    assert located(record, RECEIPT, text) == {"total": "EUR 1,428.00", "date": "3 March 2025", "company": "Nordlicht Bakery"}


def test_whole_words_first_and_unwritten_values_get_no_span():
    text = "BAKERY BAKERYMAN 12.50"
    assert located({"company": "BAKERY", "total": 3}, RECEIPT, text) == {"company": "BAKERY"}
    assert located({"company": "BAKERYMAN"}, RECEIPT, text) == {"company": "BAKERYMAN"}


def test_items_of_an_array_grounded_by_paragraph_are_located_in_their_own_paragraph():
    """The shop's name is the last line of each receipt: the record's order alone would put both names in the first receipt."""
    schema = {"type": "object", "properties": {"receipts": {"type": "array", "x-grounded": {"items": "paragraph"}, "items": RECEIPT}}}
    text = "TOTAL 5.00\n02/01/2019\nSANYU STATIONERY\n\nTOTAL 7.00\n03/01/2019\nSANYU STATIONERY"
    record = {
        "receipts": [
            {"company": "SANYU STATIONERY", "date": "2019-01-02", "total": 5},
            {"company": "SANYU STATIONERY", "date": "2019-01-03", "total": 7},
        ]
    }
    spans = spans_in(record, schema, text)
    second = text.index("\n\n")
    assert spans["receipts[0].company"][0] < second < spans["receipts[1].company"][0]
    assert all(text[s:e] for s, e in spans.values()) and len(spans) == 6


def test_a_labelled_value_points_at_the_occurrence_its_label_marks():
    fields = grounded_fields({"type": "object", "properties": {"total": {"type": "number", "x-grounded": {"amount": True, "labels": ["total"]}}}})
    text = "BREAD 9.00\nCASH 10.00\nTOTAL:\n9.00"
    (start, end) = value_spans({"total": 9}, fields, text)["total"]
    assert (start, text[start:end]) == (text.rindex("9.00"), "9.00")
