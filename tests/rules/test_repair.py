"""The repair planner: the smallest change of grounded values that keeps a broken rule, and what it excludes."""

from fucina_jobs.rules.declaration import rules_of
from fucina_jobs.rules.repair import Field, Repair

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "customer": {"type": "string"},
        "subtotal": {"type": "number"},
        "tax": {"type": "number"},
        "total": {"type": "number"},
        "note": {"type": "string"},
    },
    "x-rules": [
        {"name": "sum", "check": "subtotal + tax == total", "tolerance": 0.01},
        {"name": "tax_below", "check": "tax < subtotal"},
        {"name": "parties", "check": "vendor != customer"},
        {"name": "noted", "check": "note != 'n/a'"},
    ],
}
RULES = rules_of(SCHEMA)
AMOUNTS = [0, 44.84, 127.5, 222, 527.5, 572.34]  # what the text writes, and tax's allowance of 0
FIELDS = {
    "subtotal": Field(("subtotal",), AMOUNTS[1:]),
    "tax": Field(("tax",), AMOUNTS, frozenset({0})),
    "total": Field(("total",), AMOUNTS[1:]),
    "vendor": Field(("vendor",), None),
    "customer": Field(("customer",), None),
}
GOOD = {"vendor": "Brightwater", "customer": "Halden", "subtotal": 527.5, "tax": 44.84, "total": 572.34}


def only(plans):
    assert len(plans) == 1, plans
    return plans[0]


def allowed(plan):
    """What each field of the plan may take: its candidates less the excluded ones."""
    return {path[0]: set(FIELDS[path[0]].candidates) - set(banned) for path, banned in plan.exclude.items() if FIELDS[path[0]].candidates}


def test_a_record_that_keeps_every_rule_needs_no_plan():
    assert Repair().plans(GOOD, RULES, FIELDS, {}) == []


def test_one_wrong_amount_is_narrowed_to_the_value_that_adds_up_and_the_others_are_held():
    plan = only(Repair().plans(GOOD | {"subtotal": 222}, RULES, FIELDS, {"subtotal": 0.6, "tax": 0.9, "total": 0.95}))
    assert allowed(plan) == {"subtotal": {527.5}, "tax": {44.84}, "total": {572.34}}
    assert plan.changed == {"subtotal": 222} and plan.doubt is None


def test_two_wrong_amounts_change_together_when_no_single_written_one_can():
    record = GOOD | {"subtotal": 127.5, "tax": 127.5}  # the shipped eval's inv-001: subtotal == tax
    plan = only(Repair().plans(record, RULES, FIELDS, {"subtotal": 0.7, "tax": 0.6, "total": 0.95}))
    # The one pair the text writes that adds up to the held total with tax below subtotal; (572.34, 0) needs the allowance.
    assert allowed(plan) == {"subtotal": {527.5}, "tax": {44.84}, "total": {572.34}}


def test_the_allowance_is_taken_only_where_no_written_value_keeps_the_rule():
    record = GOOD | {"subtotal": 127.5, "tax": 127.5, "total": 127.5}
    fields = {
        "subtotal": Field(("subtotal",), [127.5, 222]),
        "tax": Field(("tax",), [0, 127.5], frozenset({0})),
        "total": Field(("total",), [127.5, 222]),
    }
    plan = only(Repair().plans(record, RULES, fields, {}))
    assert plan.changed == {"tax": 127.5} and plan.exclude[("tax",)] == [127.5]


def test_the_least_confident_field_changes_first():
    record = GOOD | {"total": 600}
    text_writes_both = {
        "subtotal": Field(("subtotal",), [527.5, 555.16]),
        "tax": Field(("tax",), [44.84, 72.5]),
        "total": Field(("total",), [572.34, 600, 627.5]),
    }
    doubt_total = only(Repair().plans(record, RULES, text_writes_both, {"subtotal": 0.9, "tax": 0.9, "total": 0.5}))
    doubt_tax = only(Repair().plans(record, RULES, text_writes_both, {"subtotal": 0.9, "tax": 0.5, "total": 0.9}))
    assert doubt_total.changed == {"total": 600} and doubt_tax.changed == {"tax": 44.84}


def test_a_change_that_would_break_another_rule_is_not_taken():
    # subtotal 44.84 and tax 527.5 also add up to 572.34, but tax_below would break.
    plan = only(Repair().plans(GOOD | {"subtotal": 44.84, "tax": 44.84}, RULES, FIELDS, {"subtotal": 0.9, "tax": 0.5, "total": 0.95}))
    assert allowed(plan)["subtotal"] == {527.5}


def test_equal_strings_are_two_alternatives_and_the_kept_one_is_remembered():
    repair = Repair()
    plans = repair.plans(GOOD | {"customer": "Brightwater"}, RULES, FIELDS, {"vendor": 0.9, "customer": 0.4})
    assert [(p.exclude, p.doubt) for p in plans] == [({("vendor",): ["Brightwater"]}, "vendor"), ({("customer",): ["Brightwater"]}, "customer")]
    repair.take(plans[1])
    again = repair.plans(GOOD | {"customer": "Brightwater Supply", "vendor": "Brightwater Supply"}, RULES, FIELDS, {})
    assert again[1].exclude == {("customer",): ["Brightwater", "Brightwater Supply"]}  # every value it was changed away from
    assert again[0].exclude == {("vendor",): ["Brightwater Supply"], ("customer",): ["Brightwater"]}


def test_rules_broken_together_combine_their_changes():
    plans = Repair().plans(GOOD | {"customer": "Brightwater", "subtotal": 222}, RULES, FIELDS, {"subtotal": 0.1})
    assert len(plans) == 2 and all(allowed(p)["subtotal"] == {527.5} for p in plans)
    assert [p.doubt for p in plans] == ["vendor", "customer"]


def test_nothing_to_change_gives_up():
    assert Repair().plans(GOOD | {"note": "n/a"}, RULES, FIELDS, {}) == []  # note is not grounded
    no_pair = {"subtotal": Field(("subtotal",), [127.5]), "tax": Field(("tax",), [127.5]), "total": Field(("total",), [572.34])}
    assert Repair().plans(GOOD | {"subtotal": 127.5, "tax": 127.5}, RULES, no_pair, {}) == []


def test_values_changed_away_from_are_not_offered_again():
    repair = Repair()
    repair.take(only(repair.plans(GOOD | {"subtotal": 222}, RULES, FIELDS, {"subtotal": 0.1, "tax": 0.9, "total": 0.9})))
    assert repair.tried == {"subtotal": [222]}
    # total 266.84 = 222 + 44.84 would hold with subtotal back at 222, but 222 was tried: only the others are offered.
    fields = FIELDS | {"subtotal": Field(("subtotal",), [222, 527.5]), "total": Field(("total",), [266.84, 572.34])}
    plan = only(repair.plans(GOOD | {"subtotal": 127.5, "total": 266.84}, RULES, fields, {"subtotal": 0.1, "tax": 0.9, "total": 0.9}))
    assert 222 in plan.exclude[("subtotal",)]


def test_a_value_changed_away_from_stays_excluded_while_another_rule_is_repaired():
    repair = Repair()
    repair.take(only(repair.plans(GOOD | {"subtotal": 222}, RULES, FIELDS, {"subtotal": 0.1, "tax": 0.9, "total": 0.9})))
    plans = repair.plans(GOOD | {"customer": "Brightwater"}, RULES, FIELDS, {})
    assert all(p.exclude[("subtotal",)] == [222] for p in plans)  # else greedy decoding could write it again
