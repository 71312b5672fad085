"""Learning a field's value shape from a few gold rows: what every gold value has, and nothing the gold ever held
refused."""

from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.learned_file import apply
from fucina_jobs.learning.learned import entries, learn
from fucina_jobs.learning.shape import SHAPE_VALUES

SCHEMA = {
    "type": "object",
    "properties": {
        "tenant": {"type": "string", "x-grounded": True},
        "block": {"type": "string", "x-grounded": True},
        "income": {"type": "number", "x-grounded": True},
    },
}
TENANTS = ["Maria Rossi", "Hal Berg", "Ona Duarte", "Piet Vos", "Lea Kim", "Bo Lund"]
BLOCKS = ["A", "B7", "C", "D2", "E", "F"]
INCOMES = [12500, 48000, 3100, 27750, 9900, 61000]


def gold() -> list[tuple[str, dict]]:
    rows = []
    for i, (tenant, block, income) in enumerate(zip(TENANTS, BLOCKS, INCOMES)):
        text = (
            f"Lease {i + 1} of the flats.\nTenant: {tenant}, block {block}.\nThe rent is due to the owner by them on day 1.\n"
            f"Declared income: {income:,} a year; page {i + 1} of 3."
        )
        rows.append((text, {"tenant": tenant, "block": block, "income": income}))
    return rows


def shapes() -> dict:
    learned = entries(learn(SCHEMA, gold()))
    fields = grounded_fields(apply(SCHEMA, learned, "test"))
    return {g.name: g.shape for g in fields}, learned


def test_a_function_word_a_letter_alone_and_an_amount_of_another_magnitude_are_refused():
    shape, learned = shapes()
    assert not any(map(shape["tenant"].fits, ["to", "them", "THE", "a", "of", "M", "|", "1", "Tenant", "the owner"]))
    assert all(map(shape["tenant"].fits, [*TENANTS, "Jo Ito", "Tenant Maria"]))
    assert not shape["income"].fits(1) and not shape["income"].fits(3)
    assert all(map(shape["income"].fits, [*INCOMES, 1500, 300000]))
    evidence = learned["tenant"]["evidence"]["shape"]
    assert evidence["values"] == len(TENANTS) and evidence["letter"]["share"] == 1.0 and evidence["least_chars"]["shortest"] == len("Bo Lund")


def test_a_field_whose_gold_holds_a_one_letter_value_keeps_them():
    shape, _ = shapes()
    assert "least_chars" not in {k for k, v in vars(shape["block"]).items() if v}
    assert shape["block"].fits("G") and shape["block"].fits("H9")


def test_too_few_gold_values_learn_no_shape():
    learned = entries(learn(SCHEMA, gold()[: SHAPE_VALUES - 1]))
    assert all("shape" not in field["x-grounded"] for field in learned.values())
