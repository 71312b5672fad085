"""The scorers on hand-made cases: each rule of matching, counting and summing."""

import datetime as dt

import pytest

from fucina_jobs.eval import scoring as s


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("ACME Tools GmbH", "  acme   tools\tGMBH "),
        ("Straße", "STRASSE"),  # casefold
        ("2025-03-02", "2025-03-02"),
        ("2025-03-02", "02.03.2025"),
        ("2025-03-02", "2 March 2025"),
        ("2025-03-02", "March 2, 2025"),
        ("2025-03-02", "2025-03-02T10:00:00"),
        (1428, 1428.0),
        (1428, 1428.009),
        (527.5, 527.51),  # exactly at the tolerance, despite float rounding
        (1428, "1,428.00"),
        (0, 0),
        (True, True),
        (None, None),
        (["a", 1], ["A", 1.0]),
        ({"city": "Oslo", "zip": 150}, {"city": "oslo", "zip": 150, "extra": 1}),
        ("12345", 12345),
    ],
)
def test_values_that_match(gold, pred):
    assert s.values_match(gold, pred, 0.01)


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("ACME Tools", "ACME Tool"),
        ("2025-03-02", "2025-03-03"),
        ("2025-03-02", "03/02/2025"),  # ambiguous slashed dates are not guessed
        (1428, 1428.02),
        (1428, "about 1428"),
        (1, True),
        (True, 1),
        (None, "null"),
        ("x", None),
        ("x", ["x"]),
        (["a"], ["a", "b"]),
        ({"zip": 150}, {"zip": 151}),
        ({"zip": 150}, None),
    ],
)
def test_values_that_do_not_match(gold, pred):
    assert not s.values_match(gold, pred, 0.01)


def test_tolerance_is_configurable():
    assert s.values_match(100, 100.4, 0.5) and not s.values_match(100, 100.4, 0.0)


def test_parse_helpers():
    assert s.parse_date("3 Mar 2025") == dt.date(2025, 3, 3)
    assert s.parse_date("2025/03/04") == dt.date(2025, 3, 4)
    assert s.parse_date("BWS-2025-0147") is None and s.parse_date(20250303) is None
    assert s.parse_number("-1_000.5") == -1000.5 and s.parse_number(False) is None and s.parse_number("1e3") == 1000.0
    assert s.normalize_text("  A\u00a0 b\nC ") == "a b c"


def test_accuracy_per_field_and_all_fields_correct():
    gold = {
        "a": {"total": 10, "vendor": "Acme", "date": "2025-01-02"},
        "b": {"total": 20, "vendor": "Bolt", "date": "2025-01-03"},
        "c": {"total": 30, "vendor": "Cogs", "date": "2025-01-04"},
        "not-run": {"total": 1, "vendor": "x", "date": "2025-01-05"},
    }
    predictions = {
        "a": {"total": 10.001, "vendor": " ACME ", "date": "02.01.2025"},  # all right
        "b": {"total": 21, "vendor": "Bolt", "date": "2025-01-03"},  # total wrong
        "c": None,  # a reject: every field wrong
        "extra": {"total": 1},  # no gold: counted, not scored
    }
    acc = s.accuracy(gold, predictions, 0.01)
    assert acc["rows_scored"] == 3 and acc["gold_not_in_run"] == 1 and acc["run_rows_without_gold"] == 1
    assert acc["fields"]["total"] == {
        "correct": 1,
        "total": 3,
        "rate": pytest.approx(1 / 3),
        "spacing_correct": 1,
        "spacing_rate": pytest.approx(1 / 3),
        "f1": None,
        "item_f1": None,
    }
    assert acc["fields"]["vendor"]["f1"] == pytest.approx(2 / 3) and acc["fields"]["date"]["f1"] is None  # dates are not text
    assert acc["fields"]["vendor"]["correct"] == 2 and acc["fields"]["date"]["correct"] == 2
    assert acc["all_fields_correct"] == {"correct": 1, "total": 3, "rate": pytest.approx(1 / 3)}
    assert acc["wrong_fields"] == {"b": ["total"], "c": ["total", "vendor", "date"]}
    assert list(acc["fields"]) == ["date", "total", "vendor"]


