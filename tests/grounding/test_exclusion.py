"""``grounded_lark(exclude=)``: a repair takes values away from a grounded field's candidates, and nothing else changes."""

import random

import pytest

from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.grammar import field_values, grounded_lark

from tests.helpers import STOP, instance_accepted
from .test_grammar import HARD, PARTY, rec

CURRENCY = {
    "type": "object",
    "properties": {
        "currency": {"enum": ["USD", "EUR", "GBP"], "x-grounded": {"spellings": {"EUR": ["€"]}}},
        "amount": {"type": "number", "x-grounded": True},
    },
    "required": ["currency", "amount"],
    "additionalProperties": False,
}


def accepts(tokenizer, schema, text, record, exclude) -> bool:
    constraint = Constraint.lark(grounded_lark(schema, text, exclude), tokenizer, stop_token=STOP)
    return instance_accepted(constraint, tokenizer, record, separators=(",", ":"))


@pytest.mark.parametrize(
    "record, exclude, ok",
    [
        (rec('ACME "Tools" GmbH'), {("name",): ['ACME "Tools" GmbH']}, False),  # the excluded span, quotes and all
        (rec('Seller: ACME "Tools" GmbH'), {("name",): ['ACME "Tools" GmbH']}, False),  # a span that holds it names the same thing
        (rec('"Tools" GmbH'), {("name",): ['ACME "Tools" GmbH']}, False),  # ... and so does a run of its words,
        (rec("Nordlicht "), {("name",): ["Nordlicht Bakery"]}, False),  # with a space or a comma around it
        (rec("GmbH\\Zürich"), {("name",): ['ACME "Tools" GmbH']}, True),  # a span that only overlaps it is another value
        (rec("Nordlicht Bakery & Co."), {("name",): ['ACME "Tools" GmbH', "Bakery"]}, False),
        (rec("Nordlicht"), {("name",): ['ACME "Tools" GmbH', "Bakery"]}, True),
        (rec("ACME", 1234.5), {("amount",): [1234.5]}, False),
        (rec("ACME", 0), {("amount",): [1234.5]}, True),  # the allowance is still there
        (rec("ACME", 0), {("amount",): [0]}, False),  # ... unless it is excluded too
        (rec("ACME", 0, "2025-03-04"), {("date",): ["2025-04-03"]}, True),
        (rec("ACME", 0, "2025-04-03"), {("date",): ["2025-04-03"]}, False),
        (rec("ACME", 0, None), {("date",): ["2025-04-03", "2025-03-04"]}, True),  # nullable: null stays
        (rec("ACME", 1234.5), {("name",): ["Nordlicht"]}, True),  # other fields keep every candidate
    ],
)
def test_excluded_values_are_refused_and_the_rest_accepted(tokenizer, record, exclude, ok):
    assert accepts(tokenizer, PARTY, HARD, record, exclude) is ok


def test_an_enum_member_can_be_excluded(tokenizer):
    text = "Total € 12,00 (USD 13.10)"
    assert accepts(tokenizer, CURRENCY, text, {"currency": "EUR", "amount": 12}, {})
    assert not accepts(tokenizer, CURRENCY, text, {"currency": "EUR", "amount": 12}, {("currency",): ["EUR"]})
    assert accepts(tokenizer, CURRENCY, text, {"currency": "USD", "amount": 12}, {("currency",): ["EUR"]})


def test_no_exclusion_is_the_grammar_without_one():
    assert grounded_lark(PARTY, HARD, {}) == grounded_lark(PARTY, HARD) == grounded_lark(PARTY, HARD, None)


def test_field_values_are_the_values_the_grammar_offers():
    fields = {g.name: g for g in grounded_fields(PARTY)}
    assert field_values(fields["name"], HARD) is None  # any span
    assert field_values(fields["amount"], HARD) == [0, 1234.5]
    assert field_values(fields["date"], HARD) == ["2025-03-04", "2025-04-03"]
    assert field_values({g.name: g for g in grounded_fields(CURRENCY)}["currency"], "Total € 12,00 (USD 13.10)") == ["USD", "EUR"]


def test_an_exclusion_in_a_50_kb_document(tokenizer):
    random.seed(0)
    words = ["invoice", "Ltd", "Müller", 'say "hi"', "back\\slash", "line\nbreak", "€", "12.50", "Corp."]
    text = " ".join(random.choice(words) for _ in range(8000))[:50_000] + " Final Vendor Name"
    exclude = {("name",): ["Final Vendor Name", 'Müller say "hi"']}
    assert accepts(tokenizer, PARTY, text, rec("Final Vendor", 12.5), {})
    assert not accepts(tokenizer, PARTY, text, rec("Final Vendor", 12.5), exclude)
    assert accepts(tokenizer, PARTY, text, rec("Ltd Müller", 12.5), exclude)


def test_pinned_fields_take_their_one_value_grounded_or_not(tokenizer):
    pinned = {("name",): 'ACME "Tools" GmbH', ("kind",): "b"}
    constraint = lambda: Constraint.lark(grounded_lark(PARTY, HARD, {("amount",): [0]}, pinned), tokenizer, stop_token=STOP)  # noqa: E731
    assert instance_accepted(constraint(), tokenizer, rec('ACME "Tools" GmbH', 1234.5, kind="b"), separators=(",", ":"))
    assert not instance_accepted(constraint(), tokenizer, rec("Nordlicht", 1234.5, kind="b"), separators=(",", ":"))
    assert not instance_accepted(constraint(), tokenizer, rec('ACME "Tools" GmbH', 1234.5, kind="a"), separators=(",", ":"))
    assert not instance_accepted(constraint(), tokenizer, rec('ACME "Tools" GmbH', 0, kind="b"), separators=(",", ":"))
    forced = constraint()
    forced.reset()
    assert forced.forced_tokens(), "a pinned first field is forced from the first token: drafts cost no model choice"
