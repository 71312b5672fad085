"""Where grounded values sit in their text: the occurrence that follows the record's previous value."""

from fucina_jobs.grounding.locate import value_spans

RECEIPT = {"type": "object", "properties": {"company": {"type": "string", "x-grounded": True},
                                            "date": {"type": "string", "format": "date", "x-grounded": True},
                                            "total": {"type": "number", "x-grounded": {"amount": True}},
                                            "note": {"type": "string"}}}
REPORT = {"type": "object", "properties": {"receipts": {"type": "array", "items": RECEIPT}}}


def located(record, schema, text):
    return {path: text[start:end] for path, (start, end) in value_spans(record, schema, text).items()}


def test_repeated_values_are_located_in_the_records_order():
    """The same shop and total on two receipts: each item's values are the ones after the item before."""
    text = "ACME SDN BHD\nDATE 25/12/2018\nITEM 9.00\nTOTAL 9.00\n\nACME SDN\nBHD\n01/01/2019\nTOTAL RM 9.00 CASH 10.00"
    record = {"receipts": [{"company": "ACME SDN BHD", "date": "2018-12-25", "total": 9.0, "note": "x"},
                           {"company": "ACME SDN BHD", "date": "2019-01-01", "total": 9}]}
    spans = value_spans(record, REPORT, text)
    assert [text[s:e] for s, e in spans.values()] == ["ACME SDN BHD", "25/12/2018", "9.00", "ACME SDN\nBHD", "01/01/2019", "9.00"]
    assert spans["receipts[1].total"][0] > spans["receipts[1].date"][0] > spans["receipts[0].total"][0]
    assert "receipts[0].note" not in spans, "only grounded values are located"


def test_a_value_printed_before_the_previous_one_takes_its_first_occurrence():
    text = "Invoice from Nordlicht Bakery\nTotal EUR 1,428.00\nDated 3 March 2025"
    record = {"total": 1428, "date": "2025-03-03", "company": "Nordlicht Bakery"}
    assert located(record, RECEIPT, text) == {"total": "1,428.00", "date": "3 March 2025", "company": "Nordlicht Bakery"}


def test_whole_words_only_and_unwritten_values_get_no_span():
    text = "BAKERY BAKERYMAN 12.50"
    assert located({"company": "BAKERY", "total": 3}, RECEIPT, text) == {"company": "BAKERY"}
    assert located({"company": "BAKERYMAN"}, RECEIPT, text) == {"company": "BAKERYMAN"}


def test_items_of_an_array_grounded_by_paragraph_are_located_in_their_own_paragraph():
    """The shop's name is the last line of each receipt: the record's order alone would put both names in the first receipt."""
    schema = {"type": "object", "properties": {"receipts": {"type": "array", "x-grounded": {"items": "paragraph"}, "items": RECEIPT}}}
    text = "TOTAL 5.00\n02/01/2019\nSANYU STATIONERY\n\nTOTAL 7.00\n03/01/2019\nSANYU STATIONERY"
    record = {"receipts": [{"company": "SANYU STATIONERY", "date": "2019-01-02", "total": 5},
                           {"company": "SANYU STATIONERY", "date": "2019-01-03", "total": 7}]}
    spans = value_spans(record, schema, text)
    second = text.index("\n\n")
    assert spans["receipts[0].company"][0] < second < spans["receipts[1].company"][0]
    assert all(text[s:e] for s, e in spans.values()) and len(spans) == 6
