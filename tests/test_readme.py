"""The docs tell the truth: docs/CONFIG.md's config table is the pydantic models' own, and every command the README
shows runs as written (``tests/readme.py`` says which test runs each)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import jsonschema
import pytest
from pydantic import BaseModel

from fucina_jobs.config import DEFAULT_OUTPUT_DIR, ENGINES, SHIPPED, JobConfig
from fucina_jobs.data.rundir import RunDir
from tests.helpers import REPO
from tests.readme import CI, PYTHON_BLOCK, RUN_BY, argv, commands_run_by, readme_commands

README = (REPO / "README.md").read_text(encoding="utf-8")
CONFIG_DOC = (REPO / "docs" / "CONFIG.md").read_text(encoding="utf-8")
TABLE = re.compile(r"(<!-- config table.*?-->\n)(.*?)(<!-- end of the config table -->)", re.S)
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def config_rows() -> dict[str, str]:
    """Each setting's table row, by key: key, default, and what it takes (its description, its choices, its bounds)."""
    rows: dict[str, str] = {}
    for name, field in JobConfig.model_fields.items():
        if name != "engine":
            rows |= _rows(name, field)
    for engine, model in ENGINES.items():
        for name, field in model.model_fields.items():
            if name != "name":
                rows |= _rows(f"engine.{name}", field, f"engine={engine}: ")
    return rows