def test_spacing_insensitive_match_and_token_f1():
    gold = {"a": {"address": "NO.3, JALAN 5, 81100 JOHOR.", "company": "ACME SDN BHD"}, "b": {"address": "LOT 6, JALAN BATAI", "company": "BOLT"}}
    predictions = {"a": {"address": "NO. 3 , JALAN 5,81100 JOHOR .", "company": "ACME SDN"}, "b": {"address": "LOT 6, JALAN BATU", "company": "bolt"}}
    acc = s.accuracy(gold, predictions)
    address, company = acc["fields"]["address"], acc["fields"]["company"]
    assert address["correct"] == 0 and address["spacing_correct"] == 1  # only the spacing differs in a; a letter in b
    assert company["correct"] == company["spacing_correct"] == 1  # "ACME SDN" is short of "BHD" either way
    assert company["f1"] == pytest.approx((0.8 + 1.0) / 2)  # precision 1, recall 2/3
    assert address["f1"] == pytest.approx((1.0 + 0.8) / 2)  # b: 4 of 5 tokens each way
    assert acc["mean"] == {"rate": pytest.approx(0.25), "spacing_rate": pytest.approx(0.5), "f1": pytest.approx(0.9), "score": pytest.approx(0.25)}
    assert s.token_f1("NO.3, JALAN", None) == 0.0 and s.normalize_spacing("NO. 3 , X") == "no.3,x"


def test_accuracy_without_overlap_has_no_rates():
    acc = s.accuracy({"a": {"x": 1}}, {"b": {"x": 1}})
    assert acc["rows_scored"] == 0 and acc["all_fields_correct"]["rate"] is None


def test_conformance_counts_parse_validate_and_rejects_by_reason():
    records = [{"row_id": "1", "text": '{"a": 1}'}, {"row_id": "2", "text": '{"a": 2}', "relaxations": ["not"]}]
    rejects = [
        {"row_id": "3", "reason": "schema_violation", "text": '{"a": "x"}', "relaxations": ["not"]},  # parses, does not validate
        {"row_id": "4", "reason": "length", "text": '{"a": '},
        {"row_id": "5", "reason": "invalid_json", "text": "{a}"},
        {"row_id": "6", "reason": "length", "text": '{"a'},
        {"row_id": "7", "reason": "error", "text": ""},
    ]
    c = s.conformance(records, rejects)
    assert c["rows"] == 7 and c["parsed"] == 3 and c["validated"] == 2
    assert c["parse_rate"] == pytest.approx(3 / 7) and c["validate_rate"] == pytest.approx(2 / 7)
    assert c["rejects_by_reason"] == {"error": 1, "invalid_json": 1, "length": 2, "schema_violation": 1}
    assert c["relaxed"] == {"rows": 2, "records": 1, "rejects_by_reason": {"schema_violation": 1}, "rows_by_cause": {"not": 2}}
    regex = s.conformance(records, rejects[:1], json_output=False)
    assert regex["parsed"] is None and regex["parse_rate"] is None
    assert s.conformance([], [])["validate_rate"] is None


def test_schema_coverage_and_by_feature():
    rejects = [
        {"row_id": "x", "reason": "error", "error": "row 'x': its schema does not compile: boom"},
        {"row_id": "y", "reason": "schema_violation", "error": "a: wrong"},
    ]
    cov = s.schema_coverage(rejects, 4)
    assert cov == {"schemas": 4, "compiled": 3, "coverage": 0.75, "compile_failed": ["x"]}
    table = s.by_feature({"w": ["enum", "type"], "x": ["enum"], "y": [], "z": ["type"]}, valid_ids={"w", "z"})
    assert table["enum"] == {"rows": 2, "valid": 1, "valid_rate": 0.5}
    assert table["type"]["valid_rate"] == 1.0 and table["(none)"]["valid"] == 0


