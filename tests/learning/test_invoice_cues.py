"""Cues learned from invoices made up here: a letterhead under a title or a greeting, keys in several languages
written in few of them, dates told apart by their order, identifiers with digits."""

import random

from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.grounding import learned_file
from fucina_jobs.learning import learned as learned_cues
from fucina_jobs.grounding.declaration import whole_words
from fucina_jobs.learning.cues import DIGIT_WORD, _any_of, _shape
from tests.helpers import STOP, instance_accepted

SCHEMA = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "maxLength": 24, "x-grounded": True},
        "issued": {"type": "string", "format": "date", "x-grounded": True},
        "due": {"type": "string", "format": "date", "x-grounded": True},
        "vendor": {"type": "string", "maxLength": 48, "x-grounded": True},
        "customer": {"type": "string", "maxLength": 48, "x-grounded": True},
    },
    "required": ["number", "issued", "due", "vendor", "customer"],
    "additionalProperties": False,
}
FIRST = ["Brightwater", "Kestrel", "Oxbow", "Maple", "Fernleaf", "Tidewell", "Saltbush", "Copperline"]
#: The customer's key, in the language of each invoice: English most often, the others once each in eight (twice in 16).
KEYS = ["Customer:", "Customer:", "Kunde:", "Customer:", "Klant:", "Customer:", "Cliente:", "Customer:"]


def invoice(n: int) -> tuple[str, dict]:
    """An invoice: its vendor on the top line, or below a title or a greeting, with its street on the next line; an
    order date before the issue date and a delivery date between it and the due date; the customer after a key."""
    rng = random.Random(n)
    vendor = f"{FIRST[n % 8]} {['Supply', 'Tools', 'Freight'][n % 3]} {['Ltd', 'Inc.', 'Co.'][n // 8]}"
    customer = f"{['Halden', 'Granite', 'Ashby', 'Molen'][n % 4]} {['Robotics', 'Outfitters', 'Court', 'Bar'][n // 4 % 4]}"
    number = f"INV-{rng.randint(1000, 9999)}"
    greeting = ["Dear Sir,", "Dear Madam,", "Hi there,", "Hello all,"][n // 4]
    head = ["", f"INVOICE {number}\n", f"{greeting}\n", f"TAX INVOICE {number}\n"][n % 4]
    month = 1 + n % 9
    ordered, issued, delivered, due = (f"2025-{month + k // 3:02d}-{10 + k:02d}" for k in (0, 3, 4, 6))
    text = (
        f"{head}{vendor}\n{rng.randint(1, 99)} Mill Street, Olympia\n\n"
        f"Order of {ordered}, invoice {number} issued {issued}\n{KEYS[n % len(KEYS)]} {customer}\n"
        f"Delivered {delivered}. Please pay by {due}.\nTotal: {rng.randint(100, 900)}.00"
    )
    return text, {"number": number, "issued": issued, "due": due, "vendor": vendor, "customer": customer}


GOLD = [invoice(n) for n in range(16)]


def learned():
    return {c.name: c for c in learned_cues.learn(SCHEMA, GOLD)}


def test_a_letterhead_is_learned_as_top_lines_cut_at_titles_and_numbers_each_name_within_its_line(tokenizer):
    vendor = learned()["vendor"]
    options, cuts = vendor.options, vendor.evidence["cuts"]
    assert options["lines"]["first"] <= 2 and options["lines"]["within_line"] is True, options
    cut = whole_words(options["lines"]["cut_before"])
    assert cut.search("TAX INVOICE INV-2231"), cuts  # a title's number, in a row no gold row writes
    assert not any(cut.search(label["vendor"]) for _, label in GOLD), cuts
    merged = learned_file.apply(SCHEMA, learned_cues.entries(list(learned().values())), "test")
    text = "INVOICE\nSaltbush Plumbing\n9 Wattle Crescent\n\nOrder of 2025-01-02, invoice INV-1045 issued 2025-01-05\nKunde: Liam Ng"
    for name, ok in [("Saltbush Plumbing", True), ("INVOICE", False), ("Saltbush Plumbing 9 Wattle", False)]:
        record = {"number": "INV-1045", "issued": "2025-01-05", "due": "2025-01-05", "vendor": name, "customer": "Liam Ng"}
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, record, separators=(",", ":")) is ok, name


def test_a_key_in_two_invoices_is_learned_as_a_label():
    """Invoices in several languages write each key in few of them (``Kunde:``, ``Klant:``): a key before the gold
    value is a label once two invoices write it, under the share a wording with no colon needs (``test_learn.py``,
    the deposit)."""
    customer = learned()["customer"]
    labels = customer.options["labels"]
    assert {"customer", "kunde", "klant", "cliente"} <= set(labels), labels
    assert customer.evidence["labels"]["kunde"]["marks_gold_in_rows"] == 2  # KEYS repeats after 8 invoices


def test_a_key_one_document_writes_is_not_learned():
    """One scan's OCR typo (``Custorner:``) is a key before the gold value in one row alone: not a label, however
    well it marks that row."""
    gold = [(text.replace("Cliente:", "Custorner:") if n == 6 else text, label) for n, (text, label) in enumerate(GOLD[:8])]
    labels = {c.name: c for c in learned_cues.learn(SCHEMA, gold)}["customer"].options.get("labels", [])
    assert "custorner" not in labels and "kunde" not in labels, labels
    assert "customer" in labels, labels


def test_an_issue_and_a_due_date_are_learned_as_the_earliest_and_the_latest_labelled():
    cues = learned()
    assert cues["due"].options.get("pick") == "largest", cues["due"].options
    assert cues["issued"].options.get("labels") == ["issued"], cues["issued"].options  # the order date is earlier


def test_an_identifier_is_learned_as_one_word_with_a_digit():
    options = learned()["number"].options
    assert options["span"] == "word" and options["includes"] == DIGIT_WORD, options


def test_a_word_with_digits_is_tried_as_a_cut_by_its_shape():
    """A registration number cuts as its shape (digits counted, letters any), not as the one number seen."""
    cut = whole_words(_any_of({_shape("126926-H"): 2, "tel": 2}))
    assert cut.search("AEON CO. (M) BHD (880512-W)") and cut.search("TEL: 03-1234")
    assert not cut.search("NO 12-A, JALAN 5") and not cut.search("81100 JOHOR BAHRU")
