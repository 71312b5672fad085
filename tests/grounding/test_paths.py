"""Field paths: one walk of a record by the ``[]`` convention, spelled as the confidence maps spell a value's path."""

import json

from fucina_jobs.confidence import leaves as json_leaves
from fucina_jobs.grounding.paths import field_name, indexed_at, leaves, schema_leaves, schema_node, values_at

RECORD = {"vendor": "ACME", "parties": [{"name": "Ann", "aliases": ["A.", "Annie"]}, {"role": "buyer"}, {"name": None}], "total": 3}
SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "parties": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "aliases": {"items": {"type": "string"}}}},
        },
        "total": {"type": "number"},
    },
}


def test_values_at_a_path_fan_out_over_items_and_skip_what_a_record_lacks():
    assert list(values_at(RECORD, ("parties", "[]", "name"))) == ["Ann", None]
    assert list(values_at(RECORD, ("parties", "[]", "aliases", "[]"))) == ["A.", "Annie"]
    assert list(values_at(RECORD, ("vendor", "[]"))) == [] and list(values_at(RECORD, ("missing",))) == []
    assert list(values_at(RECORD, ())) == [RECORD]


def test_each_value_at_a_path_has_its_own_path_as_the_confidence_maps_spell_it():
    spelled = dict(indexed_at(RECORD, ("parties", "[]", "aliases", "[]")))
    assert spelled == {"parties[0].aliases[0]": "A.", "parties[0].aliases[1]": "Annie"}
    written = {leaf.path for leaf in json_leaves(json.dumps(RECORD))}
    assert set(spelled) <= written and "vendor" in dict(indexed_at(RECORD, ("vendor",)))


def test_every_leaf_of_a_record_has_its_field_path():
    assert list(leaves(RECORD)) == [
        (("vendor",), "ACME"),
        (("parties", "[]", "name"), "Ann"),
        (("parties", "[]", "aliases", "[]"), "A."),
        (("parties", "[]", "aliases", "[]"), "Annie"),
        (("parties", "[]", "role"), "buyer"),
        (("parties", "[]", "name"), None),
        (("total",), 3),
    ]
    assert list(leaves({"name": "Ann"}, ("parties", "[]"))) == [(("parties", "[]", "name"), "Ann")]
    assert list(leaves([])) == [] and list(leaves("x")) == [((), "x")]


def test_a_schema_is_walked_by_the_same_paths():
    found = [path for path, _ in schema_leaves(SCHEMA)]
    assert found == [("vendor",), ("parties", "[]", "name"), ("parties", "[]", "aliases", "[]"), ("total",)]
    assert all(schema_node(SCHEMA, path) is node for path, node in schema_leaves(SCHEMA))
    assert schema_node(SCHEMA, ["parties", "[]", "role"]) is None
    assert [field_name(path) for path in found] == ["vendor", "parties[].name", "parties[].aliases[]", "total"]
