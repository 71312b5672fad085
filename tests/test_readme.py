"""The docs tell the truth: docs/CONFIG.md's config table is the pydantic models' own, and the README's Python API block runs as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any, Literal, get_args, get_origin

import jsonschema
import pytest
from pydantic import BaseModel

from fucina_jobs.config import DEFAULT_OUTPUT_DIR, ENGINES, SHIPPED, JobConfig
from tests.helpers import REPO

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