def _stat(shard, rows, gen, fwd, tpf, wall, df, af, dn, an, p50, p99):
    return {
        "shard": shard,
        "replica": shard % 2,
        "rows": rows,
        "records": rows,
        "rejects": 0,
        "prompt_tokens": 100,
        "generated_tokens": gen,
        "forward_passes": fwd,
        "tokens_per_forward": tpf,
        "tok_s": gen / wall,
        "wall_s": wall,
        "drafted_forced": df,
        "accepted_forced": af,
        "drafted_ngram": dn,
        "accepted_ngram": an,
        "acceptance": (af + an) / (df + dn),
        "mask_us_p50": p50,
        "mask_us_p99": p99,
    }


def test_efficiency_sums_shards():
    stats = [_stat(1, 2, 60, 20, 3.0, 2.0, 30, 30, 10, 5, 40.0, 300.0), _stat(0, 2, 40, 20, 2.0, 2.0, 10, 10, 10, 0, 60.0, 100.0)]
    e = s.efficiency(stats)
    assert e["shards"] == 2 and e["generated_tokens"] == 100 and e["prompt_tokens"] == 200
    assert e["tokens_per_record"] == 25 and e["tokens_per_forward"] == pytest.approx(100 / 40) and e["tok_s"] == 25
    assert e["acceptance"]["forced"] == {"drafted": 40, "accepted": 40, "rate": 1.0}
    assert e["acceptance"]["ngram"] == {"drafted": 20, "accepted": 5, "rate": 0.25}
    assert e["acceptance"]["all"]["rate"] == pytest.approx(45 / 60)
    assert e["mask_us_p50"] == 50.0 and e["mask_us_p99"] == 300.0
    assert [p["shard"] for p in e["per_shard"]] == [0, 1]
    empty = s.efficiency([])
    assert empty["tok_s"] is None and empty["acceptance"]["all"]["rate"] is None


def test_percentiles():
    assert s.percentiles(range(101)) == {"p50": 50.0, "p99": 99.0}
    assert s.percentiles([]) == {"p50": None, "p99": None}


def _verdict(file, i, expected, accepted, final, cause=None, relaxations=()):
    return {
        "file": file,
        "instance": i,
        "expected": expected,
        "accepted": accepted,
        "final": final,
        "cause": cause,
        "compile_error": None,
        "relaxations": list(relaxations),
    }


def test_grammar_scores_group_by_cause_and_count_both_stages():
    report = {
        "files": 4,
        "instances": 6,
        "valid": 3,
        "invalid": 3,
        "skipped": 2,
        "compile_errors": {"c.json": '<schema>: Unimplemented keys: ["not"]'},
        "relaxations": {"r.json": ["uniqueItems"]},
        "features": {"a.json": ["enum", "type"], "b.json": ["type"], "c.json": ["not"], "r.json": ["uniqueItems"]},
        "tests": {"a.json": 3, "b.json": 1, "c.json": 2, "r.json": 2},
        "compile_s": {"a.json": 0.001, "b.json": 0.003},
        "mask_s": [1e-5, 2e-5, 3e-5],
        "verdicts": [
            _verdict("a.json", 0, True, True, True),
            _verdict("a.json", 1, True, False, False, "property order"),
            _verdict("a.json", 2, False, True, True, "invalid passes post-validation"),
            _verdict("b.json", 0, False, False, False),
            _verdict("r.json", 0, True, True, True, relaxations=["uniqueItems"]),
            _verdict("r.json", 1, False, True, False, "invalid accepted by the relaxed grammar", ["uniqueItems"]),
            {**_verdict("c.json", -1, None, None, None), "compile_error": '<schema>: Unimplemented keys: ["not"]'},
        ],
    }
    g = s.grammar_scores(report, {"not": "no 'not'", "property order": "schema order"})
    assert g["compiled"] == 3 and g["coverage"] == 0.75 and g["relaxed"] == 1
    assert g["stages"]["grammar"] == {"wrong": 3, "valid_rejected": 1, "invalid_accepted": 2}
    assert g["stages"]["final"] == {"wrong": 2, "valid_rejected": 1, "invalid_accepted": 1}  # the relaxed grammar's miss was caught
    assert g["compile_errors"] == {"not": {"count": 1, "examples": ['c.json: <schema>: Unimplemented keys: ["not"]'], "known": "no 'not'"}}
    assert g["relaxations"] == {"uniqueItems": {"count": 1, "examples": ["r.json: uniqueItems"]}}
    assert list(g["wrong_verdicts"]["final"]) == ["invalid passes post-validation", "property order"]
    assert g["wrong_verdicts"]["grammar"]["invalid accepted by the relaxed grammar"]["examples"] == ["r.json#1"]
    assert g["unexplained"] == ["invalid passes post-validation"]
    # Instances of a schema that did not compile count against its features.
    assert g["by_feature"]["type"] == {"files": 2, "compile_errors": 0, "relaxed": 0, "instances": 4, "correct": 2, "correct_rate": 0.5}
    assert g["by_feature"]["not"]["instances"] == 2 and g["by_feature"]["not"]["correct_rate"] == 0.0
    t = s.grammar_timing(report)
    assert t["masks"] == 3 and t["mask_us"]["p50"] == pytest.approx(20.0) and t["compile_ms"]["p50"] == pytest.approx(2.0)