def _rows(key: str, field: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
        return {k: v for name, f in field.annotation.model_fields.items() for k, v in _rows(f"{key}.{name}", f, prefix).items()}
    default = "required" if field.is_required() else f"`{_yaml(DEFAULT_OUTPUT_DIR if key == 'output.dir' else field.default)}`"
    what = "; ".join(part for part in (field.description, _allowed(field)) if part)
    return {key: f"| `{key}` | {default} | {prefix}{what} |"}


def _allowed(field: Any) -> str:
    if get_origin(field.annotation) is Literal:
        return "one of " + ", ".join(f"`{choice}`" for choice in get_args(field.annotation))
    return ", ".join(f"{sign} {getattr(m, attr)}" for m in field.metadata for attr, sign in _BOUNDS if getattr(m, attr, None) is not None)


def _yaml(value: Any) -> str:
    return json.dumps(value) if value is None or isinstance(value, bool) or value == "" else str(value)


def test_the_readme_config_table_is_the_pydantic_models_own():
    """The table moved from the README to docs/CONFIG.md; the test keeps its name."""
    match = TABLE.search(CONFIG_DOC)
    assert match, "docs/CONFIG.md lost its config table markers: <!-- config table ... --> and <!-- end of the config table -->"
    expected = config_rows()
    written = {m.group(1): line for line in match.group(2).splitlines() if (m := re.match(r"\| `([^`]+)` \|", line))}
    missing = [row for key, row in expected.items() if written.get(key) != row]
    stale = [row for key, row in written.items() if expected.get(key) != row]
    assert not missing and not stale, (
        "docs/CONFIG.md's config table differs from fucina_jobs/config.py (key, default, description, choices, bounds).\n"
        + ("Add (or replace with) these rows, in this order among the others:\n" + "\n".join(missing) + "\n" if missing else "")
        + ("Remove these rows:\n" + "\n".join(stale) + "\n" if stale else "")
        + "The whole table body, in order:\n"
        + "\n".join(expected.values())
    )
    assert list(written) == list(expected), "docs/CONFIG.md's config table: one row per setting, in the models' order"


def _python_api_block() -> str:
    section = README.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_block_runs_and_prints_valid_invoice_json():
    run = subprocess.run([sys.executable, "-c", _python_api_block()], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    first, second = run.stdout.strip().splitlines()[:2]
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(json.loads(first))
    assert second.startswith("stop ")


# -- every README command is run by a test ------------------------------------------------------------------------


def test_every_readme_command_is_run_by_a_test():
    """``tests/readme.py``'s ``RUN_BY`` names a runner for each command the README shows, and each runner runs them:
    a test that takes them from ``commands_run_by`` (by its own name), or CI's script, which holds them verbatim."""
    shown = readme_commands()
    assert len(shown) >= 15, "the README's commands were not found: is the parser reading the indented blocks?"
    assert set(shown) <= set(RUN_BY), "README commands no test runs; add each to RUN_BY in tests/readme.py with its test:\n" + "\n".join(
        c for c in shown if c not in RUN_BY
    )
    assert set(RUN_BY) <= set(shown), "RUN_BY lists commands the README no longer shows:\n" + "\n".join(c for c in RUN_BY if c not in shown)
    ci = (REPO / CI).read_text()
    for command, runner in RUN_BY.items():
        if runner == CI:
            assert command in ci, f"{CI} does not run {command!r}"
            continue
        path, name = runner.split("::")
        source = (REPO / path).read_text()
        body = re.search(rf"^def {name}\(.*?(?=^def |^@|\Z)", source, re.S | re.M)
        assert body, f"{runner}: no such test"
        takes = "_python_api_block()" if command == PYTHON_BLOCK else f'commands_run_by("{name}")'
        assert takes in body.group(0), f"{runner} does not take its commands from the README ({takes})"


def test_the_parser_reads_indented_and_chained_commands_and_leaves_comments_out():
    text = "Run:\n\n    a x=1   # why\n    b \\\n        c && d\n\n```yaml\n    not: a command\n```\n```python\nprint(1)\n```\n"
    assert readme_commands(text) == ["a x=1", "b c", "d", PYTHON_BLOCK]


def _cli(command: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([*argv(command), *overrides], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


def test_commands_that_need_no_model_run_as_written(tmp_path):
    """From a folder of one's own (the shipped jobs are found by name); the documents run on the canned engine."""
    (tmp_path / "scans").mkdir()
    for name, vendor in (("a", "Acme Tools GmbH"), ("b", "Nordlicht Bakery")):
        (tmp_path / "scans" / f"{name}.html").write_text(
            f"<html><body><h1>{vendor}</h1><p>Invoice {name.upper()}-1, total EUR 9.00</p></body></html>"
        )
    for command in commands_run_by("test_commands_that_need_no_model_run_as_written"):
        if command.endswith("--cfg job"):
            assert "name: extract_invoices" in _cli(command, cwd=tmp_path).stdout
        elif command.endswith("--help"):
            assert "output.dir" in _cli(command, cwd=tmp_path).stdout
        else:
            _cli(command, "engine=canned", "runtime.replicas=1", "output.dir=out", cwd=tmp_path)
            rejects = RunDir.open(tmp_path / "out").read("rejects").to_pylist()
            assert sorted(r["row_id"] for r in rejects) == ["a", "b"]  # a row per document: the canned "{}" is no invoice


def _job_of_ones_own(folder: Path) -> None:
    """The README's ``tickets`` job, its YAML as the README writes it, with a schema, a prompt and rows of its own."""
    yaml_block = re.search(r"```yaml\n(.*?)```", README, re.S).group(1)
    (folder / "conf").mkdir()
    (folder / "conf" / "tickets.yaml").write_text(yaml_block)
    schema = {
        "type": "object",
        "properties": {"product": {"type": "string", "maxLength": 40, "x-grounded": True}, "priority": {"enum": ["low", "high"], "x-grounded": True}},
        "required": ["product", "priority"],
    }
    (folder / "schemas").mkdir()
    (folder / "schemas" / "ticket.json").write_text(json.dumps(schema))
    (folder / "prompts").mkdir()
    (folder / "prompts" / "tickets.txt").write_text("Extract the product and the priority of the ticket as JSON.")
    rows, gold = [], []
    for k, (product, priority) in enumerate([("Laser Printer", "high"), ("Desk Lamp", "low"), ("Coffee Grinder", "high"), ("Office Chair", "low")]):
        rows.append({"id": f"t{k}", "text": f"Ticket {k}: Product: {product}. Priority: {priority}. Please help."})
        gold.append({"id": f"t{k}", "label": {"product": product, "priority": priority}})
    for name, lines in (("inputs.jsonl", rows), ("gold.jsonl", gold), ("data/tickets.jsonl", rows)):
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_learn_then_run_with_the_cues_as_written(tmp_path):
    """``NAME`` is the README's own ``tickets`` job; the run reads the learned cues, on the canned engine."""
    _job_of_ones_own(tmp_path)
    learn, run = (c.replace("NAME", "tickets") for c in commands_run_by("test_learn_then_run_with_the_cues_as_written"))
    assert "constraint.learned=jobs/tickets/learned.json" in _cli(learn, cwd=tmp_path).stdout
    learned = json.loads((tmp_path / "jobs" / "tickets" / "learned.json").read_text())
    assert "product" in learned["fields"]  # with its evidence, for review in git
    _cli(run, "engine=canned", "runtime.replicas=1", "output.dir=out", cwd=tmp_path)
    manifest = RunDir.open(tmp_path / "out").read_manifest()
    assert manifest["status"] == "complete" and manifest["config"]["constraint"]["learned"] == "jobs/tickets/learned.json"


@pytest.mark.slow
def test_a_run_and_the_review_loop_as_written(tmp_path):
    """A run of 4 invoices on the model, its least certain values, the review page, Label Studio's tasks, their
    answers back as gold (every prediction accepted), and the run scored against that gold, without the model."""
    (run, review, page, export, import_, evaluate) = commands_run_by("test_a_run_and_the_review_loop_as_written")
    _cli(run, cwd=tmp_path)
    records = RunDir.open(tmp_path / "outputs" / "extract_invoices").read("records").to_pylist()
    assert len(records) == 4
    table = _cli(review, cwd=tmp_path).stdout.splitlines()
    assert table[0].split()[:2] == ["confidence", "record_id"] and 1 < len(table) <= 11
    _cli(page, cwd=tmp_path)
    assert "<html" in (tmp_path / "review.html").read_text()
    _cli(export, cwd=tmp_path)
    tasks = json.loads((tmp_path / "tasks.json").read_text())
    assert (tmp_path / "labelstudio.xml").is_file() and len(tasks) == 4
    answered = [{**t, "annotations": [{"id": k, "result": t["predictions"][0]["result"]}]} for k, t in enumerate(tasks)]
    (tmp_path / "project-export.json").write_text(json.dumps(answered))
    _cli(import_, cwd=tmp_path)
    gold = [json.loads(line) for line in (tmp_path / "gold.jsonl").read_text().splitlines()]
    assert sorted(g["id"] for g in gold) == sorted(r["row_id"] for r in records)
    scored = _cli(evaluate, cwd=tmp_path).stdout
    assert "content hash" in scored and "accuracy:" in scored and "mean 100.0%" in scored  # every prediction accepted
