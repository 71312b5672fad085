"""Per-row grounded grammars on hard documents: only values the document writes get through."""

import json
import random

import pytest

from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.check import ungrounded_values
from fucina_jobs.grounding.candidates import candidates
from fucina_jobs.grounding.grammar import NothingToGround, grounded_lark
from fucina_jobs.grounding.spans import value_spans

from tests.helpers import STOP, instance_accepted

PARTY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40, "x-grounded": True},
        "amount": {"type": "number", "minimum": 0, "x-grounded": {"allow": [0]}},
        "date": {"type": ["string", "null"], "format": "date", "x-grounded": True},
        "kind": {"enum": ["a", "b"]},
    },
    "required": ["name", "amount", "date", "kind"],
    "additionalProperties": False,
}


def accepts(tokenizer, schema, text, record) -> bool:
    constraint = Constraint.lark(grounded_lark(schema, text), tokenizer, stop_token=STOP)
    return instance_accepted(constraint, tokenizer, record, separators=(",", ":"))


def rec(name, amount=0, date=None, kind="a"):
    return {"name": name, "amount": amount, "date": date, "kind": kind}


HARD = 'Seller: ACME "Tools" GmbH\\Zürich — Ünïcødé Ltd ✓\nTotal € 1.234,50 on 03/04/2025\tBill to: Nordlicht\n  Bakery & Co.'


@pytest.mark.parametrize(
    "record, ok",
    [
        (rec('ACME "Tools" GmbH'), True),  # quotes in the document
        (rec("GmbH\\Zürich"), True),  # a backslash
        (rec("Ünïcødé Ltd ✓"), True),  # unicode
        (rec("Nordlicht Bakery & Co."), True),  # split across a line break: whitespace normalised
        (rec("Nordlicht\n  Bakery"), False),  # ... so the raw break is not a span any more
        (rec("Pinewood Labels Ltd"), False),  # not in the document
        (rec("Nordl"), False),  # a cut word
        (rec(""), False),  # empty is in every text: not grounded
        (rec("ACME", 1234.5), True),
        (rec("ACME", 1234.50), True),
        (rec("ACME", 1608), False),
        (rec("ACME", 0), True),  # the allowance
        (rec("ACME", 0, "2025-04-03"), True),  # both readings of 03/04/2025
        (rec("ACME", 0, "2025-03-04"), True),
        (rec("ACME", 0, "2024-10-02"), False),
        (rec("ACME", kind="c"), False),  # ungrounded fields keep their schema
    ],
)
def test_hard_document(tokenizer, record, ok):
    assert accepts(tokenizer, PARTY, HARD, record) is ok


def test_exact_whitespace_keeps_line_breaks_and_case_insensitive_recases(tokenizer):
    exact = json.loads(json.dumps(PARTY))
    exact["properties"]["name"]["x-grounded"] = {"whitespace": "exact", "case": "insensitive"}
    assert accepts(tokenizer, exact, HARD, rec("Nordlicht\n  Bakery"))
    assert accepts(tokenizer, exact, HARD, rec("NORDLICHT"))
    assert not accepts(tokenizer, exact, HARD, rec("Nordlicht Bakery"))


@pytest.mark.parametrize(
    "case, written, refused",
    [("title", "Acme Widgets Llc", "ACME WIDGETS LLC"), ("lower", "acme widgets", "Acme Widgets"), ("upper", "ACME", "Acme")],
)
def test_a_learned_case_writes_the_span_in_that_case_only(tokenizer, case, written, refused):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"]["x-grounded"] = {"case": case}
    for text in ("Sold by ACME WIDGETS LLC, 2 Main St", "Sold by Acme Widgets LLC, 2 Main St"):
        assert accepts(tokenizer, schema, text, rec(written)), text
        assert not accepts(tokenizer, schema, text, rec(refused)), text


def test_drop_marks_are_left_out_of_the_span_and_its_check(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"]["x-grounded"] = {"drop_marks": ",", "case": "title"}
    text = "This agreement is between PALMSOURCE, INC. and Palm , Inc., both of Delaware."
    assert accepts(tokenizer, schema, text, rec("Palmsource Inc."))
    assert accepts(tokenizer, schema, text, rec("Palm Inc."))
    assert not accepts(tokenizer, schema, text, rec("Palmsource, Inc."))
    fields = [f for f in grounded_fields(schema) if f.name == "name"]
    assert ungrounded_values({"name": "Palmsource Inc."}, fields, text) == (1, [])
    assert ungrounded_values({"name": "Palmsource Inc"}, fields, text) == (1, [])
    assert value_spans({"name": "Palm Inc."}, fields, text) == {"name": (text.index("Palm ,"), text.index("Inc.,") + 4)}


def test_max_length_holds_inside_the_span(tokenizer):
    text = "Name: " + " ".join(["Verylongcompanyname"] * 4)
    assert accepts(tokenizer, PARTY, text, rec("Verylongcompanyname Verylongcompanyname"))
    assert not accepts(tokenizer, PARTY, text, rec(" ".join(["Verylongcompanyname"] * 3)))


def test_nested_optional_and_array_fields(tokenizer):
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "buyer": {"type": "object", "properties": {"name": {"type": "string", "x-grounded": True}}, "required": ["name"]},
            "lines": {"type": "array", "maxItems": 3, "items": {"type": "integer", "x-grounded": True}},
            "note": {"type": "string"},
        },
        "required": ["lines"],
    }
    text = "Order for Ada Lovelace: 3 gears, 12 cogs"
    good = {"id": "x", "buyer": {"name": "Ada Lovelace"}, "lines": [3, 12], "note": "anything"}
    assert instance_accepted(Constraint.lark(grounded_lark(schema, text), tokenizer, stop_token=STOP), tokenizer, good, (",", ":"))
    for record in ({"lines": []}, {"buyer": {"name": "Ada"}, "lines": [12]}, {"id": "y", "lines": [3]}):
        assert accepts(tokenizer, schema, text, record), record
    for record in ({"lines": [4]}, {"lines": [3, 3, 3, 3]}, {"buyer": {"name": "Babbage"}, "lines": []}, {"note": "n"}):
        assert not accepts(tokenizer, schema, text, record), record


def test_a_field_the_document_cannot_fill_is_refused_before_decoding_or_null(tokenizer):
    # No number in the text and no allowance: no grammar could hold a true value, so none is built.
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["amount"]["x-grounded"] = True
    with pytest.raises(NothingToGround, match=r"amount \(no number within the schema's bounds is written\)"):
        grounded_lark(schema, "no figures here")
    # Where the schema allows null, null is the one value left.
    schema["properties"]["amount"]["type"] = ["number", "null"]
    assert accepts(tokenizer, schema, "no figures here", rec("figures", None))
    assert not accepts(tokenizer, schema, "no figures here", rec("figures", 7))


