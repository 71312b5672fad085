"""The repair planner: the smallest change of grounded values that keeps a broken rule, and what it excludes."""

from fucina_jobs.rules.declaration import rules_of
from fucina_jobs.rules.repair import Field, Repair

SCHEMA = {
    "type": "object",
    "properties": {"vendor": {"type": "string"}, "customer": {"type": "string"}, "subtotal": {"type": "number"},
                   "tax": {"type": "number"}, "total": {"type": "number"}, "note": {"type": "string"}},
    "x-rules": [{"name": "sum", "check": "subtotal + tax == total", "tolerance": 0.01}, {"name": "tax_below", "check": "tax < subtotal"},
                {"name": "parties", "check": "vendor != customer"}, {"name": "noted", "check": "note != 'n/a'"}],
}
RULES = rules_of(SCHEMA)
AMOUNTS = [0, 44.84, 127.5, 222, 527.5, 572.34]  # what the text writes (tax may also be 0)
FIELDS = {"subtotal": Field(("subtotal",), AMOUNTS), "tax": Field(("tax",), AMOUNTS), "total": Field(("total",), AMOUNTS[1:]),
          "vendor": Field(("vendor",), None), "customer": Field(("customer",), None)}
GOOD = {"vendor": "Brightwater", "customer": "Halden", "subtotal": 527.5, "tax": 44.84, "total": 572.34}


def test_a_record_that_keeps_every_rule_needs_no_plan():
    assert Repair().plan(GOOD, RULES, FIELDS, {}) is None


def test_one_wrong_amount_is_narrowed_to_the_value_that_adds_up_and_the_others_are_held():
    record = GOOD | {"subtotal": 222}
    repair = Repair()
    plan = repair.plan(record, RULES, FIELDS, {"subtotal": 0.6, "tax": 0.9, "total": 0.95})
    assert plan == {("subtotal",): [0, 44.84, 127.5, 222, 572.34], ("tax",): [0, 127.5, 222, 527.5, 572.34],
                    ("total",): [44.84, 127.5, 222, 527.5]}
    assert repair.tried == {"subtotal": [222]}


def test_two_wrong_amounts_change_together_when_no_single_one_can():
    record = GOOD | {"subtotal": 127.5, "tax": 127.5}  # the shipped eval's inv-001: subtotal == tax
    plan = Repair().plan(record, RULES, FIELDS, {"subtotal": 0.7, "tax": 0.6, "total": 0.95})
    allowed = {path[0]: set(FIELDS[path[0]].candidates) - set(banned) for path, banned in plan.items()}
    # Both pairs that add up to the held total and keep tax below subtotal stay open.
    assert allowed == {"subtotal": {527.5, 572.34}, "tax": {0, 44.84}, "total": {572.34}}


def test_the_least_confident_field_changes_first():
    record = GOOD | {"total": 600}
    text_writes_both = {"subtotal": Field(("subtotal",), [527.5, 555.16]), "tax": Field(("tax",), [44.84, 72.5]),
                        "total": Field(("total",), [572.34, 600, 627.5])}
    doubt_total = Repair().plan(record, RULES, text_writes_both, {"subtotal": 0.9, "tax": 0.9, "total": 0.5})
    doubt_tax = Repair().plan(record, RULES, text_writes_both, {"subtotal": 0.9, "tax": 0.5, "total": 0.9})
    assert doubt_total[("total",)] == [600, 627.5] and doubt_total[("tax",)] == [72.5]
    assert doubt_tax[("tax",)] == [44.84] and doubt_tax[("total",)] == [572.34, 627.5]


def test_a_change_that_would_break_another_rule_is_not_taken():
    # subtotal 44.84 and tax 527.5 also add up to 572.34, but tax_below would break.
    record = GOOD | {"subtotal": 44.84, "tax": 44.84}
    plan = Repair().plan(record, RULES, FIELDS, {"subtotal": 0.9, "tax": 0.5, "total": 0.95})
    assert ("subtotal",) in plan and 527.5 not in plan[("subtotal",)]


def test_equal_strings_exclude_the_less_confident_ones_value_and_remember_it():
    record = GOOD | {"customer": "Brightwater"}
    repair = Repair()
    assert repair.plan(record, RULES, FIELDS, {"vendor": 0.9, "customer": 0.4}) == {("customer",): ["Brightwater"]}
    again = GOOD | {"customer": "Brightwater Supply"}  # the rule holds now: no plan
    assert repair.plan(again, RULES, FIELDS, {}) is None
    third = repair.plan(GOOD | {"customer": "Brightwater Supply", "vendor": "Brightwater Supply"}, RULES, FIELDS, {"vendor": 0.9, "customer": 0.1})
    assert third == {("customer",): ["Brightwater", "Brightwater Supply"]}  # every value it was changed away from


def test_nothing_to_change_gives_up():
    assert Repair().plan(GOOD | {"note": "n/a"}, RULES, FIELDS, {}) is None  # note is not grounded
    no_pair = {"subtotal": Field(("subtotal",), [127.5]), "tax": Field(("tax",), [127.5]), "total": Field(("total",), [572.34])}
    assert Repair().plan(GOOD | {"subtotal": 127.5, "tax": 127.5}, RULES, no_pair, {}) is None


def test_values_tried_before_are_not_offered_again():
    record = GOOD | {"subtotal": 222}
    repair = Repair()
    repair.plan(record, RULES, FIELDS, {"subtotal": 0.1, "tax": 0.9, "total": 0.9})
    second = repair.plan(GOOD | {"subtotal": 127.5, "total": 222}, RULES, FIELDS, {"subtotal": 0.1, "tax": 0.9, "total": 0.9})
    assert 222 in second[("subtotal",)]  # tried: excluded although 222 - 44.84 is no candidate anyway
