"""The schema-driven merge of a chunked row's chunk records: every rule, dedup in the overlap, and where each value came from."""

import pytest

from fucina_jobs.confidence import Confidence
from fucina_jobs.pipeline.chunking import Chunk
from fucina_jobs.pipeline.merging import MergeError, Part, check_rules, merge

ITEM = {"type": "object", "properties": {"company": {"type": "string", "x-grounded": True}, "total": {"type": "number", "x-grounded": True}}}
SCHEMA = {"type": "object", "properties": {"date": {"type": "string"}, "receipts": {"type": "array", "items": ITEM}}}


def part(index: int, start: int, end: int, record, means=None, spans=None) -> Part:
    means = means or {}
    return Part(Chunk(index, start, end), record, Confidence(min(means.values(), default=None), dict(means), dict(means)), spans or {})


def test_scalars_keep_the_most_confident_value_and_record_the_others():
    parts = [
        part(0, 0, 100, {"date": "2019-01-02"}, {"date": 0.4}),
        part(1, 80, 200, {"date": "2019-02-01"}, {"date": 0.9}),
        part(2, 180, 300, {"date": None}),
        part(3, 280, 400, {"date": "2019-02-01"}, {"date": 0.7}),
    ]
    merged = merge(SCHEMA, parts)
    assert merged.record == {"date": "2019-02-01"}
    assert merged.chunks == {"date": 1} and merged.confidence.field_mean == {"date": 0.9}
    [conflict] = merged.conflicts
    assert (conflict.path, conflict.kept, conflict.chunk, conflict.alternatives) == ("date", "2019-02-01", 1, [("2019-01-02", 0, 0.4)])
    assert conflict.as_row()["alternatives"] == [{"value": '"2019-01-02"', "chunk": 0, "confidence": 0.4}]


def test_null_never_wins_and_agreeing_chunks_are_no_conflict():
    parts = [
        part(0, 0, 10, {"date": None}),
        part(1, 5, 20, {"date": "2019-01-02"}, {"date": 0.2}),
        part(2, 15, 30, {"date": "2019-01-02"}, {"date": 0.3}),
    ]
    merged = merge(SCHEMA, parts)
    assert merged.record == {"date": "2019-01-02"} and merged.chunks == {"date": 2} and merged.conflicts == []
    assert merge(SCHEMA, [part(0, 0, 10, {"date": None}), part(1, 5, 20, {"date": None})]).record == {"date": None}


@pytest.mark.parametrize("rule, chunk", [("first", 0), ("last", 2), ("most_confident", 1)])
def test_x_merge_picks_the_scalar_rule(rule, chunk):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "x-merge": rule}}}
    parts = [part(i, 10 * i, 10 * i + 15, {"n": i}, {"n": p}) for i, p in enumerate([0.5, 0.9, 0.6])]
    merged = merge(schema, parts)
    assert merged.record == {"n": chunk} and merged.chunks == {"n": chunk}
    assert len(merged.conflicts) == 1 and len(merged.conflicts[0].alternatives) == 2


def test_items_concatenate_and_an_item_in_the_overlap_is_kept_once_by_its_span():
    """Chunk 0 is characters 0-100, chunk 1 is 60-160: the receipt at 70-90 is in both, at the same offsets of the row's text."""
    a = {"company": "ACME", "total": 5}
    b = {"company": "BOLT", "total": 7}
    c = {"company": "CRAB", "total": 9}
    first = part(
        0,
        0,
        100,
        {"receipts": [a, b]},
        spans={"receipts[0].company": (10, 14), "receipts[0].total": (30, 31), "receipts[1].company": (70, 74), "receipts[1].total": (85, 86)},
    )
    second = part(
        1,
        60,
        160,
        {"receipts": [b, c]},
        spans={"receipts[0].company": (10, 14), "receipts[0].total": (25, 26), "receipts[1].company": (50, 54), "receipts[1].total": (70, 71)},
    )
    merged = merge(SCHEMA, [first, second])
    assert merged.record == {"receipts": [a, b, c]}
    assert merged.duplicates == 1 and merged.conflicts == []
    assert merged.spans["receipts[2].company"] == (110, 114), "offsets of the row's text, not the chunk's"
    assert merged.chunks["receipts[0].company"] == 0 and merged.chunks["receipts[2].total"] == 1