def test_an_array_whose_items_the_text_cannot_fill_is_empty_not_refused(tokenizer):
    """A chunk of a long document that holds no receipt: the array is ``[]``; with ``minItems`` the row is refused."""
    schema = json.loads(json.dumps(BY_PARAGRAPH))
    del schema["properties"]["receipts"]["x-grounded"]
    schema["properties"]["receipts"]["items"]["properties"]["total"]["type"] = "integer"
    text = "OTHER LINE\nNO FIGURES"
    assert accepts(tokenizer, schema, text, {"receipts": []})
    assert not accepts(tokenizer, schema, text, {"receipts": [{"shop": "OTHER LINE", "total": 1}]})
    schema["properties"]["receipts"]["minItems"] = 1
    with pytest.raises(NothingToGround, match=r"total \(no whole number within the schema's bounds is written\)"):
        grounded_lark(schema, text)


def test_an_enum_the_text_never_writes_is_not_forced_onto_a_member(tokenizer):
    """An INR invoice against a USD/EUR list: refused before decoding, or null where the schema allows it."""
    currency = {"enum": ["USD", "EUR"], "x-grounded": {"spellings": {"USD": ["$"], "EUR": ["€"]}}}
    schema = {"type": "object", "properties": {"currency": currency}, "required": ["currency"]}
    with pytest.raises(NothingToGround, match=r"currency \(none of USD, \$, EUR, € is written\)"):
        grounded_lark(schema, "Total INR 4,500.00")
    nullable = {**schema, "properties": {"currency": {**currency, "enum": ["USD", "EUR", None], "type": ["string", "null"]}}}
    assert accepts(tokenizer, nullable, "Total INR 4,500.00", {"currency": None})
    assert not accepts(tokenizer, nullable, "Total INR 4,500.00", {"currency": "USD"})
    assert accepts(tokenizer, nullable, "Total $4,500.00", {"currency": "USD"})


@pytest.mark.parametrize(
    "name, ok",
    [
        ("LOT 6, JALAN BATAI,", True),  # a comma glued to its word stays
        ("LOT 6, JALAN BATAI, ", False),  # a trailing space
        (" LOT 6", False),  # a leading space
        ("JOHOR -", False),  # a lone mark at the end
        ("- BAHRU", False),  # ... or at the start
        ("JOHOR - BAHRU", True),  # inside, it is part of the value
        (",", False),  # a value needs a letter or a digit
        ("(M) SDN BHD", True),
    ],
)
def test_a_grounded_string_has_no_loose_ends(tokenizer, name, ok):
    assert accepts(tokenizer, PARTY, "LOT 6, JALAN BATAI, 81100 JOHOR - BAHRU (M) SDN BHD", rec(name)) is ok


