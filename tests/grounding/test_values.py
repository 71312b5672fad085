"""Reading the numbers and dates a text writes: separators, decimal commas, signs, ambiguous dates, month names."""

from decimal import Decimal

import pytest

from fucina_jobs.grounding.values import (
    after_labels,
    dates_in,
    json_number,
    labelled,
    normalize_whitespace,
    quantities_in,
    normalized_offsets,
    number_spans,
    numbers_in,
    written,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Total: $1,340.00", {"1340"}),
        ("Summe 2.350,00 €", {"2350"}),
        ("CHF 6'750.00", {"6750"}),
        ("Bibliothèque 2 480,00 EUR", {"2480", "2", "480"}),
        ("Rabatt 45,00", {"45"}),
        ("Credit note: -$103.30", {"-103.3", "103.3"}),
        ("Refund (45.00)", {"-45", "45"}),
        ("Balance −7.5", {"-7.5", "7.5"}),
        ("5.000 brochures", {"5", "5000"}),  # a lone separator before three digits: both readings
        ("¥186,000", {"186", "186000"}),
        ("1,234,567.89", {"1234567.89"}),
        ("Tax 0.00", {"0"}),
    ],
)
def test_numbers_are_normalised(text, expected):
    assert {json_number(n) for n in numbers_in(text)} == expected


def test_numbers_inside_identifiers_and_dates_are_not_amounts():
    found = numbers_in("Invoice BWS-2025-0147, part M8, 300mm, dated 03.04.2025 or 2025-02-11: $12.50")
    assert found == {Decimal("12.50")}


def test_json_number_is_one_spelling():
    assert [json_number(Decimal(s)) for s in ("527.50", "2100.00", "0.0", "-45.10", "1E+3")] == ["527.5", "2100", "0", "-45.1", "1000"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Invoice Date: 2025-02-11", {"2025-02-11"}),
        ("Invoice date: 2025/05/20", {"2025-05-20"}),
        ("Datum 17.04.2025", {"2025-04-17"}),  # 17 cannot be a month: one reading
        ("Date: 03/04/2025", {"2025-04-03", "2025-03-04"}),  # ambiguous: day-first and month-first
        ("Date: 04/15/2025", {"2025-04-15"}),
        ("Factuurdatum: 14-11-2025", {"2025-11-14"}),
        ("Date 03.04.25", {"2025-04-03"}),  # dotted: day first
        ("Datum: 01.11.2023", {"2023-11-01"}),
        ("Issued: 4 March 2025", {"2025-03-04"}),
        ("Date: 5th September 2025", {"2025-09-05"}),
        ("DATE: March 28, 2025", {"2025-03-28"}),
        ("Date: Jan 7, 2025", {"2025-01-07"}),
        ("Invoice date: 30-Jun-2025", {"2025-06-30"}),
        ("Datum: 1. März 2025", {"2025-03-01"}),
        ("Fecha: 2 de octubre de 2025", {"2025-10-02"}),
        ("Data: 3 de fevereiro de 2025", {"2025-02-03"}),
        ("Data wystawienia: 14 października 2025", {"2025-10-14"}),
        ("Fakturadatum: 5 augusti 2025", {"2025-08-05"}),
        ("発行日 2025年1月14日", {"2025-01-14"}),
        ("28 MAR 18 18:32:36", {"2018-03-28"}),  # a month name before a two-digit year
        ("DATE: 25/FEB/2017 10:02", {"2017-02-25"}),
        ("Invoice Date:  August 3 , 2014", {"2014-08-03"}),  # a space before the comma, as PDF text writes it
        ("for the billing period July 1 - July 31 , 2014", {"2014-07-31"}),  # no 1 July 2031: a spaced dash parts no date
        ("Invoice dateOct 31, 2023Total in EUR", {"2023-10-31"}),  # glued to its label where the case changes, as PDF text joins cells
        ("Invoice dateoct 31, 2023; MAYDAYOct 1, 2023", set()),  # glued with no change from a lower- to an upper-case letter
        ("is made this 1st day of March, 2015 by and between", {"2015-03-01"}),  # a contract's date in words
        ("ENTERED INTO THIS 11 DAY OF October, 2007.", {"2007-10-11"}),
        ("Date: 31/02/2025", set()),  # no such day either way
        ("MAR 18:32", set()),  # a time, not a year
    ],
)
def test_dates_are_normalised_to_iso(text, expected):
    assert set(dates_in(text)) == expected