def test_equal_items_at_different_offsets_are_two_items():
    """The same shop and total twice in the report: two receipts, not a duplicate."""
    a = {"company": "ACME", "total": 5}
    first = part(0, 0, 100, {"receipts": [a]}, spans={"receipts[0].company": (10, 14), "receipts[0].total": (30, 31)})
    second = part(1, 60, 160, {"receipts": [a]}, spans={"receipts[0].company": (50, 54), "receipts[0].total": (70, 71)})
    merged = merge(SCHEMA, [first, second])
    assert merged.record == {"receipts": [a, a]} and merged.duplicates == 0


def test_a_half_read_copy_near_the_cut_loses_to_the_whole_one():
    """Chunk 0 ends inside receipt BOLT (its total is in chunk 1 only): chunk 0's copy shares the name's offsets but took a wrong
    total near its edge. The copy farther from the cut is kept, the other recorded as a conflict."""
    partial, whole = {"company": "BOLT", "total": 3}, {"company": "BOLT", "total": 7}
    first = part(
        0,
        0,
        100,
        {"receipts": [partial]},
        {"receipts[0].company": 0.9, "receipts[0].total": 0.3},
        spans={"receipts[0].company": (90, 94), "receipts[0].total": (97, 98)},
    )
    second = part(
        1,
        80,
        180,
        {"receipts": [whole]},
        {"receipts[0].company": 0.8, "receipts[0].total": 0.95},
        spans={"receipts[0].company": (10, 14), "receipts[0].total": (40, 41)},
    )
    merged = merge(SCHEMA, [first, second])
    assert merged.record == {"receipts": [whole]} and merged.duplicates == 1
    assert merged.confidence.field_mean == {"receipts[0].company": 0.8, "receipts[0].total": 0.95}
    assert [(k.path, k.chunk, k.alternatives[0][:2]) for k in merged.conflicts] == [("receipts[0]", 1, (partial, 0))]


def test_without_spans_an_equal_item_of_the_chunk_before_is_a_duplicate_but_not_of_its_own_chunk():
    schema = {"type": "object", "properties": {"lines": {"type": "array", "items": {"type": "string"}}}}
    merged = merge(
        schema, [part(0, 0, 50, {"lines": ["tea", "tea", "cake"]}), part(1, 40, 90, {"lines": ["cake", "jam"]}), part(2, 80, 130, {"lines": ["tea"]})]
    )
    assert merged.record == {"lines": ["tea", "tea", "cake", "jam", "tea"]}, "tea in chunk 2 is not in chunk 1: a new item"
    assert merged.duplicates == 1


def test_x_merge_all_keeps_duplicates_and_first_takes_a_whole_array():
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "string"}, "x-merge": "all"},
            "b": {"type": "array", "items": {"type": "string"}, "x-merge": "first"},
        },
    }
    merged = merge(
        schema, [part(0, 0, 50, {"a": ["x"], "b": []}), part(1, 40, 90, {"a": ["x"], "b": ["y", "z"]}), part(2, 80, 99, {"a": [], "b": ["w"]})]
    )
    assert merged.record == {"a": ["x", "x"], "b": ["y", "z"]}, "an empty array found nothing: the first chunk that found something wins"
    assert merged.chunks == {"a[0]": 0, "a[1]": 1, "b[0]": 1, "b[1]": 1}


def test_objects_merge_field_by_field_unless_told_to_keep_one_whole():
    vendor = {"type": "object", "properties": {"name": {"type": "string"}, "vat": {"type": "string"}}}
    parts = [
        part(0, 0, 50, {"v": {"name": "ACME", "vat": None}}, {"v.name": 0.9}),
        part(1, 40, 90, {"v": {"name": "ACNE", "vat": "DE1"}}, {"v.name": 0.2, "v.vat": 0.8}),
    ]
    fields = merge({"type": "object", "properties": {"v": vendor}}, parts)
    assert fields.record == {"v": {"name": "ACME", "vat": "DE1"}} and fields.chunks == {"v.name": 0, "v.vat": 1}
    whole = merge({"type": "object", "properties": {"v": vendor | {"x-merge": "most_confident"}}}, parts)
    assert whole.record == {"v": {"name": "ACME", "vat": None}}, "chunk 0's least certain value (0.9) beats chunk 1's (0.2)"


