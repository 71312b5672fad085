"""The options table is the one place an ``x-grounded`` option is spelled: the docs, ``Grounded``, the checks and
``learn`` all read it, and every option has a behaviour test of its own."""

import ast
import dataclasses
import re

import pytest

from fucina_jobs.grounding.declaration import Grounded, GroundingError, Lines, grounded_fields
from fucina_jobs.grounding.options import ARRAY_OPTIONS, DOC_MARKERS, LINES_PARTS, OPTIONS, doc_table
from tests.helpers import REPO

GROUNDING = REPO / "docs/GROUNDING.md"


def test_the_docs_options_tables_are_the_tables_own():
    text = GROUNDING.read_text(encoding="utf-8")
    written = text[text.index(DOC_MARKERS[0]) + len(DOC_MARKERS[0]) : text.index(DOC_MARKERS[1])]
    assert written == doc_table() + "\n", (
        "docs/GROUNDING.md's options tables differ from fucina_jobs/grounding/options.py; rewrite them with\n"
        "    python -m fucina_jobs.grounding.options docs/GROUNDING.md"
    )


def test_every_option_has_one_paragraph_in_the_docs_details_and_only_options_do():
    details = GROUNDING.read_text(encoding="utf-8").split("### The options in detail", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^ *- \*\*`([\w.]+)`\*\*:", details, re.M)
    options = [*OPTIONS, *(f"lines.{part}" for part in LINES_PARTS), *ARRAY_OPTIONS]
    assert sorted(named) == sorted(options) and len(named) == len(set(named))


def test_every_option_has_a_behaviour_test_named_for_it():
    """A test of what the option does (not of its checks): its name names the option, in tests/grounding."""
    names = [
        node.name
        for path in (REPO / "tests/grounding").glob("test_*.py")
        if path.name not in ("test_options.py", "test_declaration.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    untested = [
        option for option in [*OPTIONS, *(f"lines_{part}" for part in LINES_PARTS), *ARRAY_OPTIONS] if not any(option in name for name in names)
    ]
    assert not untested, f"options without a behaviour test named for them in tests/grounding: {untested}"


def test_grounded_holds_each_option_at_what_its_default_keeps():
    """A typed attribute per option (``labels`` keeps two: the labels that mark and those that prefer), and one per key of ``lines``."""
    fields = {f.name: f.default for f in dataclasses.fields(Grounded)}
    assert [name for name in fields if name in OPTIONS] == list(OPTIONS)
    assert all(fields[name] == option.kept(option.default) for name, option in OPTIONS.items() if name not in ("labels", "lines"))
    assert (fields["labels"], fields["preferred_labels"]) == OPTIONS["labels"].kept(OPTIONS["labels"].default)
    assert fields["lines"] == Lines(**OPTIONS["lines"].kept(OPTIONS["lines"].default)) and [f.name for f in dataclasses.fields(Lines)] == list(
        LINES_PARTS
    )
    assert all(f.type != "Any" for f in dataclasses.fields(Grounded))  # typed, so an editor finds g.lines.cut_before
    (g,) = grounded_fields({"type": "object", "properties": {"total": {"type": "number", "x-grounded": {"labels": ["total"], "rounding": 0.05}}}})
    assert g.labels == ("total",) and str(g.rounding) == "0.05" and g.case == "exact"


@pytest.mark.parametrize(
    "name, prop, takes",
    [
        ("labels", {"type": "number"}, True),
        ("labels", {"enum": ["a"]}, False),
        ("labels", {"type": "string", "x-grounded": {"span": "lines"}}, False),
        ("only_labelled", {"type": ["number", "null"], "x-grounded": {"labels": ["total"]}}, True),
        ("only_labelled", {"type": "number", "x-grounded": {"labels": ["total"]}}, False),  # may not be null
        ("only_labelled", {"type": ["number", "null"]}, True),  # no labels: always null
        ("lines.ends_on", {"type": "string"}, False),
        ("lines.ends_on", {"type": "string", "x-grounded": {"lines": {"first": 3}}}, True),
        ("lines.ends_on", {"type": "string", "x-grounded": {"span": "word"}}, False),  # no lines on a word
        ("lines.shortest", {"type": "string", "x-grounded": {"span": "lines", "lines": {"ends_on": "BHD"}}}, True),
        ("day_first", {"type": "string", "format": "date"}, True),
    ],
)
def test_a_field_takes_an_option_where_the_table_says(name, prop, takes):
    (g,) = grounded_fields({"type": "object", "properties": {"x": {"x-grounded": True, **prop}}})
    assert g.takes(name) is takes


def test_with_options_keeps_a_declared_value_as_a_declaration_would():
    (g,) = grounded_fields({"type": "object", "properties": {"x": {"type": "number", "x-grounded": {"labels": ["total"]}}}})
    assert g.with_options({"labels": ["sum", "total"], "rounding": 0.05}).labels == ("sum", "total")
    assert g.without("labels").labels == () and g.without("labels").given("labels") is False and g.given("labels")
    weighed = g.with_options({"labels": {"total": 1, "rounded": 2}})
    assert (weighed.labels, weighed.preferred_labels) == (("total",), ("rounded",))
    (s,) = grounded_fields({"type": "object", "properties": {"x": {"type": "string", "x-grounded": {"span": "lines", "lines": {"first": 3}}}}})
    cut = s.with_options({"lines.cut_before": "TEL"})
    assert cut.lines == Lines(first=3, cut_before="TEL") and cut.given("lines.cut_before") and not s.given("lines.cut_before")
    assert cut.without("lines.first").lines == Lines(cut_before="TEL")


def test_learn_tries_the_options_the_table_marks_tried_each_of_its_other_values():
    assert {name: option.trials() for name, option in OPTIONS.items() if option.tried} == {
        "amount": [True],
        "day_first": [True, False],
        "pick": ["largest", "smallest"],
    }


def test_an_option_missing_the_one_it_needs_says_which():
    schema = {"type": "object", "properties": {"x": {"type": "string", "x-grounded": {"span": "lines", "lines": {"shortest": True}}}}}
    with pytest.raises(GroundingError, match=r"^properties/x: x-grounded.lines.shortest must be .*; not true without lines.ends_on$"):
        grounded_fields(schema)
    schema["properties"]["x"]["x-grounded"]["lines"]["ends_on"] = "LTD"
    assert grounded_fields(schema)[0].lines.shortest is True