def test_span_lines_holds_a_string_to_runs_of_whole_lines(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines"}}
    text = "TAN SDN BHD\n(123456-X)\nNO. 3, JALAN  MAWAR,\n81100 JOHOR BAHRU.\nTOTAL 9.00"
    assert accepts(tokenizer, schema, text, rec("TAN SDN BHD"))
    assert accepts(tokenizer, schema, text, rec("NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU."))  # two lines, joined by a space
    assert not accepts(tokenizer, schema, text, rec("NO. 3, JALAN MAWAR,"[:-1]))  # a cut line
    assert not accepts(tokenizer, schema, text, rec("TAN SDN"))
    assert not accepts(tokenizer, schema, text, rec("JALAN MAWAR, 81100 JOHOR BAHRU."))  # starts inside a line
    exact = json.loads(json.dumps(schema))
    exact["properties"]["name"]["x-grounded"]["whitespace"] = "exact"
    assert accepts(tokenizer, exact, text, rec("NO. 3, JALAN  MAWAR,\n81100 JOHOR BAHRU."))


def test_labels_keep_the_amounts_a_label_marks_where_the_text_labels_any(tokenizer):
    schema = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": {"amount": True, "labels": ["total", "amount due"]}}}}
    schema["required"] = ["total"]
    receipt = "MILO 1KG 17.90\nSUB TOTAL 24.30\nTOTAL:\n25.75\nCASH 30.00\nTOTAL QTY: 3"
    for total, ok in [(25.75, True), (24.3, True), (17.9, False), (30, False), (3, False)]:
        assert accepts(tokenizer, schema, receipt, {"total": total}) is ok, total  # a label marks the value on its line, or the next
    assert not accepts(tokenizer, schema, "Total\nRounding\n0.01\nGrand total 9.00", {"total": 0.01})  # two lines below its label
    assert accepts(tokenizer, schema, "Amount  Due: $ 1,200.00", {"total": 1200})  # any spaces inside a label, any case
    assert not accepts(tokenizer, schema, "Subtotal 12.00\nTotals 13.00\nTotal 14.00", {"total": 12})  # whole words only
    unlabelled = "MILO 17.90\nCASH 30.00"
    assert accepts(tokenizer, schema, unlabelled, {"total": 17.9}) and accepts(tokenizer, schema, unlabelled, {"total": 30})


def test_an_allowance_gives_way_to_a_value_the_field_s_labels_mark(tokenizer):
    tax = {"type": "number", "x-grounded": {"amount": True, "allow": [0], "labels": ["btw", "vat"]}}
    schema = {"type": "object", "properties": {"tax": tax}, "required": ["tax"]}
    invoice = "Exclusief BTW € 593,36\nBTW 21% € 124,61\nTotaal € 717,97"
    assert accepts(tokenizer, schema, invoice, {"tax": 124.61}) and not accepts(tokenizer, schema, invoice, {"tax": 0})
    unlabelled = "Subtotal € 593,36\nTotal € 593,36"  # no tax written: 0 is the allowance's
    assert accepts(tokenizer, schema, unlabelled, {"tax": 0})
    # a preference, not a fact: a repair that excludes what the labels mark has the allowance left
    repaired = Constraint.lark(grounded_lark(schema, invoice, exclude={("tax",): [593.36, 124.61]}), tokenizer, stop_token=STOP)
    assert instance_accepted(repaired, tokenizer, {"tax": 0}, separators=(",", ":"))


def test_labels_mark_dates_too(tokenizer):
    schema = {"type": "object", "properties": {"due": {"type": "string", "format": "date", "x-grounded": {"labels": ["due"]}}}, "required": ["due"]}
    text = "Invoice date: 2025-03-01\nPayment due: 2025-03-31"
    assert accepts(tokenizer, schema, text, {"due": "2025-03-31"}) and not accepts(tokenizer, schema, text, {"due": "2025-03-01"})


@pytest.mark.parametrize(
    "name, ok",
    [
        ("Kitagawa Tool Works K.K.", True),
        ("Kitagawa Tool Works K.K", True),  # the marks after a word's last letter may stay out
        ("Kitagawa Tool Works K.", False),  # ... but a run never ends between a word's joined parts
        ("Kitagawa Tool Works K", False),
        ("K., 3-8-2 Minato", False),  # ... nor starts between them
        ("8-2 Minato", False),
        ("3-8-2 Minato", True),
        ("ACME Trading", True),  # a colon joins nothing: a run starts after To:
        ("O'Brien Ltd", True),
        ("Brien Ltd", False),
    ],
)
@pytest.mark.parametrize("labelled", [False, True], ids=["anywhere", "after a label"])
def test_a_run_of_words_neither_starts_nor_ends_inside_a_word(tokenizer, name, ok, labelled):
    text = "From: Kitagawa Tool Works K.K., 3-8-2 Minato To:ACME Trading / O'Brien Ltd"
    schema = {**PARTY, "properties": {**PARTY["properties"]}}
    if labelled:  # the runs after labels: every value above that may be starts after one
        labels = ["from", "works k.k.,", "to", "trading /"]
        schema["properties"]["name"] = {"type": "string", "maxLength": 40, "x-grounded": {"labels": labels}}
    assert accepts(tokenizer, schema, text, rec(name)) is ok


def test_labels_start_a_string_at_the_first_word_a_label_marks(tokenizer):
    schema = {
        "type": "object",
        "properties": {
            "customer": {"type": "string", "maxLength": 24, "x-grounded": {"labels": ["bill to", "customer"]}},
            "number": {"type": "string", "x-grounded": {"span": "word", "labels": ["invoice #", "invoice no"]}},
        },
        "required": ["customer", "number"],
    }
    text = "ACME Inc\nReceipt/Invoice #HP-55021\nBill To:\nHalden Robotics LLC\n44 Mill Street, Olympia"
    for customer, ok in [("Halden Robotics", True), ("Halden Robotics LLC 44", True), ("Robotics LLC", False), ("ACME Inc", False)]:
        assert accepts(tokenizer, schema, text, {"customer": customer, "number": "HP-55021"}) is ok, customer
    assert not accepts(tokenizer, schema, text, {"customer": "Halden Robotics LLC 44 Mill Street", "number": "HP-55021"})  # past maxLength
    assert not accepts(tokenizer, schema, text, {"customer": "Halden", "number": "ACME"})  # a # label needs no space after it
    unlabelled = "ACME Inc\nHalden Robotics LLC"
    assert accepts(tokenizer, schema, unlabelled, {"customer": "Robotics LLC", "number": "Inc"})  # no label written: every span
    too_long = "Customer: " + "X" * 30 + "\nInvoice # 7"  # the word after the label is past maxLength: every span
    assert accepts(tokenizer, schema, too_long, {"customer": "Customer", "number": "7"})
    # laid out in columns, as PDF text is: the cell below the label starts a value too
    columns = "Sammy Maystone    Invoice # 17\nBill To:          Ship To :\nTaylor Riddel     Taylor's Store\n\n14 Elm Road"
    for customer, ok in [("Taylor Riddel", True), ("Ship To", True), ("Taylor's Store", False), ("Sammy Maystone", False)]:
        assert accepts(tokenizer, schema, columns, {"customer": customer, "number": "17"}) is ok, customer
    flat = "Bill To: Ship To:\nTaylor Riddel Taylor's Store"  # not laid out: only the first word after the label
    assert not accepts(tokenizer, schema, flat, {"customer": "Taylor Riddel", "number": "Bill"})


def test_includes_keeps_the_spans_that_hold_such_a_word_where_the_text_writes_one(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines", "includes": "[0-9]{5}"}}
    text = "TAN SDN BHD\nNO. 3, JALAN MAWAR,\n81100 JOHOR BAHRU.\nTEL 07-3507405"
    assert accepts(tokenizer, schema, text, rec("NO. 3, JALAN MAWAR, 81100 JOHOR BAHRU."))
    assert accepts(tokenizer, schema, text, rec("81100 JOHOR BAHRU."))
    assert not accepts(tokenizer, schema, text, rec("NO. 3, JALAN MAWAR,"))  # stops before the postcode
    assert not accepts(tokenizer, schema, text, rec("TEL 07-3507405"))  # 3507405 is no five-digit word
    assert not accepts(tokenizer, schema, text, rec("TAN SDN BHD"))
    assert accepts(tokenizer, schema, "TAN SDN BHD\nNO. 3, JALAN MAWAR", rec("TAN SDN BHD"))  # no such word written: every span
    assert not accepts(tokenizer, schema, "TAN SDN BHD\n***\n81100 JOHOR", rec("TAN SDN BHD *** 81100 JOHOR"))  # a line of marks ends a run
    long = "A" * 70 + "\n81100 JOHOR BAHRU"  # 88 characters as one run, past maxLength 80
    assert accepts(tokenizer, schema, long, rec("81100 JOHOR BAHRU")) and not accepts(tokenizer, schema, long, rec("A" * 70 + " 81100 JOHOR BAHRU"))
    number = {
        "type": "object",
        "properties": {
            "no": {
                "type": "string",
                "x-grounded": {"span": "word", "includes": "[^\\W\\d_]*\\d[^\\W_]*", "labels": ["rechnungsnummer", "rechnungsnr", "facture n°"]},
            }
        },
    }
    number["required"] = ["no"]
    german = "Rechnungsnr.  30064443  Kundennr.  47774\nBitte nennen Sie Ihre Kunden- und Rechnungsnummer an."
    assert accepts(tokenizer, number, german, {"no": "30064443"}) and not accepts(tokenizer, number, german, {"no": "an"})  # no digit
    assert not accepts(tokenizer, number, german, {"no": "47774"})  # a labelled word holding a digit is written: only it
    assert accepts(tokenizer, number, "Ihre Rechnungsnummer an: 2025-0042", {"no": "2025-0042"})  # none is: any such word
    french = "Free Service Abonné 75371 Paris\nFacture n°562044387 du 02 Juillet 2015"  # the label ends inside the word
    assert accepts(tokenizer, number, french, {"no": "562044387"}) and not accepts(tokenizer, number, french, {"no": "75371"})
    word = json.loads(json.dumps(schema))
    word["properties"]["name"]["x-grounded"] = {"span": "word", "includes": "[A-Z]{2}-[0-9]+"}
    assert accepts(tokenizer, word, "Ref 42, order HP-55021.", rec("HP-55021")) and not accepts(
        tokenizer, word, "Ref 42, order HP-55021.", rec("Ref")
    )


def test_lines_first_keeps_the_runs_that_start_at_the_top(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines", "lines": {"first": 2}}}
    text = "CASHIER: AINA\nKEDAI MURNI\nSDN BHD\nSUBTOTAL 9.00\nTHANK YOU"
    for name, ok in [("CASHIER: AINA", True), ("KEDAI MURNI SDN BHD", True), ("SUBTOTAL 9.00", False), ("SDN BHD", False)]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    with_legal_form = json.loads(json.dumps(schema))
    with_legal_form["properties"]["name"]["x-grounded"]["includes"] = "BHD"  # both: a top line, on to the legal form
    assert accepts(tokenizer, with_legal_form, text, rec("KEDAI MURNI SDN BHD"))
    assert not accepts(tokenizer, with_legal_form, text, rec("KEDAI MURNI")) and not accepts(tokenizer, with_legal_form, text, rec("SDN BHD"))
    far = "CASHIER: AINA\nKEDAI MURNI\n" + "\n".join(f"ITEM {i}" for i in range(12)) + "\nBHD"  # the word out of reach: lines.first alone
    assert accepts(tokenizer, with_legal_form, far, rec("KEDAI MURNI")) and not accepts(tokenizer, with_legal_form, far, rec("BHD"))
    tight = json.loads(json.dumps(with_legal_form))
    tight["properties"]["name"]["maxLength"] = 15  # "KEDAI MURNI SDN BHD" is 19: the word out of reach again
    assert accepts(tokenizer, tight, text, rec("KEDAI MURNI")) and not accepts(tokenizer, tight, text, rec("KEDAI MURNI SDN BHD"))


def test_lines_first_starts_a_run_of_words_at_a_top_line_where_no_label_is_written(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 40, "x-grounded": {"labels": ["from:"], "lines": {"first": 2}}}
    text = "\n  TAX INVOICE\nCopperline Audio LLC | 301 Broadway\nSold to: Blue Hour Podcast"
    for name, ok in [("Copperline Audio LLC", True), ("TAX INVOICE", True), ("Audio LLC", False), ("Blue Hour Podcast", False)]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    assert accepts(tokenizer, schema, "From: Halden LLC\nCopperline Audio", rec("Halden LLC"))  # a label written: it rules
    assert not accepts(tokenizer, schema, "From: Halden LLC\nCopperline Audio", rec("Copperline Audio"))


def test_lines_within_line_ends_a_run_of_words_at_its_line_break(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 40, "x-grounded": {"labels": ["supplier:"], "most_words": 5}}
    text = "Supplier: Oxbow Freight\nServices Department\nCustomer: Granite Peak"
    assert accepts(tokenizer, schema, text, rec("Oxbow Freight Services"))  # a run goes on to the next line
    schema["properties"]["name"]["x-grounded"]["lines"] = {"within_line": True}
    for name, ok in [("Oxbow Freight", True), ("Oxbow", True), ("Oxbow Freight Services", False), ("Services Department", False)]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    first = {"type": "string", "maxLength": 40, "x-grounded": {"lines": {"first": 1, "within_line": True}}}
    schema["properties"]["name"] = first  # from a top line too, with the text's whitespace kept as it is
    for whitespace in ("normalize", "exact"):
        first["x-grounded"]["whitespace"] = whitespace
        for name, ok in [("Supplier: Oxbow Freight", True), ("Oxbow", False), ("Supplier: Oxbow Freight Services", False)]:
            assert accepts(tokenizer, schema, text, rec(name)) is ok, (whitespace, name)


def test_capitalized_starts_a_run_of_words_only_on_a_capital_or_a_digit(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {"labels": ["between"], "lines": {"first": 2}, "most_words": 4}
    schema["properties"]["name"] = {"type": "string", "maxLength": 40, "x-grounded": grounded}
    text = "Notices pass between the parties by post.\nThis deal is between “Halden Robotics LLC” and 99 Cents Only Stores."
    assert accepts(tokenizer, schema, text, rec("the parties"))  # without the option: any run after the label
    grounded["capitalized"] = True
    for name, ok in [("Halden Robotics LLC", True), ("the parties", False), ("the parties by post", False), ("parties", False)]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    assert accepts(tokenizer, schema, "Made by and between 99 Cents Only Stores and Leonard Green.", rec("99 Cents Only Stores"))
    top = "date of the latter signature\nAcme Widgets Inc\nterms apply"  # no label written: the top lines' runs
    for name, ok in [("Acme Widgets Inc", True), ("date of the latter", False), ("date", False)]:
        assert accepts(tokenizer, schema, top, rec(name)) is ok, name
    recased = json.loads(json.dumps(schema))
    recased["properties"]["name"]["x-grounded"]["case"] = "title"  # the text's own case decides, not the recased run's
    assert accepts(tokenizer, recased, top, rec("Acme Widgets Inc")) and not accepts(tokenizer, recased, top, rec("Date Of The Latter"))


def test_lines_cut_before_ends_a_run_of_words_and_starts_none(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {"labels": ["from:"], "lines": {"first": 3, "cut_before": "(?i:tax invoice|invoice|dear)"}}
    schema["properties"]["name"] = {"type": "string", "maxLength": 40, "x-grounded": grounded}
    text = "Dear Liam,\nTAX INVOICE\nSaltbush Plumbing - Tax Invoice 118\nSold to: Liam Ng"
    for name, ok in [
        ("Saltbush Plumbing", True),  # the run stops before the title, less the dash before it
        ("Saltbush Plumbing - Tax Invoice", False),
        ("Dear Liam", False),  # a line cut at its start starts no run
        ("TAX INVOICE", False),
        ("TAX", False),
    ]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    assert accepts(tokenizer, schema, "From: Halden LLC invoice 7", rec("Halden LLC"))  # after a label too
    assert not accepts(tokenizer, schema, "From: Halden LLC invoice 7", rec("Halden LLC invoice"))
    # lines cut at their start do not count among the first lines: the letterhead below a title block is reached
    stripe = "Invoice\nBilling portal\nTAX INVOICE\nNaturalsoft Limited\nDear Felix\nPO Box 7\nSold to: Felix Wolf"
    assert accepts(tokenizer, schema, stripe, rec("Naturalsoft Limited")) and not accepts(tokenizer, schema, stripe, rec("Sold to"))


def test_no_run_of_words_crosses_a_column_gap(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 48, "x-grounded": {"labels": ["bill to"], "lines": {"first": 2}}}
    letterhead = "Storyblok GmbH    Invoice 7\nPeter-Behrens-Platz 2    SimFin Analytics GmbH"
    for name, ok in [("Storyblok GmbH", True), ("Peter-Behrens-Platz 2", True), ("Peter-Behrens-Platz 2 SimFin Analytics GmbH", False)]:
        assert accepts(tokenizer, schema, letterhead, rec(name)) is ok, name
    assert accepts(tokenizer, schema, "Bill to: Storyblok GmbH  Linz", rec("Storyblok GmbH Linz"))  # two spaces are no gap


def test_lines_ends_on_keeps_the_runs_that_end_on_such_a_line(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines", "lines": {"ends_on": "BHD|LTD", "first": 2}}}
    text = "KEDAI MURNI\nSDN BHD\nNO. 3, JALAN MAWAR\nTEL 07-3507405"
    for name, ok in [("KEDAI MURNI SDN BHD", True), ("SDN BHD", True), ("KEDAI MURNI SDN BHD NO. 3, JALAN MAWAR", False), ("KEDAI MURNI", False)]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    assert accepts(tokenizer, schema, "KEDAI MURNI\nNO. 3, JALAN MAWAR", rec("KEDAI MURNI NO. 3, JALAN MAWAR"))  # none written: every run


def test_lines_ends_on_keeps_the_runs_of_words_that_end_on_such_a_word(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {"lines": {"first": 4, "ends_on": r"B\.V\.?|AG|Ltd\.?", "cut_before": "(?i:factuur)"}}
    schema["properties"]["name"] = {"type": "string", "maxLength": 48, "x-grounded": grounded}
    letterhead = "                    Coolblue B.V.\nFACTUUR.            Weena 664\nPino Bluebird\n                    Nederland"
    for name, ok in [("Coolblue B.V.", True), ("Coolblue", False), ("Coolblue B.V. FACTUUR", False), ("Nederland", False), ("Pino Bluebird", False)]:
        assert accepts(tokenizer, schema, letterhead, rec(name)) is ok, name
    plain = "Saltbush Plumbing & Gas\nABN 12 345 678 901"  # no run can end on a legal form: every run the options allow
    assert accepts(tokenizer, schema, plain, rec("Saltbush Plumbing & Gas")) and accepts(tokenizer, schema, plain, rec("Saltbush Plumbing"))


def test_lines_shortest_keeps_the_shortest_run_to_a_legal_form_that_names_more_than_it(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {"span": "lines", "lines": {"ends_on": "SDN|BHD|CO|ENTERPRISE", "shortest": True, "first": 3}}
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": grounded}
    brand = "SUSHI MENTAI - PANDAN INDAH\nKMF FOODICIOUS SDN BHD\nNO. 9-G, JALAN PERUBATAN 2"
    assert accepts(tokenizer, schema, brand, rec("KMF FOODICIOUS SDN BHD"))
    assert not accepts(tokenizer, schema, brand, rec("SUSHI MENTAI - PANDAN INDAH KMF FOODICIOUS SDN BHD"))  # a brand line above
    split = "POPULAR BOOK\nCO. (M) SDN BHD\nNO 8, JALAN 7/118B"
    assert accepts(tokenizer, schema, split, rec("POPULAR BOOK CO. (M) SDN BHD"))  # the legal form's line alone names nothing
    assert not accepts(tokenizer, schema, split, rec("CO. (M) SDN BHD"))
    bracket = "AIK HUAT ENTERPRISE (SETIA\nALAM) SDN BHD\nNO. 1"
    assert accepts(tokenizer, schema, bracket, rec("AIK HUAT ENTERPRISE (SETIA ALAM) SDN BHD"))
    assert not accepts(tokenizer, schema, bracket, rec("ALAM) SDN BHD"))  # a run that starts inside brackets names nothing
    assert accepts(tokenizer, schema, bracket, rec("AIK HUAT ENTERPRISE (SETIA"))  # the model still chooses between the ends


def test_lines_cut_before_stops_a_line_and_the_run_at_such_a_word(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    cut = r"\(?[0-9]{5,}-[A-Z]\)?|TEL"
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines", "lines": {"cut_before": cut}}}
    text = "AEON CO. (M) BHD (126926-H)\nNO. 3, JALAN MAWAR, TEL 07-3507405\n(519537-X)\n81100 JOHOR BAHRU"
    for name, ok in [
        ("AEON CO. (M) BHD", True),  # the line, less the registration number and its space
        ("AEON CO. (M) BHD (126926-H)", False),
        ("NO. 3, JALAN MAWAR", True),  # the line less ", TEL ...": its comma and space too
        ("AEON CO. (M) BHD NO. 3, JALAN MAWAR", False),  # no run goes past a cut line
        ("NO. 3, JALAN MAWAR 81100 JOHOR BAHRU", False),
        ("81100 JOHOR BAHRU", True),
        ("519537-X", False),  # a line cut at its start is no value
    ]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    narrowed = json.loads(json.dumps(schema))
    narrowed["properties"]["name"]["x-grounded"]["lines"] |= {"ends_on": "BHD", "first": 1}  # the narrowed runs cut the same
    assert accepts(tokenizer, narrowed, text, rec("AEON CO. (M) BHD")) and not accepts(tokenizer, narrowed, text, rec("AEON CO. (M) BHD (126926-H)"))


def test_lines_to_block_end_runs_to_the_line_before_marks_or_a_cut(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {"span": "lines", "includes": "[0-9]{5}", "lines": {"cut_before": "TEL|GST", "to_block_end": True}}
    schema["properties"]["name"] = {"type": "string", "maxLength": 80, "x-grounded": grounded}
    text = "KEDAI MURNI SDN BHD\nNO. 3, JALAN MAWAR\n81100 JOHOR BAHRU\nJOHOR\nT: TEL 07-3507405\nGST NO 1"
    for name, ok in [
        ("NO. 3, JALAN MAWAR 81100 JOHOR BAHRU JOHOR", True),  # the state's line too: the block ends before the cut line
        ("81100 JOHOR BAHRU JOHOR", True),  # where the run starts is still the model's
        ("NO. 3, JALAN MAWAR 81100 JOHOR BAHRU", False),  # a line short of its block's end
        ("NO. 3, JALAN MAWAR 81100 JOHOR BAHRU JOHOR T", False),  # a cut line with a letter alone left is no value
    ]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    far = "NO. 3, JALAN MAWAR\n81100 JOHOR BAHRU\n" + "\n".join(f"LINE {i}" for i in range(12))
    assert accepts(tokenizer, schema, far, rec("NO. 3, JALAN MAWAR 81100 JOHOR BAHRU"))  # the block's end out of reach: as without it


def test_lines_starts_on_starts_a_block_on_its_first_line_that_writes_such_a_word(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    grounded = {
        "span": "lines",
        "includes": "[0-9]{5}",
        "lines": {"cut_before": "TEL|SDN", "to_block_end": True, "starts_on": "[^\\W_]*[0-9][^\\W_]*"},
    }
    schema["properties"]["name"] = {"type": "string", "maxLength": 120, "x-grounded": grounded}
    text = "KEDAI MURNI SDN BHD\nMURNI MART TAMAN DAYA\n3RD FLR, PLAZA MAWAR\nJLN MAWAR\n81100 JOHOR BAHRU\nTEL 07-3507405"
    for name, ok in [
        ("3RD FLR, PLAZA MAWAR JLN MAWAR 81100 JOHOR BAHRU", True),  # the block's first line with a number (3RD)
        ("81100 JOHOR BAHRU", False),  # the postcode's line alone: a later start of the same block
        ("JLN MAWAR 81100 JOHOR BAHRU", False),
        ("MURNI MART TAMAN DAYA 3RD FLR, PLAZA MAWAR JLN MAWAR 81100 JOHOR BAHRU", False),  # a brand line above it
    ]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    two = "NO 1, JALAN SATU\n40100 SHAH ALAM\nTEL 03-1\nLOT 2\n50100 KUALA LUMPUR"
    for name in ["NO 1, JALAN SATU 40100 SHAH ALAM", "LOT 2 50100 KUALA LUMPUR"]:  # a block each: which block is still the model's
        assert accepts(tokenizer, schema, two, rec(name)), name
    assert not accepts(tokenizer, schema, two, rec("40100 SHAH ALAM"))
    bare = "MURNI MART\nJLN MAWAR\n81100 JOHOR BAHRU"  # no word with a digit but the postcode's, which starts the block's last line
    assert accepts(tokenizer, schema, bare, rec("81100 JOHOR BAHRU"))
    assert not accepts(tokenizer, schema, bare, rec("JLN MAWAR 81100 JOHOR BAHRU"))


def test_day_first_reads_a_date_of_numbers_one_way_where_both_are_dates(tokenizer):
    def schema(day_first):
        return {
            "type": "object",
            "properties": {"d": {"type": "string", "format": "date", "x-grounded": {"day_first": day_first}}},
            "required": ["d"],
        }

    text = "Sold 04/12/2017, paid 04/15/2017"
    for day_first, date, ok in [
        (True, "2017-12-04", True),
        (True, "2017-04-12", False),
        (False, "2017-04-12", True),
        (False, "2017-12-04", False),
        (True, "2017-04-15", True),  # 15 is no month: the one reading there is
    ]:
        assert accepts(tokenizer, schema(day_first), text, {"d": date}) is ok, (day_first, date)


def test_pick_largest_keeps_the_largest_labelled_amount(tokenizer):
    schema = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": {"amount": True, "labels": ["total"], "pick": "largest"}}}}
    schema["required"] = ["total"]
    receipt = "MILO 1KG 17.90\nSUB TOTAL 24.30\nTOTAL:\n25.75\nCASH 30.00"
    for total, ok in [(25.75, True), (24.3, False), (30, False)]:
        assert accepts(tokenizer, schema, receipt, {"total": total}) is ok, total
    assert accepts(tokenizer, schema, "MILO 17.90\nCASH 30.00", {"total": 30})  # no label written: the largest of all
    repaired = grounded_lark(schema, receipt, exclude={("total",): [25.75]})
    for total, ok in [(24.3, True), (25.75, False)]:  # a repair excluded the largest: the next one is held
        constraint = Constraint.lark(repaired, tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"total": total}, separators=(",", ":")) is ok, total


def test_pick_keeps_the_latest_and_the_earliest_date(tokenizer):
    def schema(option: str) -> dict:
        return {"type": "object", "properties": {"d": {"type": "string", "format": "date", "x-grounded": {"pick": option}}}, "required": ["d"]}

    invoice = "Invoice date: 14-11-2025\nService period 01-10-2025 to 31-10-2025\nVervaldatum: 28-11-2025"
    for option, kept in [("largest", "2025-11-28"), ("smallest", "2025-10-01")]:
        for date in ("2025-11-14", "2025-10-01", "2025-10-31", "2025-11-28"):
            assert accepts(tokenizer, schema(option), invoice, {"d": date}) is (date == kept), (option, date)
    repaired = grounded_lark(schema("smallest"), invoice, exclude={("d",): ["2025-10-01"]})
    constraint = Constraint.lark(repaired, tokenizer, stop_token=STOP)  # a repair excluded the earliest: the next is held
    assert instance_accepted(constraint, tokenizer, {"d": "2025-10-31"}, separators=(",", ":"))


def test_labels_of_weight_2_hold_the_values_they_mark_where_the_text_writes_one(tokenizer):
    grounded = {"amount": True, "labels": {"total": 1, "total rounded": 2, "grand total": 2}, "pick": "largest"}
    schema = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": grounded}}, "required": ["total"]}
    receipt = "TOTAL 33.92\nROUNDING -0.02\nTOTAL ROUNDED 33.90\nCASH 50.00"
    for total, ok in [(33.9, True), (33.92, False), (50, False)]:  # the rounded total, though not the largest
        assert accepts(tokenizer, schema, receipt, {"total": total}) is ok, total
    assert accepts(tokenizer, schema, "SUB TOTAL 30.00\nTOTAL 31.80", {"total": 31.8})  # none written: the largest labelled
    repaired = grounded_lark(schema, receipt, exclude={("total",): [33.9]})
    for total, ok in [(33.92, True), (33.9, False)]:  # a repair excluded the preferred value: the labelled ones are left
        constraint = Constraint.lark(repaired, tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"total": total}, separators=(",", ":")) is ok, total


def test_rounding_holds_the_rounded_amount_where_the_text_writes_a_rounding_line(tokenizer):
    grounded = {"amount": True, "labels": ["total"], "pick": "largest", "rounding": 0.05}
    schema = {"type": "object", "properties": {"total": {"type": "number", "x-grounded": grounded}}, "required": ["total"]}
    receipt = "TOTAL SALES (INCL GST) 177.22\nROUNDING ADJ -0.02\nTOTAL 177.20\nCASH 200.00"
    for total, ok in [(177.2, True), (177.22, False), (200, False)]:  # the rounded total, though not the largest
        assert accepts(tokenizer, schema, receipt, {"total": total}) is ok, total
    unrounded = "TOTAL SALES 177.22\nTOTAL 177.20"  # no rounding line: the largest, as without the option
    assert accepts(tokenizer, schema, unrounded, {"total": 177.22}) and not accepts(tokenizer, schema, unrounded, {"total": 177.2})
    apart = "TOTAL 31.47\nROUNDING 0.00\nTOTAL 25.00"  # no multiple of the step within a step of 31.47: it stays
    assert accepts(tokenizer, schema, apart, {"total": 31.47})
    repaired = grounded_lark(schema, receipt, exclude={("total",): [177.2]})
    constraint = Constraint.lark(repaired, tokenizer, stop_token=STOP)  # a preference: a repair may exclude it
    assert instance_accepted(constraint, tokenizer, {"total": 177.22}, separators=(",", ":"))


def test_a_50_kb_document(tokenizer):
    random.seed(0)
    words = ["invoice", "Ltd", "Müller", 'say "hi"', "back\\slash", "line\nbreak", "€", "12.50", "Corp."]
    text = " ".join(random.choice(words) for _ in range(8000))[:50_000] + " Final Vendor Name"
    assert len(text.encode()) >= 50_000
    assert accepts(tokenizer, PARTY, text, rec("Final Vendor Name", 12.5))
    assert not accepts(tokenizer, PARTY, text, rec("Final Vendor Names"))


def test_enum_members_need_themselves_or_one_of_their_spellings_in_the_text(tokenizer):
    schema = {
        "type": "object",
        "properties": {"currency": {"enum": ["USD", "EUR", "CAD"], "x-grounded": {"spellings": {"USD": ["$"], "EUR": ["€"], "CAD": ["C$"]}}}},
        "required": ["currency"],
    }
    canadian = "Total C$1,260.00"
    assert accepts(tokenizer, schema, canadian, {"currency": "CAD"})
    assert not accepts(tokenizer, schema, canadian, {"currency": "USD"})  # the $ of C$ is not a dollar sign of its own
    assert accepts(tokenizer, schema, "Summe 5 € (EUR) or $6", {"currency": "USD"})
    assert not accepts(tokenizer, schema, "Summe 5 €", {"currency": "USD"})


def test_prefer_members_holds_a_member_written_itself_over_one_shown_by_a_spelling_alone(tokenizer):
    """``$1,450.00 CAD``: ``$`` spells USD too, but the text writes CAD itself. With ``prefer_members`` the grammar
    offers CAD only; without, both; where the text writes no member itself, the spelling still shows one."""
    spellings = {"USD": ["$"], "EUR": ["€"], "CAD": ["C$"]}
    schema = {"type": "object", "properties": {"currency": {"enum": ["USD", "EUR", "CAD"], "x-grounded": {"spellings": spellings}}}}
    schema["required"] = ["currency"]
    preferring = json.loads(json.dumps(schema))
    preferring["properties"]["currency"]["x-grounded"]["prefer_members"] = True
    text = "Amount due: $1,450.00 CAD"
    assert accepts(tokenizer, schema, text, {"currency": "USD"}) and accepts(tokenizer, schema, text, {"currency": "CAD"})
    assert accepts(tokenizer, preferring, text, {"currency": "CAD"}) and not accepts(tokenizer, preferring, text, {"currency": "USD"})
    assert accepts(tokenizer, preferring, "Amount due: $1,450.00", {"currency": "USD"})


def test_units_read_a_count_written_in_words_or_digits_as_n_unit(tokenizer):
    schema = {"type": "object", "properties": {"term": {"type": "string", "x-grounded": {"units": ["year", "month"]}}}, "required": ["term"]}
    text = "This agreement runs for three (3) years; notices are due within 18 months."
    assert accepts(tokenizer, schema, text, {"term": "3 years"}) and accepts(tokenizer, schema, text, {"term": "18 months"})
    assert not accepts(tokenizer, schema, text, {"term": "three (3) years"})  # the count, normalised, not the span
    assert not accepts(tokenizer, schema, text, {"term": "3 months"})


def test_amount_numbers_leave_out_rates_and_quantities(tokenizer):
    schema = {"type": "object", "properties": {"tax": {"type": "number", "x-grounded": {"amount": True}}}, "required": ["tax"]}
    text = "12 units; VAT 20%: EUR 14.80"
    assert accepts(tokenizer, schema, text, {"tax": 14.8})
    assert not accepts(tokenizer, schema, text, {"tax": 20}) and not accepts(tokenizer, schema, text, {"tax": 12})


def test_span_word_holds_a_string_to_one_word_less_its_marks(tokenizer):
    schema = json.loads(json.dumps(PARTY))
    schema["properties"]["name"] = {"type": "string", "maxLength": 12, "x-grounded": {"span": "word"}}
    text = "Invoice No.: (HP-55021), ref 47/2025 for Marsh Lane Primary School"
    for name, ok in [
        ("HP-55021", True),
        ("47/2025", True),
        ("No", True),
        ("HP", False),
        ("(HP-55021)", False),
        ("Marsh Lane", False),
        ("Primary", True),
        ("School", True),
    ]:
        assert accepts(tokenizer, schema, text, rec(name)) is ok, name
    schema["properties"]["name"]["maxLength"] = 6
    assert not accepts(tokenizer, schema, text, rec("HP-55021")) and accepts(tokenizer, schema, text, rec("School"))


BY_PARAGRAPH = {
    "type": "object",
    "required": ["receipts"],
    "properties": {
        "receipts": {
            "type": "array",
            "x-grounded": {"items": "paragraph"},
            "items": {
                "type": "object",
                "required": ["shop", "total"],
                "additionalProperties": False,
                "properties": {"shop": {"type": "string", "maxLength": 20, "x-grounded": True}, "total": {"type": "number", "x-grounded": True}},
            },
        }
    },
}
RECEIPTS = "ACME STORE\nTOTAL 5.00\n\nBOLT HARDWARE\nTOTAL 7.50\n\n\nCRAB CAFE\nTOTAL 5.00\n"


@pytest.mark.parametrize(
    "items, ok",
    [
        ([], True),
        ([("ACME STORE", 5)], True),
        ([("ACME STORE", 5), ("BOLT HARDWARE", 7.5), ("CRAB CAFE", 5)], True),
        ([("BOLT HARDWARE", 7.5), ("CRAB CAFE", 5)], True),  # a paragraph may hold no item
        ([("ACME STORE", 5), ("ACME STORE", 5)], False),  # the same receipt twice: a greedy loop is impossible
        ([("BOLT HARDWARE", 7.5), ("ACME STORE", 5)], False),  # text order
        ([("ACME STORE", 7.5)], False),  # a value from another paragraph
        ([("CRAB CAFE", 5), ("CRAB", 5)], False),  # one item per paragraph
    ],
)
def test_items_of_an_array_grounded_by_paragraph(tokenizer, items, ok):
    record = {"receipts": [{"shop": shop, "total": total} for shop, total in items]}
    assert accepts(tokenizer, BY_PARAGRAPH, RECEIPTS, record) is ok


@pytest.mark.parametrize("shops, ok", [(["ACME STORE", "BOLT HARDWARE", "CRAB CAFE"], True), (["BOLT HARDWARE", "CRAB CAFE"], False), ([], False)])
def test_every_paragraph_is_an_item(tokenizer, shops, ok):
    every = json.loads(json.dumps(BY_PARAGRAPH).replace('{"items": "paragraph"}', '{"items": "paragraph", "every": true}'))
    totals = {"ACME STORE": 5, "BOLT HARDWARE": 7.5, "CRAB CAFE": 5}
    assert accepts(tokenizer, every, RECEIPTS, {"receipts": [{"shop": s, "total": totals[s]} for s in shops]}) is ok


def test_items_by_line_and_a_bad_declaration(tokenizer):
    by_line = json.loads(json.dumps(BY_PARAGRAPH).replace('"paragraph"', '"line"'))
    lines = "ACME 5.00\nBOLT 7.50\nCRAB 5.00"
    assert accepts(tokenizer, by_line, lines, {"receipts": [{"shop": "ACME", "total": 5}, {"shop": "CRAB", "total": 5}]})
    assert not accepts(tokenizer, by_line, lines, {"receipts": [{"shop": "ACME", "total": 7.5}]})
    from fucina_jobs.grounding.declaration import GroundingError, grounded_fields

    bad = json.loads(json.dumps(BY_PARAGRAPH).replace('{"items": "paragraph"}', '{"items": "page"}'))
    with pytest.raises(GroundingError, match=r'properties/receipts: x-grounded.items must be one of paragraph, line; not "page"$'):
        grounded_fields(bad)


def test_only_labelled_leaves_a_field_null_where_no_label_is_written():
    schema = {
        "type": "object",
        "properties": {
            "term": {"type": ["string", "null"], "x-grounded": {"units": ["year"], "labels": ["period of"], "only_labelled": True}},
            "state": {"type": ["string", "null"], "x-grounded": {"labels": ["laws of"], "only_labelled": True}},
        },
        "required": ["term", "state"],
    }
    labelled = "It lasts for a period of two (2) years under the laws of Ohio. Notices within one year."
    unlabelled = "Notices within one year; Ohio courts."
    fields = {g.name: g for g in grounded_fields(schema)}
    assert candidates(fields["term"], labelled) == ['"2 years"'] and candidates(fields["term"], unlabelled) == []
    grammar = grounded_lark(schema, unlabelled)
    assert "Ohio" not in grammar and "1 year" not in grammar  # both fields may only be null
    assert "Ohio" in grounded_lark(schema, labelled)


def test_most_words_bounds_a_run_after_a_label():
    schema = {"type": "object", "properties": {"state": {"type": "string", "x-grounded": {"labels": ["laws of"], "most_words": 2}}}}
    grammar = grounded_lark(schema, "governed by the laws of New York, without regard to conflicts")
    assert '"New" (" " ("York")?)?' in grammar and "without" not in grammar
    schema["properties"]["state"]["x-grounded"]["most_words"] = 3
    assert '"Acme" (" " ("Widgets" (" " ("Inc" (".")?)?)?)?)?' in grounded_lark(schema, "under the laws of Acme Widgets Inc. and others")


STATE = {
    "type": "object",
    "properties": {
        "state": {"type": ["string", "null"], "x-grounded": {"labels": ["laws of"], "known_values": ["New York", "Ohio"], "most_words": 2}}
    },
    "required": ["state"],
}


@pytest.mark.parametrize(
    "text, accepted, refused",
    [
        # the label marks a known value: that one, not the known value an address writes
        ("Acme, 1 Main St, New York. Governed by the laws of OHIO.", ["OHIO"], ["New York", "Main St", "Acme"]),
        # the label marks an unknown value: the run after the label, not a known value written elsewhere
        ("Acme, 1 Main St, New York. Governed by the laws of Texas.", ["Texas"], ["New York"]),
        # no label written: the known values the text writes (any case and spacing), nothing else
        ("Acme, 1 Main St, new  york, and Ohio courts.", ["new york", "Ohio"], ["Main St", "Acme"]),
    ],
)
def test_known_values_narrow_a_run_to_the_values_the_gold_gave(tokenizer, text, accepted, refused):
    for value in accepted:
        assert accepts(tokenizer, STATE, text, {"state": value}), value
    for value in refused:
        assert not accepts(tokenizer, STATE, text, {"state": value}), value


def test_most_words_bounds_every_run_also_where_no_label_is_written(tokenizer):
    text = "Acme Widgets International Holdings signed here."
    assert accepts(tokenizer, STATE, text, {"state": "Acme Widgets"})
    assert not accepts(tokenizer, STATE, text, {"state": "Acme Widgets International"})


def test_a_chunk_leaves_a_labelled_field_to_the_chunk_that_writes_its_label(tokenizer):
    chunk = "Acme Inc, 1 Main St, Springfield."
    whole = chunk + " This agreement is governed by the laws of Texas."
    assert accepts(tokenizer, STATE, chunk, {"state": "Acme Inc"})  # read alone, the chunk offers its own runs
    alone = Constraint.lark(grounded_lark(STATE, chunk, whole=whole), tokenizer, stop_token=STOP)
    assert instance_accepted(alone, tokenizer, {"state": None}, separators=(",", ":"))
    for value in ("Acme Inc", "Springfield"):
        constraint = Constraint.lark(grounded_lark(STATE, chunk, whole=whole), tokenizer, stop_token=STOP)
        assert not instance_accepted(constraint, tokenizer, {"state": value}, separators=(",", ":")), value
    # a document that writes the label nowhere leaves every chunk its own runs
    assert "Springfield" in grounded_lark(STATE, chunk, whole=chunk + " More text.")


def parties(grounded: dict, low: int = 1, high: int | None = 2) -> dict:
    """A schema of one list of grounded strings, a contract's parties, with ``grounded`` as its items' options."""
    array = {"type": "array", "minItems": low, "items": {"type": "string", "maxLength": 40, "x-grounded": grounded}}
    return {"type": "object", "properties": {"party": array | ({"maxItems": high} if high is not None else {})}, "required": ["party"]}


def test_a_list_of_labelled_names_names_each_once(tokenizer):
    schema = parties({"labels": ["between"], "lines": {"ends_on": "Inc\\."}})
    one = "This agreement is made between Acme Inc. and its employee."
    assert accepts(tokenizer, schema, one, {"party": ["Acme Inc."]})
    assert not accepts(tokenizer, schema, one, {"party": ["Acme Inc.", "Acme Inc."]})  # the one name the label marks, once
    two = one + " A second copy between Bolt Inc. and others."
    for party in (["Acme Inc.", "Bolt Inc."], ["Bolt Inc.", "Acme Inc."], ["Bolt Inc."]):
        assert accepts(tokenizer, schema, two, {"party": party}), party
    assert not accepts(tokenizer, schema, two, {"party": ["Bolt Inc.", "Bolt Inc."]})
    runs = parties({"labels": ["between"], "most_words": 3})  # no ending: every run after the label, one around the first name
    assert accepts(tokenizer, runs, "Made between Mark T. Bobak (Bobak) here.", {"party": ["Mark T. Bobak"]})
    assert not accepts(tokenizer, runs, "Made between Mark T. Bobak (Bobak) here.", {"party": ["Mark", "Mark T. Bobak"]})
    pair = parties({"labels": ["between"], "most_words": 3}, low=2)  # two asked for where the runs name one: the item's rule
    assert accepts(tokenizer, pair, "Made between Mark T. Bobak (Bobak) here.", {"party": ["Mark T. Bobak", "Mark"]})


def test_a_list_of_many_labelled_runs_never_names_its_first_item_again(tokenizer):
    """More runs than ``DISTINCT_MOST``: a first value, then later items that neither hold it nor are runs of its words;
    where no such run is left, a list of one (never a comma that nothing can follow)."""
    schema = parties({"labels": ["between"], "most_words": 3})
    text = "This deal is made between Acme Widgets Inc and between Bolt Tools and more words here."
    for party, ok in [
        (["Acme Widgets Inc", "Bolt Tools"], True),
        (["Bolt", "Acme Widgets"], True),
        (["Bolt Tools"], True),
        (["Acme Widgets Inc", "Acme Widgets Inc"], False),  # the first again
        (["Bolt Tools", "Bolt Tools and"], False),  # a run around it
        (["Acme Widgets Inc", "Widgets"], False),  # a run of its words
        (["Bolt Tools", "Acme", "Acme Widgets"], False),  # maxItems
        ([], False),  # minItems
    ]:
        assert accepts(tokenizer, schema, text, {"party": party}) is ok, party
    unbounded = parties({"labels": ["between"], "most_words": 3}, low=0, high=None)
    for party, ok in [([], True), (["Bolt Tools", "Acme", "Acme Widgets Inc"], True), (["Bolt Tools", "Acme", "Bolt"], False)]:
        assert accepts(tokenizer, unbounded, text, {"party": party}) is ok, party
    longer = parties({"labels": ["between"], "most_words": 6})
    alone = "Made between Mark T. Bobak (Bobak) residing here."  # every run after the label names Mark, the first word
    assert "OTHER" not in grounded_lark(longer, alone)  # no later item can follow any first one
    assert accepts(tokenizer, longer, alone, {"party": ["Mark T. Bobak (Bobak)"]})
    assert not accepts(tokenizer, longer, alone, {"party": ["Mark T. Bobak (Bobak)", "Mark T. Bobak"]})


def test_a_currency_enum_that_spells_no_member_reads_the_signs_of_its_codes(tokenizer):
    """A newcomer's ``enum: [USD, EUR, MYR]`` with no ``spellings``: ``€`` shows EUR, ``RM`` MYR; a field's own
    spellings replace the table."""
    schema = {"type": "object", "properties": {"currency": {"enum": ["USD", "EUR", "MYR"], "x-grounded": True}}, "required": ["currency"]}
    assert accepts(tokenizer, schema, "Summe 12,00 €", {"currency": "EUR"}) and not accepts(tokenizer, schema, "Summe 12,00 €", {"currency": "USD"})
    assert accepts(tokenizer, schema, "TOTAL RM 8.50", {"currency": "MYR"})
    own = json.loads(json.dumps(schema))
    own["properties"]["currency"]["x-grounded"] = {"spellings": {"USD": ["dollars"]}}
    text = "12,00 € or ten dollars"
    assert not accepts(tokenizer, own, text, {"currency": "EUR"}) and accepts(tokenizer, own, text, {"currency": "USD"})