def test_a_record_that_is_no_object_keeps_confidences_paths():
    schema = {"type": "array", "items": {"type": "string"}}
    merged = merge(schema, [part(0, 0, 50, ["a"], {"value[0]": 0.5}), part(1, 40, 90, ["b"], {"value[0]": 0.7})])
    assert merged.record == ["a", "b"] and merged.confidence.field_mean == {"value[0]": 0.5, "value[1]": 0.7}


def test_x_merge_rules_are_checked_where_they_are_written():
    check_rules({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string", "x-merge": "last"}, "x-merge": "all"}}})
    with pytest.raises(MergeError, match="properties/a: x-merge='all' does not apply to a scalar; use one of most_confident, first, last"):
        check_rules({"type": "object", "properties": {"a": {"type": "string", "x-merge": "all"}}})
    with pytest.raises(MergeError, match="properties/l/items/properties/n: x-merge='sum'"):
        check_rules(
            {
                "type": "object",
                "properties": {"l": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "number", "x-merge": "sum"}}}}},
            }
        )


def test_a_list_of_names_keeps_each_name_once_across_every_chunk():
    """Grounded string items name things: a party named in chunks 0, 1 and 3, in other cases and punctuation, is one item."""
    names = {"type": "array", "items": {"type": "string", "x-grounded": True}}
    schema = {"type": "object", "properties": {"party": names, "lines": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
    parts = [
        part(0, 0, 100, {"party": ["ACME, INC.", "Foo  LLC"], "lines": ["a"]}),
        part(1, 80, 200, {"party": ["Acme Inc", "acme inc."], "lines": ["A."]}),
        part(2, 180, 300, {"party": []}),
        part(3, 280, 400, {"party": ["Bar Corp", "FOO LLC"], "lines": ["b"]}),
    ]
    merged = merge(schema, parts)
    assert merged.record == {"party": ["ACME, INC.", "Foo  LLC", "Bar Corp"], "lines": ["a", "b"]}
    assert merged.duplicates == 4 and merged.chunks == {"party[0]": 0, "party[1]": 0, "party[2]": 3, "lines[0]": 0, "lines[1]": 3}
    assert {(k.path, k.kept, k.alternatives[0][0]) for k in merged.conflicts} == {
        ("party[0]", "ACME, INC.", "Acme Inc"),
        ("party[0]", "ACME, INC.", "acme inc."),
        ("party[1]", "Foo  LLC", "FOO LLC"),
        ("lines[0]", "a", "A."),
    }
    assert merge({**schema, "properties": {"party": {**names, "x-merge": "all"}}}, parts).record["party"] == [
        "ACME, INC.",
        "Foo  LLC",
        "Acme Inc",
        "acme inc.",
        "Bar Corp",
        "FOO LLC",
    ], "x-merge: all keeps every copy"


def test_a_merged_list_keeps_the_first_items_its_schema_has_room_for():
    """Each chunk within ``maxItems`` (a bound learned from the gold) is no merged record over it: the rest is a conflict."""
    schema = {"type": "object", "properties": {"party": {"type": "array", "maxItems": 2, "items": {"type": "string", "x-grounded": True}}}}
    parts = [part(0, 0, 100, {"party": ["Lydall Inc.", "12"]}), part(1, 80, 200, {"party": ["lydall inc", "13"]})]
    merged = merge(schema, parts)
    assert merged.record == {"party": ["Lydall Inc.", "12"]}
    dropped = next(k for k in merged.conflicts if k.path == "party")
    assert dropped.kept == ["Lydall Inc.", "12"] and dropped.chunk == 1 and [a[:2] for a in dropped.alternatives] == [("13", 1)]
