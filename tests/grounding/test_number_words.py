"""Numbers written in English words: read as numbers, offered to grounded fields, located and learned like figures."""

import random

import pytest

from fucina_jobs.grounding.candidates import candidates
from fucina_jobs.grounding.check import ungrounded_values
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.grounding.number_words import word_numbers
from fucina_jobs.grounding.spans import value_spans
from fucina_jobs.grounding.values import numbers_in
from fucina_jobs.learning import learned as learned_cues
from fucina_jobs.learning.evidence import occurrences


@pytest.mark.parametrize(
    "text, number",
    [
        ("one hundred and twenty-five thousand", 125000),
        ("Twenty Five", 25),
        ("FIVE THOUSAND DOLLARS", 5000),
        ("one hundred and twenty", 120),
        ("thirty (30) days", 30),
        ("one million two hundred thousand", 1200000),
        ("Nineteen hundred and ninety-nine", 1999),
        ("two thousand twenty-four", 2024),
        ("a thousand dollars", 1000),
        ("five dollars", 5),  # a lone unit that a currency marks
        ("Rupees Twelve Only", 12),  # ... before it
    ],
)
def test_number_words_are_read_as_one_number(text, number):
    assert list(word_numbers(text)) == [number]


def test_lone_small_words_ordinals_and_hyphened_words_are_no_numbers():
    prose = "One of the parties shall send a copy within two years, on the twenty-fifth day, for a forty-hour week."
    assert word_numbers(prose) == {}
    assert numbers_in(prose) == set()
    assert list(word_numbers("five six")) == [] and list(word_numbers("twenty thirty")) == [20, 30]  # two numbers


def test_money_in_words_needs_a_currency():
    assert word_numbers("twenty-five thousand", money=True) == {}
    assert word_numbers("Twenty-Five Thousand Dollars", money=True) == {25000: [(0, 28)]}  # the span takes the currency
    assert word_numbers("USD five", money=True) == {5: [(0, 8)]}
    assert word_numbers("one try", money=True) == {}  # a code only in capitals


SCHEMA = {
    "type": "object",
    "properties": {
        "fee": {"type": "number", "x-grounded": {"amount": True}},
        "notice_days": {"type": "integer", "x-grounded": True},
    },
    "required": ["fee", "notice_days"],
}
LETTER = "One of the parties pays the other a fee of Twenty-Five Thousand Dollars on signing, and may end this with thirty days' notice."


def test_a_grounded_number_written_only_in_words_is_offered_checked_and_located():
    fields = {g.name: g for g in grounded_fields(SCHEMA)}
    assert candidates(fields["fee"], LETTER) == ["25000"]
    assert candidates(fields["notice_days"], LETTER) == ["30", "25000"]  # no lone "one" (or "a") as 1
    assert "25000" in grounded_lark(SCHEMA, LETTER)
    record = {"fee": 25000, "notice_days": 30}
    assert ungrounded_values(record, list(fields.values()), LETTER) == (2, [])
    spans = value_spans(record, list(fields.values()), LETTER)
    assert LETTER[slice(*spans["fee"])] == "Twenty-Five Thousand Dollars" and LETTER[slice(*spans["notice_days"])] == "thirty"


WORDS = ["Five", "Twelve Thousand", "Forty-Two Hundred", "Seven Hundred and Fifty", "Ninety Thousand", "Three Thousand"]
VALUES = [5, 12000, 4200, 750, 90000, 3000]


def letter(n: int) -> tuple[str, dict]:
    """A letter that writes its fee in words only, beside another amount in figures and a count in words."""
    rng = random.Random(n)
    text = (
        f"Dear Ms Roe,\nFurther to our meeting of {rng.randint(2, 9)} May, one copy of the terms is enclosed. "
        f"Our fee: {WORDS[n]} Dollars, payable in {rng.choice(['twenty', 'thirty', 'sixty'])} days.\n"
        f"Expenses of ${rng.randint(100, 900)}.00 are billed apart.\nYours, Jane Doe"
    )
    return text, {"fee": VALUES[n]}


def test_learn_matches_gold_to_amounts_written_in_words():
    schema = {"type": "object", "properties": {"fee": {"type": "number", "x-grounded": True}}, "required": ["fee"]}
    gold = [letter(n) for n in range(len(WORDS))]
    g = grounded_fields(schema)[0]
    text, label = gold[2]
    assert [text[a:b] for a, b in occurrences(g, label["fee"], text)] == ["Forty-Two Hundred Dollars"]
    cues = {c.name: c for c in learned_cues.learn(schema, gold)}
    assert cues["fee"].evidence["written"] == len(gold)
    assert "fee" in cues["fee"].options["labels"]
