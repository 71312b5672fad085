"""Per-value confidence: JSON leaf spans, token spans on the real tokenizer, and min/mean per value."""

from __future__ import annotations

import json

import pytest

import re

from fucina_jobs.confidence import ROOT, Leaf, confidence, leaves, output_values, token_spans


def spans_of(text: str) -> dict[str, str]:
    return {leaf.path: text[leaf.start : leaf.end] for leaf in leaves(text)}


def test_leaves_of_tricky_json():
    text = json.dumps(
        {
            "quote": 'say "hi"\\ there',
            "newline": "a\nb\tc",
            "unicode": "Zürich 日本 🧾",
            "escaped": "\u00e9",
            "items": [{"name": "bolt", "qty": 12}, {"name": "nut", "tags": ["a", "b"]}],
            "nested": {"deep": {"x": -1.5e-3, "ok": True, "none": None}},
            "empty": "",
            "nothing": {},
            "no_items": [],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    found = spans_of(text)
    assert list(found) == [
        "quote",
        "newline",
        "unicode",
        "escaped",
        "items[0].name",
        "items[0].qty",
        "items[1].name",
        "items[1].tags[0]",
        "items[1].tags[1]",
        "nested.deep.x",
        "nested.deep.ok",
        "nested.deep.none",
        "empty",
    ]
    parsed = json.loads(text)
    assert json.loads(found["quote"]) == parsed["quote"] and json.loads(found["unicode"]) == parsed["unicode"]
    assert found["newline"] == '"a\\nb\\tc"' and found["items[0].qty"] == "12" and found["nested.deep.x"] == "-0.0015"
    assert found["empty"] == '""' and found["nested.deep.none"] == "null"


def test_leaves_with_whitespace_escaped_keys_and_non_object_roots():
    assert spans_of('  { "a b" : [ 1 , "x" ] ,\n "k\\"ey": true }\n') == {"a b[0]": "1", "a b[1]": '"x"', 'k"ey': "true"}
    assert spans_of("42") == {ROOT: "42"}
    assert spans_of('["u", 2]') == {f"{ROOT}[0]": '"u"', f"{ROOT}[1]": "2"}
    assert spans_of('"\\u00e9"') == {ROOT: '"\\u00e9"'}


@pytest.mark.parametrize("bad", ['{"a":1', '{"a" 1}', '{"a":1}x', "[1 2]", '{"a":tru}', "", '{"a":"open}'])
def test_leaves_reject_what_is_not_json(bad):
    with pytest.raises(ValueError):
        leaves(bad)


def test_token_spans_cover_the_decoded_text(tokenizer):
    text = '{"vendor":"Café Ünïcode 日本語 ☃ 🧾","note":"line\\nbreak \\"q\\"","total":1608.5}'
    tokens = tokenizer.encode(text, add_special_tokens=False)
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    assert decode(tokens) == text
    spans = token_spans(tokens, decode)
    assert len(spans) == len(tokens) and spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(s <= e for s, e in spans) and all(a[1] <= b[0] or a == b for a, b in zip(spans, spans[1:]))
    split = 0
    for token, (start, end) in zip(tokens, spans):
        piece = decode([token])
        if "\ufffd" in piece:  # one byte of a multi-byte character: the token shares that character's span
            split += 1
            assert end > start and "\ufffd" not in text[start:end]
        else:
            assert text[start:end] == piece
    assert split > 0  # the emoji and CJK characters really were split over tokens


def test_value_confidence_is_min_and_mean_over_the_tokens_overlapping_it():
    text = '{"a":"xy","b":[7],"c":""}'
    # Hand-made tokens: {"a":" | xy | "," | b | ": | [ | 7 | ]," | c | ":" | "} ; the value "xy" is one token,
    # its quotes sit in merged tokens that belong to the keys, and "" has only its quotes.
    pieces = ['{"a":"', "xy", '","', "b", '":', "[", "7", '],"', "c", '":"', '"}']
    assert "".join(pieces) == text
    spans, offset = [], 0
    for piece in pieces:
        spans.append((offset, offset + len(piece)))
        offset += len(piece)
    probs = [1.0, 0.5, 1.0, 1.0, 1.0, 0.9, 0.25, 1.0, 1.0, 0.8, 0.6]
    result = confidence(text, spans, probs, output_values(text, "json_schema"))
    assert result.field_min == {"a": 0.5, "b[0]": 0.25, "c": 0.6}
    assert result.field_mean == {"a": 0.5, "b[0]": 0.25, "c": pytest.approx(0.7)}  # "" is the tokens of its two quotes
    assert result.record == 0.25  # the least certain value, by its mean


def test_values_of_regex_and_lark_outputs():
    pattern = re.compile(r"(?P<name>[a-z]+) (?P<code>\d+)(?: (?P<note>x))?")
    assert output_values("ab 12", "regex", pattern) == [Leaf("name", 0, 2), Leaf("code", 3, 5)]  # an unmatched group has no value
    assert output_values("AB", "regex", pattern) == []
    assert output_values("anything", "lark") is None
    assert output_values('{"a', "json_schema") == [] and output_values("[1]", None) == [Leaf(f"{ROOT}[0]", 1, 2)]
    spans, probs = [(0, 2), (2, 3), (3, 5)], [0.9, 1.0, 0.4]
    regex_job = confidence("ab 12", spans, probs, output_values("ab 12", "regex", pattern))
    assert regex_job.field_min == {"name": 0.9, "code": 0.4} and regex_job.record == 0.4
    assert confidence("ab 12", spans, probs, None).record == pytest.approx(2.3 / 3)  # Lark: the whole output is the value
    broken = confidence('{"a', [(0, 3)], [0.7], [])
    assert broken.record is None and broken.field_min == {}  # it will be a reject: no confidence
    assert confidence("", [], [], None).record is None