def test_day_first_keeps_one_reading_of_an_ambiguous_date():
    text = "Date 03.04.25, due 04/15/2025, sent 2025-05-06"
    assert set(dates_in(text, day_first=True)) == {"2025-04-03", "2025-04-15", "2025-05-06"}
    assert set(dates_in(text, day_first=False)) == {"2025-03-04", "2025-04-15", "2025-05-06"}


def test_a_document_reads_its_ambiguous_dates_the_way_its_others_read():
    assert set(dates_in("Factuur datum 8-9-2022  Vervaldatum 22-9-2022")) == {"2022-09-08", "2022-09-22"}
    assert set(dates_in("Date 04/09/2022  Due 04/23/2022")) == {"2022-04-09", "2022-04-23"}
    assert set(dates_in("Date 04/09/2022  Due 23/04/2022  Sent 04/24/2022")) >= {"2022-09-04", "2022-04-09"}  # they disagree: both
    assert set(dates_in("Date 04/09/2022", day_first=False)) == {"2022-04-09"}  # a declared locale wins


def test_amounts_are_numbers_written_as_money():
    text = "Qty 12 @ $18.50 = $222.00; tax 8.5% = 18.87; CHF 6'750; 2.350,00 €; 1,450 CAD; ZIP 98421; ABN 00 111 222"
    assert {json_number(n) for n in numbers_in(text, amounts=True)} == {"18.5", "222", "18.87", "6750", "2350", "1450"}


def test_money_reads_a_lone_separator_before_three_digits_as_thousands():
    text = "Subtotal ¥416,000 ; Consumption tax 10% ¥41,600 ; count 1,340"
    assert {json_number(n) for n in numbers_in(text, amounts=True)} == {"416000", "41600"}
    assert {json_number(n) for n in numbers_in(text)} >= {"416", "416000", "1.34", "1340"}


def test_letter_currency_symbols_glued_to_an_amount_mark_it_as_money():
    text = "TOTAL RM33.90 ROUNDING -RM 0.02 Rp5.000 FORM 12.00 PERM7.00 QTY 3"
    found = {json_number(n) for n in numbers_in(text, amounts=True)}
    assert found == {"33.9", "-0.02", "0.02", "5000", "12"}  # a symbol inside a word (PERM7.00) is no currency


def test_written_needs_the_spelling_unglued_from_letters():
    assert written("Total $5", ("$",)) and written("100€", ("€",)) and written("eur 5", ("EUR",), "insensitive")
    assert not written("C$1,260.00", ("$",)) and not written("EUROPE", ("EUR",)) and not written("eur 5", ("EUR",))


def marked(text: str, labels=("total",)) -> set[str]:
    """The amounts of ``text`` that ``labels`` mark, as JSON spellings."""
    return {json_number(v) for v in labelled(number_spans(text, amounts=True), text, list(labels))}


def test_a_label_marks_the_value_on_its_line_or_the_next_line_that_writes_one():
    assert marked("SUB TOTAL 24.30\nTOTAL:\n25.75\nCASH 30.00") == {"24.3", "25.75"}
    assert marked("TOTAL\n:\nRM\n73.00\nCASH\n:\nRM\n80.00") == {"73"}  # lines of marks or a currency alone are passed over
    assert marked("TOTAL\nROUNDING\n0.01\nGRAND TOTAL 9.00") == {"9"}  # 0.01 is the rounding's
    assert marked("TOTAL\nTHANK YOU\nCASH 9.00") == set()  # a line of text between: no value below is the label's


