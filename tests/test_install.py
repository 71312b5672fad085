"""A job in a folder of the user's own: ``conf=NAME`` from ./conf first, then the package's jobs; input paths likewise.

The slow test installs the wheel into a fresh virtualenv and runs jobs from a folder outside the checkout.
"""

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fucina_jobs.pipeline.cli import compose
from fucina_jobs.config import SHIPPED, locate
from fucina_jobs.data.rundir import RunDir
from tests.helpers import REPO
from tests.readme import argv as readme_argv
from tests.readme import commands_run_by

#: The checkout's top-level folders the wheel ships inside the package (``config.SHIPPED``).
SHIPPED_FOLDERS = ("conf", "jobs", "schemas")

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


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "fucina_jobs", *args], capture_output=True, text=True, timeout=300, env=env)


def test_cli_names_the_jobs_when_conf_names_none(project):
    (project / "conf" / "myjob.yaml").write_text(MY_JOB.format(name="mine", data="rows.jsonl"))
    run = _cli("run", "conf=nope")
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith(f"conf=nope: no nope.yaml in {project / 'conf'} or the package's jobs; the jobs are ")
    assert {"extract_invoices", "myjob"} <= set(run.stderr.split("the jobs are ")[1].strip().split(", "))


def test_cli_shows_a_job_of_ones_own_whatever_the_order_of_its_arguments(project):
    """The shipped configs' search path joins the user's overrides, which Hydra takes as one run of arguments before ``--cfg``."""
    (project / "conf" / "myjob.yaml").write_text(MY_JOB.format(name="mine", data="rows.jsonl"))
    for args in (
        ["conf=myjob", "runtime.streams=3", "--cfg", "job"],
        ["runtime.streams=3", "conf=myjob", "--cfg", "job"],
        ["conf=myjob", "--cfg", "job", "runtime.streams=3"],
    ):
        shown = _cli("run", *args)
        assert shown.returncode == 0, shown.stderr
        assert "name: mine" in shown.stdout and "streams: 3" in shown.stdout


def test_the_wheel_holds_every_package_of_the_source_and_the_shipped_folders():
    """pyproject.toml lists the packages by name (the shipped folders are mapped into the package, which discovery cannot do)."""
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    source = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "fucina_jobs").rglob("*.py")}
    shipped = {f"fucina_jobs.shipped.{folder}": folder for folder in SHIPPED_FOLDERS}
    assert set(setup["packages"]) == source | set(shipped)
    assert setup["package-dir"] == shipped


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtualenv with the package's wheel installed: its heavy dependencies (torch, Ray...) are the running
    environment's, reached through a .pth file, so nothing is downloaded; the checkout is not on its path."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # only what the wheel is built from, so the build leaves nothing in the checkout
    for folder in ("fucina_jobs", *SHIPPED_FOLDERS):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source)], check=True, timeout=600, env=env)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300, env=env)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()
    Path(purelib, "_dependencies.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))
    (wheel,) = (work / "dist").glob("fucina_jobs-*.whl")
    # --ignore-installed: the running environment may hold the package too (an editable install), reachable through the .pth
    install = ["--python", str(python), "install", "--no-deps", "--no-index", "--ignore-installed", str(wheel)]
    subprocess.run([*pip, *install], check=True, timeout=600, env=env)
    return venv / "bin", env


@pytest.mark.slow
def test_the_wheel_runs_a_starter_job_and_a_shipped_job_from_a_folder_of_ones_own(installed, tmp_path):
    bin_dir, env = installed
    # The README's commands as it writes them (the wheel the fixture installs is its `pip install`).
    shipped_job, _, init, cd, starter = commands_run_by("test_the_wheel_runs_a_starter_job_and_a_shipped_job_from_a_folder_of_ones_own")
    project = tmp_path / cd.removeprefix("cd ")

    def run(*args: str, cwd: Path = project) -> subprocess.CompletedProcess:
        done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    where = run(bin_dir / "python", "-c", "import fucina_jobs; print(fucina_jobs.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(bin_dir.parent)), f"the wheel's package, not the checkout's: {where}"
    assert run(bin_dir / "fucina-jobs", "--help", cwd=tmp_path).stdout == run(bin_dir / "python", "-m", "fucina_jobs", "--help", cwd=tmp_path).stdout
    run(*readme_argv(init, bin_dir / "python", bin_dir), cwd=tmp_path)

    # The starter job, in the folder's own conf/, with the canned engine: every row ends exactly once.
    run(*readme_argv(starter, bin_dir / "python", bin_dir), "engine=canned", "runtime.replicas=1")
    rejects = RunDir.open(project / "outputs" / "invoices").read("rejects").to_pylist()
    assert sorted(r["row_id"] for r in rejects) == [f"inv-00{k}" for k in range(1, 6)]
    assert {r["reason"] for r in rejects} == {"schema_violation"}  # "{}" is no invoice

    # A shipped job by name, its schema, prompts and rows read from the package, on the default model.
    run(*readme_argv(shipped_job, bin_dir / "python"), "dataset.limit=2", "runtime.replicas=1", "output.dir=shipped")
    out = RunDir.open(project / "shipped")
    ids = [r["row_id"] for kind in ("records", "rejects") for r in out.read(kind).to_pylist()]
    assert sorted(ids) == ["inv-001", "inv-002"] and out.read_manifest()["status"] == "complete"
    records, invoice = out.read("records"), json.loads((SHIPPED / "schemas" / "invoice.json").read_text())
    assert set(invoice["properties"]) <= set(records.column_names)  # the package's invoice schema, not the starter's
    assert sorted(records.column("row_id").to_pylist()) == ["inv-001", "inv-002"]  # docs/ACCURACY.md: no invoice is a reject
