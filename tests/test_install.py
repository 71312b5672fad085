"""A job in a folder of the user's own: ``conf=NAME`` from ./conf first, then the package's jobs; input paths likewise."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fucina_jobs.pipeline.cli import compose
from fucina_jobs.pipeline.config import SHIPPED, locate

MY_JOB = """\
defaults:
  - base
  - _self_
name: {name}
constraint:
  regex: schemas/contact.regex
dataset:
  path: {data}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty folder outside the checkout, as the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    return tmp_path


def test_a_job_in_the_working_directorys_conf_lists_the_shipped_base(project):
    (project / "conf" / "myjob.yaml").write_text(MY_JOB.format(name="mine", data="rows.jsonl"))
    raw = compose("myjob", ["runtime.streams=3"])
    assert raw["name"] == "mine" and raw["runtime"]["streams"] == 3 and raw["engine"]["name"] == "fucina"  # base's defaults
    assert compose("extract_contacts", [])["constraint"]["regex"] == "schemas/contact.regex"  # a shipped job, found after ./conf


def test_the_working_directorys_job_shadows_a_shipped_one_and_config_dir_replaces_it(project):
    (project / "conf" / "extract_contacts.yaml").write_text(MY_JOB.format(name="local", data="rows.jsonl"))
    assert compose("extract_contacts", [])["name"] == "local"
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "extract_contacts.yaml").write_text(MY_JOB.format(name="elsewhere", data="rows.jsonl"))
    assert compose("extract_contacts", [f"--config-dir={elsewhere}"])["name"] == "elsewhere"


def test_relative_inputs_are_read_from_the_working_directory_first_then_from_the_shipped_files(project):
    assert locate("schemas/invoice.json", project) == SHIPPED / "schemas/invoice.json"
    assert locate("jobs/invoices/*.jsonl", project) == SHIPPED / "jobs/invoices/*.jsonl"  # a glob exists where it matches
    (project / "schemas").mkdir()
    (project / "schemas" / "invoice.json").write_text("{}")
    assert locate("schemas/invoice.json", project) == project / "schemas/invoice.json"
    assert locate("schemas/nowhere.json", project) == project / "schemas/nowhere.json"  # an error names the user's path


def test_cli_names_the_jobs_when_conf_names_none(project):
    (project / "conf" / "myjob.yaml").write_text(MY_JOB.format(name="mine", data="rows.jsonl"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-m", "fucina_jobs", "run", "conf=nope"], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith(f"conf=nope: no nope.yaml in {project / 'conf'} or the package's jobs; the jobs are ")
    assert {"extract_invoices", "myjob"} <= set(run.stderr.split("the jobs are ")[1].strip().split(", "))