def test_by_cause_keeps_counts_and_three_examples_most_frequent_first():
    groups = s.by_cause([("b", "1"), ("a", "2"), ("b", "3"), ("b", "4"), ("b", "5")], {"a": "known"})
    assert list(groups) == ["b", "a"] and groups["b"] == {"count": 4, "examples": ["1", "3", "4"], "known": None}


def test_regressions_against_a_baseline():
    baseline = [
        _verdict("a.json", 0, True, True, True),
        _verdict("a.json", 1, False, True, True, "invalid passes post-validation"),
        _verdict("b.json", 0, True, True, True),
    ]
    now = [
        _verdict("a.json", 0, True, False, False, "property order"),
        _verdict("a.json", 1, False, True, True, "invalid passes post-validation"),
        {**_verdict("b.json", -1, None, None, None), "compile_error": "boom"},
        _verdict("new.json", 0, True, False, False, "x"),
    ]
    r = s.regressions(baseline, now)
    assert r["count"] == 2 and set(r["by_cause"]) == {"now wrong: property order", "no longer compiles"}  # a.json#1 was wrong already


def test_item_f1_scores_a_list_as_a_set_of_items():
    assert s.item_f1(["Nike Inc.", "Eric Sprunk"], ["eric sprunk", "NIKE INC."]) == 1.0  # any order, any case
    assert s.item_f1(["Nike Inc.", "Eric Sprunk"], ["Nike Inc."]) == pytest.approx(2 / 3)
    assert s.item_f1(["Nike Inc."], ["Nike Inc.", "Nike Inc."]) == pytest.approx(2 / 3)  # a duplicate is a wrong item
    assert s.item_f1([], []) == 1.0 and s.item_f1(["A"], None) == 0.0 and s.item_f1([], ["A"]) == 0.0


def test_accuracy_gives_list_fields_their_item_f1_and_a_field_score():
    gold = {"a": {"party": ["X Corp", "Y Ltd"], "state": "Ohio"}, "b": {"party": ["Z"], "state": "Utah"}}
    got = s.accuracy(gold, {"a": {"party": ["Y Ltd"], "state": "Ohio"}, "b": {"party": ["Z"], "state": "Iowa"}})
    party = got["fields"]["party"]
    assert party["rate"] == 0.5 and party["item_f1"] == pytest.approx((2 / 3 + 1) / 2)
    assert got["fields"]["state"]["item_f1"] is None
    assert got["mean"]["score"] == pytest.approx(((2 / 3 + 1) / 2 + 0.5) / 2)
