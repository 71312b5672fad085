"""``learn`` never fails in silence: gold that does not fit the schema is named, one line each, before anything is learned.

Every test runs the command itself (``learn_command``) on the shipping notices of ``test_learn``; none loads a model.
"""

import json
from pathlib import Path

import pytest

from fucina_jobs.learn_command import learn_command
from fucina_jobs.learning.gold import SHOWN, mismatches
from tests.learning.test_learn import GOLD, SCHEMA, _job_folder

LEARN = ["conf=notices", "gold=data/gold.jsonl"]


def _regold(job: Path, change) -> None:
    """Rewrite the job's gold rows, each label through ``change(k, label)``."""
    rows = [json.dumps({"id": f"n{k}", "label": change(k, dict(label))}) + "\n" for k, (_, label) in enumerate(GOLD)]
    (job / "data/gold.jsonl").write_text("".join(rows))


def _renamed(k: int, label: dict) -> dict:
    label["weights"] = label.pop("weight")
    return label


@pytest.fixture
def job(tmp_path, monkeypatch) -> Path:
    folder = _job_folder(tmp_path)
    monkeypatch.chdir(folder)
    return folder


def test_a_gold_field_the_schema_lacks_stops_learn_naming_both_sides_and_what_to_do(job, capsys):
    _regold(job, _renamed)
    assert learn_command(LEARN) == 2
    err = capsys.readouterr().err
    assert (
        f"data/gold.jsonl id=n0: gold field 'weights' is not in the schema ({len(GOLD)} of {len(GOLD)} rows give it); did you mean 'weight'?" in err
    )
    assert "data/gold.jsonl: no gold row gives schema field 'weight'; is it the gold's 'weights'?" in err
    assert "rename the gold key or the schema's field, or learn without them with allow_mismatch=true" in err
    assert not (job / "jobs/notices/learned.json").exists()


def test_allow_mismatch_warns_and_learns_the_fields_that_match(job, capsys):
    _regold(job, _renamed)
    assert learn_command([*LEARN, "allow_mismatch=true"]) == 0
    captured = capsys.readouterr()
    assert "gold field 'weights' is not in the schema" in captured.err and "no gold row gives schema field 'weight'" in captured.err
    fields = json.loads((job / "jobs/notices/learned.json").read_text())["fields"]
    assert "weight" not in fields and fields["shipped_on"]["x-grounded"]["labels"] == ["shipped on the"]
    assert "weight: no cue kept, left to the model: no gold row gives it a value" in captured.out


def test_allow_mismatch_takes_true_or_false(job, capsys):
    assert learn_command([*LEARN, "allow_mismatch=maybe"]) == 2
    assert "learn: allow_mismatch=maybe: expected true or false" in capsys.readouterr().err


def test_values_of_the_wrong_type_or_that_the_schema_refuses_are_left_out_one_line_each(job, capsys):
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["weight"]["minimum"] = 0
    schema["properties"]["transit"] = {"type": ["string", "null"], "enum": ["1 day", *(f"{d} days" for d in range(2, 8)), None]}
    (job / "schemas/notice.json").write_text(json.dumps(schema))
    wrong = {1: {"weight": "lots"}, 2: {"weight": -5}, 3: {"transit": "a week"}, 4: {"shipped_on": "18 April 2001"}}
    _regold(job, lambda k, label: {**label, **wrong.get(k, {})})
    assert learn_command(LEARN) == 0  # no traceback: "lots" is never read as a number
    err = capsys.readouterr().err
    assert "data/gold.jsonl id=n1: gold field 'weight' has the wrong type: 'lots' is not of type 'number'; left out of learning" in err
    assert "data/gold.jsonl id=n2: gold field 'weight' is refused by the schema: -5 is less than the minimum of 0; left out of learning" in err
    assert "data/gold.jsonl id=n3: gold field 'transit' is refused by the schema: 'a week' is not one of" in err
    assert "data/gold.jsonl id=n4: gold field 'shipped_on' is refused by the schema: '18 April 2001' is not a 'date'" in err
    assert "data/gold.jsonl: 4 gold values of 4 rows left out of learning: 1 of the wrong type, 3 refused by the schema" in err
    evidence = json.loads((job / "jobs/notices/learned.json").read_text())["fields"]["weight"]["evidence"]
    assert evidence["rows"] == len(GOLD) - 2  # the two refused weights are not learned from; their rows' other fields are
    examples = [json.loads(line)["id"] for line in (job / "jobs/notices/learned-examples.jsonl").read_text().splitlines()]
    assert not {"n1", "n2", "n3", "n4"} & set(examples)  # a row the schema refused whole is no worked example


def test_the_lines_for_one_fields_left_out_values_stop_at_a_few_and_count_the_rest(job, capsys):
    _regold(job, lambda k, label: {**label, "weight": "heavy"} if k < SHOWN + 2 else label)
    assert learn_command(LEARN) == 0
    err = capsys.readouterr().err
    assert err.count("gold field 'weight' has the wrong type") == SHOWN
    assert "data/gold.jsonl: gold field 'weight': and 2 more values refused, left out of learning" in err


def test_each_field_that_keeps_no_cue_says_why_it_is_left_to_the_model(job, capsys):
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"] |= {"handling": {"type": "string"}, "insured": {"type": "boolean"}}
    schema["required"] += ["handling", "insured"]
    (job / "schemas/notice.json").write_text(json.dumps(schema))
    _regold(job, lambda k, label: {**label, "handling": "fragile" if k < 6 else "upright", "insured": k % 2 == 0})
    rows = [json.loads(line) for line in (job / "data/inputs.jsonl").read_text().splitlines()]
    for row in rows[6:]:  # half the notices write their handling
        row["text"] += "\nHandle upright."
    (job / "data/inputs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert learn_command(LEARN) == 0
    out = capsys.readouterr().out
    assert (
        "handling: no cue kept, left to the model: its gold is written in the text for 6 of 12 values (50%), "
        "under the 60% that grounds a field the schema does not"
    ) in out
    assert "insured: no cue kept, left to the model: not tried: cues are learned for string, number, integer and date fields" in out
    assert "| shipped_on |" in out and "shipped_on: no cue kept" not in out


def test_a_nested_field_is_named_by_its_path():
    schema = {
        "type": "object",
        "properties": {
            "parties": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "role": {"type": "string"}}}}
        },
    }
    gold = {"a": {"parties": [{"nme": "Nike Inc.", "role": "seller"}]}, "b": {"parties": []}}
    assert mismatches(schema, gold, "gold.jsonl") == [
        "gold.jsonl id=a: gold field 'parties[].nme' is not in the schema (1 of 2 rows give it); did you mean 'parties[].name'?",
        "gold.jsonl: no gold row gives schema field 'parties[].name'; is it the gold's 'parties[].nme'?",
    ]
    assert mismatches(schema, {"b": {"parties": []}}, "gold.jsonl") == []  # no item given: its fields are not missing
