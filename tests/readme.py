"""The README's commands, and which test runs each: a command a newcomer copies must work as written.

``RUN_BY`` names, for every command the README shows, the test that runs it (or ``.ci/run``, for the setup
and test commands CI itself runs). A test takes its commands from here (``commands_run_by``), as the README
writes them, and may only add overrides that keep it cheap (a smaller ``dataset.limit``, the canned engine,
a scratch ``output.dir``). ``tests/test_readme.py`` fails when the README gains a command this table lacks.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from tests.helpers import REPO

README = REPO / "README.md"
#: What CI runs: the README's setup and test commands are checked against it.
CI = ".ci/run"
#: The README's Python block, which ``tests/test_readme.py`` runs as a whole.
PYTHON_BLOCK = "the Python API block"

_INSTALL = "tests/test_install.py::test_the_wheel_runs_a_starter_job_and_a_shipped_job_from_a_folder_of_ones_own"
_CHEAP = "tests/test_readme.py::test_commands_that_need_no_model_run_as_written"
_LEARN = "tests/test_readme.py::test_learn_then_run_with_the_cues_as_written"
_LOOP = "tests/test_readme.py::test_a_run_and_the_review_loop_as_written"

RUN_BY = {
    "bash scripts/setup.sh": CI,
    ".venv/bin/python -m fucina_jobs run conf=extract_invoices": _INSTALL,
    "bash scripts/setup.sh --with-vllm --with-review": CI,
    ".venv/bin/python -m ruff check .": CI,
    ".venv/bin/python -m ruff format --check .": CI,
    ".venv/bin/python -m pytest -q -n 2": CI,
    ".venv/bin/python -m pytest -q -m alone": CI,
    ".venv-vllm/bin/python -m pytest -q -n 2 tests/vllm": CI,
    "pip install /path/to/fucina_jobs": _INSTALL,
    "fucina-jobs init myproject": _INSTALL,
    "cd myproject": _INSTALL,
    "fucina-jobs run conf=invoices": _INSTALL,
    "python -m fucina_jobs run conf=extract_invoices dataset.limit=4 runtime.replicas=2": _LOOP,
    "python -m fucina_jobs run conf=extract_invoices --cfg job": _CHEAP,
    "python -m fucina_jobs run conf=extract_invoices --help": _CHEAP,
    "python -m fucina_jobs learn conf=NAME gold=gold.jsonl dataset.path=inputs.jsonl": _LEARN,
    "python -m fucina_jobs run conf=NAME constraint.learned=jobs/NAME/learned.json": _LEARN,
    "python -m fucina_jobs review outputs/extract_invoices --limit 10": _LOOP,
    "python -m fucina_jobs review outputs/extract_invoices --html review.html": _LOOP,
    "python -m fucina_jobs export labelstudio outputs/extract_invoices tasks.json": _LOOP,
    "python -m fucina_jobs import labelstudio project-export.json gold.jsonl": _LOOP,
    "python -m fucina_jobs eval conf=eval_invoices eval.run_dir=outputs/extract_invoices eval.gold=gold.jsonl": _LOOP,
    "python -m fucina_jobs run conf=extract_invoices dataset.path=scans/ dataset.format=documents": _CHEAP,
    PYTHON_BLOCK: "tests/test_readme.py::test_block_runs_and_prints_valid_invoice_json",
}

#: A comment after a command: two spaces or more, then ``#``.
_COMMENT = re.compile(r"\s{2,}#.*$")


def readme_commands(text: str | None = None) -> list[str]:
    """Every command the README shows, in order: each line of its indented blocks (its comment left out, a line
    ending in ``\\`` joined to the next, a chain split at its ``&&``), and its Python block as one."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    commands, fenced, pending = [], False, ""
    for line in lines:
        if line.startswith("```"):
            if not fenced and line.strip() == "```python":
                commands.append(PYTHON_BLOCK)
            fenced = not fenced
        elif not fenced and line.startswith("    ") and line.strip():
            pending += _COMMENT.sub("", line.strip())
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " "
            else:
                commands += pending.split(" && ")
                pending = ""
    return commands


def commands_run_by(test: str) -> list[str]:
    """The README commands ``RUN_BY`` gives test ``test`` (its function name), in README order; each is checked to be
    in the README still."""
    shown = readme_commands()
    mine = [c for c, t in RUN_BY.items() if t.rsplit("::", 1)[-1] == test]
    assert mine and all(c in shown for c in mine), f"README commands registered for {test} are gone from the README: {mine}"
    return sorted(mine, key=shown.index)


def argv(command: str, python: str | Path = sys.executable, bin_dir: Path | None = None) -> list[str]:
    """One command of the README as arguments: ``python -m fucina_jobs`` (or ``.venv/bin/python``) runs on
    ``python``, ``fucina-jobs`` is ``bin_dir``'s entry point (else ``python -m fucina_jobs``)."""
    words = shlex.split(command)
    if words[0] in ("python", ".venv/bin/python"):
        return [str(python), *words[1:]]
    if words[0] == "fucina-jobs":
        return [str(bin_dir / "fucina-jobs"), *words[1:]] if bin_dir else [str(python), "-m", "fucina_jobs", *words[1:]]
    raise ValueError(f"not a command of the package: {command!r}")
