import importlib.util
import subprocess
import sys

import pytest

from fucina_jobs.config import ConfigError, validate

from tests.helpers import REPO, job_dict, manifest


def test_valid_config_has_defaults(tmp_path):
    cfg = validate(job_dict(tmp_path))
    assert cfg.decoding.speculative.enabled and cfg.model.source == "default" and cfg.constraint.kind == "json_schema"


@pytest.mark.parametrize(
    "section, value, words",
    [
        ("decoding", {"temperature": -1}, ["decoding.temperature=-1", "greater than or equal to 0"]),
        ("runtime", {"replicas": 0}, ["runtime.replicas=0"]),
        ("model", {"device": "tpu"}, ["model.device='tpu'", "'auto', 'cpu' or 'cuda'"]),
        ("dataset", {"format": "xml"}, ["dataset.format='xml'", "jsonl"]),
        ("decoding", {"max_tokns": 5}, ["decoding.max_tokns", "unknown key"]),
        ("constraint", {"regex": "schemas/contact.regex"}, ["not json_schema and regex"]),
        ("engine", {"name": "vllm", "kv_cache_gib": 0}, ["engine.vllm.kv_cache_gib=0", "greater than 0"]),
        ("engine", {"name": "fucina", "max_model_len": 4096}, ["engine.fucina.max_model_len", "unknown key"]),
    ],
)
def test_config_errors_name_key_value_and_allowed(tmp_path, section, value, words):
    with pytest.raises(ConfigError) as err:
        validate(job_dict(tmp_path, **{section: value}))
    for word in words:
        assert word in str(err.value)


def test_engine_group_defaults_to_fucina_and_takes_vllm(tmp_path):
    assert validate(job_dict(tmp_path)).engine.name == "fucina"
    assert not validate(job_dict(tmp_path)).engine.compile  # eager unless asked
    assert validate(job_dict(tmp_path, engine={"name": "fucina", "compile": True})).engine.compile
    vllm = validate(job_dict(tmp_path, engine={"name": "vllm"})).engine
    assert vllm.name == "vllm" and vllm.enforce_eager and vllm.max_model_len == 4096


def test_missing_constraint_is_an_error(tmp_path):
    raw = job_dict(tmp_path)
    raw["constraint"] = {}
    with pytest.raises(ConfigError, match="set one of constraint.json_schema"):
        validate(raw)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fucina_jobs", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_cli_help_and_cfg_job():
    top = _cli("--help")
    assert top.returncode == 0 and "run conf=NAME" in top.stdout
    helped = _cli("run", "conf=extract_invoices", "--help")
    assert helped.returncode == 0 and "output.dir" in helped.stdout and "resumes" in helped.stdout
    shown = _cli("run", "conf=extract_invoices", "--cfg", "job", "runtime.streams=3")
    assert shown.returncode == 0 and "streams: 3" in shown.stdout and "schemas/invoice.json" in shown.stdout


def test_cli_rejects_bad_override_before_loading_a_model(tmp_path):
    bad = _cli("run", "conf=extract_invoices", "decoding.top_p=2", f"output.dir={tmp_path}")
    assert bad.returncode == 2
    assert "decoding.top_p=2" in bad.stderr and "less than or equal to 1" in bad.stderr
    assert manifest(tmp_path) is None


def test_a_removed_setting_says_so_in_one_line_in_a_job_file_and_on_the_command_line(tmp_path):
    """``decoding.choice`` was removed: the error says what decodes instead, not "unknown key"."""
    with pytest.raises(ConfigError, match="^invalid job config: decoding.choice was removed: grounded values decode token by token"):
        validate(job_dict(tmp_path, decoding={"choice": "likelihood"}))
    for override in ("decoding.choice=likelihood", "+decoding.choice_options=8"):
        res = _cli("run", "conf=extract_invoices", override, f"output.dir={tmp_path}")
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "was removed: grounded values decode token by token" in res.stderr and "delete the setting" in res.stderr, res.stderr


def test_cli_engine_group_lists_its_options():
    shown = _cli("run", "conf=extract_invoices", "engine=vllm", "--cfg", "job")
    assert shown.returncode == 0 and "name: vllm" in shown.stdout and "kv_cache_gib" in shown.stdout
    for name in ("tgi", "null"):
        bad = _cli("run", "conf=extract_invoices", f"engine={name}")
        assert bad.returncode == 2 and bad.stderr == f"engine={name} is not an engine; the engines are fucina, vllm, canned\n"


@pytest.mark.parametrize("engine", [{"name": None}, {"name": "null"}, "tgi", {}])
def test_an_engine_that_is_not_ours_in_a_job_file_lists_the_engines(tmp_path, engine):
    with pytest.raises(ConfigError, match="is not an engine; the engines are fucina, vllm, canned$"):
        validate(job_dict(tmp_path) | {"engine": engine})


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here; the hint is for Pythons without it")
def test_cli_engine_vllm_without_the_extra_says_how_to_install(tmp_path):
    res = _cli("run", "conf=extract_invoices", "engine=vllm", f"output.dir={tmp_path}")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "bash scripts/setup.sh --with-vllm" in res.stderr and "fucina_jobs[vllm]" in res.stderr
    assert manifest(tmp_path) is None


def test_cli_without_job_says_what_to_do():
    res = _cli("run")
    assert res.returncode == 2 and "conf=NAME" in res.stderr and "extract_invoices" in res.stderr


@pytest.mark.slow
def test_multirun_sweeps_overrides_into_their_own_output_dirs(tmp_path):
    res = _cli(
        "run",
        "conf=extract_invoices",
        "-m",
        "dataset.limit=1",
        "decoding.max_tokens=8,12",
        f"output.dir={tmp_path}/t${{decoding.max_tokens}}",
        "runtime.replicas=1",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    for budget in (8, 12):
        recorded = manifest(tmp_path / f"t{budget}")
        assert recorded["config"]["decoding"]["max_tokens"] == budget and recorded["totals"]["rows"] == 1


def test_every_engine_a_job_can_name_has_a_class_that_runs_it():
    from fucina_jobs import engines
    from fucina_jobs.config import ENGINES

    found = {name: engines._engine_class(name).__name__ for name in ENGINES}  # vllm.py imports vLLM only when built
    assert found == {"fucina": "FucinaEngine", "vllm": "VLLMEngine", "canned": "CannedEngine"}
    assert all("implementation" not in model.model_fields for model in ENGINES.values())  # no setting a job could give
