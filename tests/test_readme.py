"""The README's Python API block runs as written and prints schema-valid JSON."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from fucina_jobs.pipeline.config import SHIPPED

REPO = Path(__file__).resolve().parents[1]


def _python_api_block() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_block_is_short():
    assert len(_python_api_block().strip().splitlines()) <= 20


@pytest.mark.slow
def test_block_runs_and_prints_valid_invoice_json():
    run = subprocess.run([sys.executable, "-c", _python_api_block()], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    first, second = run.stdout.strip().splitlines()[:2]
    schema = json.loads((SHIPPED / "schemas/invoice.json").read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(json.loads(first))
    assert second.startswith("stop ")