def test_a_label_marks_a_value_glued_to_it_where_the_case_changes():
    text = "Invoice dateOct 31, 2023Total in EUR. Summary: Oct 1, 2023"
    assert set(labelled(dates_in(text), text, ["invoice date"])) == {"2023-10-31"}
    text = "Invoice dateOct 31, 2023 and INVOICE DATEOct 1, 2023"  # no change from a lower- to an upper-case letter
    assert set(labelled(dates_in(text), text, ["invoice date"])) == {"2023-10-31"}


def test_a_label_marks_no_rate_s_base():
    assert marked("Tax 15% on $ 112.90      $ 16.94", ["tax"]) == {"16.94"}
    assert marked("MwSt. 19% auf 100,00 €  19,00 €", ["mwst"]) == {"19"}
    assert marked("zzgl. 19,0% MwSt. aus 100,00 €    19,00 €", ["mwst"]) == {"19"}
    assert marked("Tax 8.5% $ 18.87 on items", ["tax"]) == {"18.87"}


def test_a_header_laid_out_in_columns_marks_the_value_below_it_in_its_column():
    # PDF text keeps a table's header above its row: each label marks what its column holds
    row = "Product    Qty    Price     Tax(%)    Tax      Total\nCards       1     278.61    14.50%     40.39   319.00"
    assert marked(row, ["tax"]) == {"40.39"}  # the Tax(%) column holds a rate, no amount: it marks none
    assert marked(row, ["total"]) == {"319"}
    dates = "Invoice Date:     Due Date:      Reference:\n03/20/2023        04/04/2023     CUSTREF123"
    due = labelled(dates_in(dates), dates, ["due date"])
    assert set(due) == {"2023-04-04"}
    assert marked("TOTAL\nRM 25.75") == {"25.75"}  # not laid out: the first value of the next line, as before


def test_normalized_offsets_follow_the_words_into_the_normalised_text():
    text = "  Bill To:\t  Ship To :\n\nTaylor  Riddel "
    normal, offsets = normalize_whitespace(text), normalized_offsets(text)
    assert normal == "Bill To: Ship To : Taylor Riddel"
    assert all(normal[offsets[i]] == c for i, c in enumerate(text) if not c.isspace())
    assert after_labels(text, ["bill to"]) == [text.index("Ship")]  # not laid out: no cell below


def test_a_column_of_labels_then_a_column_of_values_align_from_their_ends():
    # OCR reads a two-column table as its labels, then its values; the items' names above join the labels' column
    receipt = "CENDOL\nSUBTOTAL\nTOTAL\nCASH\nCHANGE\n41.20\n43.70\nRM50.00\n6.30\nGST SUMMARY\n2.47"
    assert marked(receipt) == {"43.7"}
    assert marked(receipt, ["cash", "change"]) == {"50", "6.3"}
    assert marked("TOTAL\nCASH\nCHANGE\n50.00\n6.30") == set()  # fewer values than labels: the first labels have none
    # more values than labels: the column's last label marks the first of them, as a label on a line of its own does
    assert marked("ITEM\nTOTAL\n12.00\n3.00\n4.00") == {"12"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("for a period of three (3) years from the date", {"3 years"}),  # words with their digits
        ("shall survive for twenty-four months", {"24 months"}),
        ("a term of 18 Months, then one year", {"18 months", "1 year"}),  # the unit as written, lower-cased
        ("within 55.5 months", {"55.5 months"}),
        ("a 2-year term", {"2 year"}),
        ("3 Business Days after", set()),  # another unit between the count and ours
        ("years ago, in 1999 months", {"1999 months"}),
        ("version2 years", set()),  # no count glued to a word
    ],
)
def test_counts_of_units_are_read_in_words_and_digits(text, expected):
    assert set(quantities_in(text, ["year", "month"])) == expected
