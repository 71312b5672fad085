"""Issue 12: every config error stops the run before any model loads, in one line naming the key.

Nothing here starts Ray or loads model weights: ``Job.run`` must raise before it
reaches the replica pool, and leave no manifest behind.
"""

import json
from pathlib import Path

import pytest
import ray
import torch

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.driver import Job
from fucina_jobs.data.rundir import RunDir

from tests.helpers import REPO, cli, job_dict, manifest, write_jsonl

pytestmark = pytest.mark.usefixtures("without_ray")  # each checks that no Ray started

SCHEMAS = {
    "bad_pattern.json": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}},
    "not_a_schema.json": {"type": "strin"},
    "backreference.json": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}},
    "unsupported.json": {"type": "object", "properties": {"a": {"if": {"type": "string"}, "then": {"minLength": 1}}}},
    "reserved.json": {"type": "object", "properties": {"row_id": {"type": "string"}}},
    "remote_ref.json": {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
}


@pytest.fixture
def files(tmp_path):
    for name, schema in SCHEMAS.items():
        (tmp_path / name).write_text(json.dumps(schema))
    (tmp_path / "bad.lark").write_text("start: undefined_rule\n")
    (tmp_path / "backreference.regex").write_text("(a)\\1\n")
    return tmp_path


CASES = [
    ({"constraint": {"json_schema": "{d}/bad_pattern.json"}}, ["constraint.json_schema", "pattern", "'(('"]),
    ({"constraint": {"json_schema": "{d}/not_a_schema.json"}}, ["constraint.json_schema", "not a valid JSON Schema", "'strin'"]),
    # constraint.relax=auto (the default) widens these two, so only relax=off refuses them here
    ({"constraint": {"json_schema": "{d}/backreference.json", "relax": "off"}}, ["constraint.json_schema", "backreferences are not supported"]),
    ({"constraint": {"json_schema": "{d}/unsupported.json", "relax": "off"}}, ["constraint.json_schema", "if", "then"]),
    ({"constraint": {"json_schema": "{d}/remote_ref.json"}}, ["constraint.json_schema", "https://example.com/a.json"]),
    ({"constraint": {"json_schema": "{d}/reserved.json"}}, ["constraint.json_schema", "row_id", "rename"]),
    ({"constraint": {"json_schema": None, "lark": "{d}/bad.lark"}}, ["constraint.lark", "undefined_rule"]),
    ({"constraint": {"json_schema": None, "regex": "{d}/backreference.regex"}}, ["constraint.regex", "backreferences are not supported"]),
    ({"prompt": {"system": "@{d}/missing.txt"}}, ["prompt.system", "missing.txt", "does not exist"]),
    ({"prompt": {"template": "Doc {{nope}}"}}, ["prompt.template", "'nope'", "inv-001", "fields: id, text"]),
    ({"model": {"source": "{d}/no-model-here"}}, ["model.source", "no-model-here", "no such directory"]),
    ({"model": {"source": "no-such-org/no-such-model-xyz"}}, ["model.source", "no-such-org/no-such-model-xyz"]),
]


@pytest.mark.parametrize("sections, words", CASES, ids=[f"{words[0]}-{i}" for i, (_, words) in enumerate(CASES)])
def test_config_errors_come_before_any_model_loads(files, sections, words):
    filled = {key: {k: v.format(d=files) if isinstance(v, str) else v for k, v in section.items()} for key, section in sections.items()}
    raw = job_dict(files / "out", **filled)
    with pytest.raises(ConfigError) as err:
        Job(validate(raw), REPO).run()
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert not ray.is_initialized() and manifest(files / "out") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_at_once(tmp_path):
    with pytest.raises(ConfigError, match="model.device=cuda.*no CUDA device"):
        Job(validate(job_dict(tmp_path / "out", model={"device": "cuda"})), REPO).run()
    assert not ray.is_initialized()


def test_min_ngram_above_max_ngram_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="min_ngram=5 is larger than max_ngram=4"):
        validate(job_dict(tmp_path, decoding={"speculative": {"min_ngram": 5, "max_ngram": 4}}))


def test_fresh_refuses_a_folder_that_holds_no_run_of_ours(tmp_path):
    """Defect 8: output.fresh=true deleted the user's records/ and logs/."""
    out = tmp_path / "out"
    for sub in ("records", "logs"):
        (out / sub).mkdir(parents=True)
        (out / sub / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="no manifest.json.*not a run of fucina_jobs"):
        Job(validate(job_dict(out, output={"fresh": True})), REPO).run()
    assert (out / "records" / "mine.txt").read_text() == "keep me" and (out / "logs" / "mine.txt").exists()


def test_fresh_deletes_only_what_a_run_of_ours_wrote_in_this_version(tmp_path):
    out = tmp_path / "out"
    version, other = (RunDir.for_config(str(out), tmp_path, fingerprint * 64) for fingerprint in "ab")
    version.run = other.run = "20261130T120501Z"
    ours = [Path(version.file("records", "0123456789abcdef")), Path(version.manifest_path), out / "logs" / "replica-0.log"]
    kept = [Path(version.folder("records")) / "notes.txt", Path(other.file("records", "0123456789abcdef")), Path(other.manifest_path)]
    for path in ours + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    version.claim(fresh=True)
    assert not any(p.exists() for p in ours) and all(p.exists() for p in kept)


def test_a_second_run_on_a_locked_output_dir_stops_naming_the_first(tmp_path):
    """Defect 4: two runs at once on one output.dir mixed their shards."""
    out = tmp_path / "out"
    with RunDir.open(out).locked():
        with pytest.raises(ConfigError, match=r"output.dir .* is in use by another run \(pid \d+\)"):
            Job(validate(job_dict(out)), REPO).run()
    assert manifest(out) is None


def test_dataset_problems_are_one_line_errors(tmp_path):
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory, but dataset.format=jsonl reads one file"):
        Job(validate(job_dict(tmp_path / "out", dataset={"path": str(folder)})), REPO)
    not_parquet = write_jsonl(tmp_path / "rows.parquet", [{"id": "a", "text": "x"}])
    with pytest.raises(ConfigError, match="is not a Parquet file"):
        Job(validate(job_dict(tmp_path / "out", dataset={"path": str(not_parquet), "format": "parquet"})), REPO)


@pytest.mark.parametrize(
    "args, words",
    [
        (["conf=extract_invoices", "prompt.template='Doc {nope}'"], ["prompt.template", "'nope'"]),
        (["--config-dir", "TMP", "conf=broken"], ["broken.yaml line 5", "malformed YAML"]),
    ],
)
def test_cli_says_it_in_one_line_without_a_traceback(tmp_path, args, words):
    (tmp_path / "broken.yaml").write_text("defaults:\n  - base\n  - _self_\nname: [broken\n")
    res = cli(*[a.replace("TMP", str(tmp_path)) for a in args], f"output.dir={tmp_path}/out")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    for word in words:
        assert word in res.stderr


def test_cli_read_only_output_dir_is_one_line(readonly_dir):
    res = cli("conf=extract_invoices", f"output.dir={readonly_dir}/out", timeout=300)
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "read-only" in res.stderr.lower() or "permission denied" in res.stderr.lower()
