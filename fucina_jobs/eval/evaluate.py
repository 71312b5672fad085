"""Run (or read) a job and score it: the ``eval`` command without its Hydra front.

``generate`` mode scores a run's records, rejects and stats; ``grammar`` mode
needs no model at all, only its tokenizer, and judges MaskBench instances by
walking the constraint's mask, then validating them against the original schema
(two verdicts, ``maskbench``). Either way the run directory ends with
``scores.json`` (holding the content hash) and, unless ``eval.report=false``,
``report.md`` and ``report.html``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..config import ConfigError, JobConfig, locate, validate
from ..pipeline import Job
from ..data import META_FIELDS, Storage
from ..run_info import file_hash, fingerprint, package_versions, utc_now
from . import calibration, scoring
from .runs import VERDICT_SCHEMA, VERDICTS, Run, content_hash, read_run

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    run: Run  # scores and reports are written beside its manifest
    scores: dict[str, Any]
    ok: bool  # the job completed; grammar mode: no cause the known limitations do not explain, or no regression against eval.baseline

    @property
    def run_dir(self) -> str:
        return self.run.path


def evaluate(cfg: JobConfig, base: Path, resolved: dict[str, Any] | None = None) -> Evaluation:
    result = _grammar(cfg, base, resolved) if cfg.eval.mode == "grammar" else _generate(cfg, base, resolved)
    run, store = result.run, result.run.dir.store
    store.write_json(run.file("scores.json"), result.scores)
    if cfg.eval.report:
        from .report import report_files

        for name, data in report_files(result.scores).items():
            store.write_bytes(run.file(name), data)
    log.info("scores written to %s/scores.json", result.run_dir)
    return result


# -- generate ---------------------------------------------------------------------------


def _generate(cfg: JobConfig, base: Path, resolved: dict[str, Any] | None) -> Evaluation:
    if cfg.eval.run_dir:
        run = read_run(cfg.eval.run_dir, base)
        if not run.exists:
            raise ConfigError(f"eval.run_dir={cfg.eval.run_dir}: {run.path} holds no run (no records/, rejects/ or manifest.json)")
        job_cfg = _run_config(run, cfg)
        ok = (run.manifest or {}).get("status", "complete") == "complete"
    else:
        job = Job(cfg, base, resolved)
        ok = job.run().ok
        run, job_cfg = read_run(job.dir.name, base), cfg
    return Evaluation(run, generate_scores(run, job_cfg, base), ok)


def _run_config(run: Run, cfg: JobConfig) -> JobConfig:
    """An existing run is scored under its own job config (from its manifest), with this command's eval section."""
    recorded = (run.manifest or {}).get("config")
    if not recorded:
        log.warning("%s has no manifest config: scoring it under the command's config", run.path)
        return cfg
    _check_same_job(run, recorded, cfg)
    try:
        return validate({**recorded, "eval": cfg.eval.model_dump()})
    except ConfigError as err:
        log.warning("the run's recorded config no longer validates (%s): scoring it under the command's config", err)
        return cfg


def _check_same_job(run: Run, recorded: dict[str, Any], cfg: JobConfig) -> None:
    """Refuse a run of another job (another dataset or constraint): its rows are not what this command's gold labels."""

    def job(dataset: Any, constraint: Any) -> tuple:
        dataset, constraint = dataset or {}, constraint or {}
        kind = next((k for k in ("json_schema", "lark", "regex") if constraint.get(k)), None)
        return dataset.get("path"), dataset.get("schema_field"), kind, constraint.get(kind) if kind else None

    theirs = job(recorded.get("dataset"), recorded.get("constraint"))
    ours = job(cfg.dataset.model_dump(), cfg.constraint.model_dump())
    if theirs != ours:
        describe = lambda j: f"dataset {j[0]}, " + (f"constraint.{j[2]}={j[3]}" if j[2] else f"schemas from {j[1]}")  # noqa: E731
        raise ConfigError(
            f"eval.run_dir={cfg.eval.run_dir} holds a run of another job, {recorded.get('name')!r} ({describe(theirs)}), "
            f"not of {cfg.name!r} ({describe(ours)}); give that job's conf=, or a run of this one"
        )


def generate_scores(run: Run, cfg: JobConfig, base: Path) -> dict[str, Any]:
    json_output = cfg.constraint.kind in (None, "json_schema")
    scores = _header(run, cfg, "generate")
    scores["conformance"] = scoring.conformance(run.records, run.rejects, json_output)
    if cfg.dataset.schema_field:
        scores["schema_coverage"] = scoring.schema_coverage(run.rejects, scores["conformance"]["rows"])
    if cfg.dataset.format == "maskbench":
        from ..data import read_rows

        ran = {r["row_id"] for r in [*run.records, *run.rejects]}
        features = {row.id: row.fields.get("features", []) for row in read_rows(cfg.dataset, base) if row.id in ran}
        scores["by_feature"] = scoring.by_feature(features, {r["row_id"] for r in run.records})
    if cfg.eval.gold:
        predictions = {r["row_id"]: _prediction(r, json_output) for r in run.records} | {r["row_id"]: None for r in run.rejects}
        gold = load_gold(locate(cfg.eval.gold, base))
        scores["accuracy"] = scoring.accuracy(gold, predictions, cfg.eval.numeric_tolerance)
        if any(r.get("field_confidence_mean") for r in run.records):
            scores["confidence"] = calibration.confidence_scores(gold, run.records, predictions, cfg.eval.numeric_tolerance)
    if any(r.get("field_spans") for r in run.records):
        from .sources import read_sources

        try:
            sources = read_sources(run, base, cfg)
            scores["spans"] = scoring.span_exactness(run.records, sources.texts, sources.fields, sources.changed)
        except ConfigError as err:  # the documents are elsewhere: everything else can still be scored
            log.warning("spans not checked: %s", err)
    scores["efficiency"] = scoring.efficiency(run.stats)
    return scores


def _prediction(record: dict[str, Any], json_output: bool) -> dict[str, Any] | None:
    if json_output:
        value = json.loads(record["text"])
        return value if isinstance(value, dict) else {"value": value}
    meta = {f.name for f in META_FIELDS}
    return {k: v for k, v in record.items() if k not in meta}  # a regex's named groups


def load_gold(path: Path) -> dict[str, dict[str, Any]]:
    """Gold labels by row id, from JSONL lines ``{"id": ..., "label": {...}}``."""
    if not path.is_file():
        raise ConfigError(f"eval.gold: {path} does not exist")
    gold: dict[str, dict[str, Any]] = {}
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            gold[str(entry["id"])] = dict(entry["label"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ConfigError(f'eval.gold: {path.name}:{line_no}: expected {{"id": ..., "label": {{...}}}} ({err})') from None
    return gold


# -- grammar ------------------------------------------------------------------------------


def _grammar(cfg: JobConfig, base: Path, resolved: dict[str, Any] | None) -> Evaluation:
    from ..engines import load_tokenizer, resolve_source, stop_tokens
    from .maskbench import KNOWN_LIMITATIONS, run_suite, suite_files

    if cfg.dataset.format != "maskbench":
        raise ConfigError(f"eval.mode=grammar needs dataset.format=maskbench (a directory of MaskBench files), not {cfg.dataset.format!r}")
    if cfg.eval.run_dir:
        raise ConfigError("eval.mode=grammar judges the suite afresh into output.dir; eval.run_dir scores an existing generate run")
    suite = locate(cfg.dataset.path, base).resolve()
    files = suite_files(suite, cfg.dataset.limit) if suite.is_dir() else []
    if not files:
        raise ConfigError(f"dataset.path={cfg.dataset.path}: no MaskBench .json files in {suite}")
    out = Storage.at(cfg.output.dir, base)  # a local folder or a URI, as a run's output.dir
    started = utc_now()
    model_path = resolve_source(cfg.model.source)
    tokenizer = load_tokenizer(cfg.model.source)
    report = run_suite(files, tokenizer, stop_token=min(stop_tokens(tokenizer)), relax=cfg.constraint.relax == "auto")
    for old in out.list(out.join(VERDICTS)):
        out.delete(old)
    out.write_table(out.join(VERDICTS, "verdicts.parquet"), pa.Table.from_pylist(report["verdicts"], schema=VERDICT_SCHEMA))
    out.write_json(
        out.join("manifest.json"),
        {
            "name": cfg.name,
            "mode": "grammar",
            "fingerprint": fingerprint(cfg),
            "config": resolved or cfg.model_dump(),
            "hashes": {"dataset": file_hash(suite), "tokenizer": _tokenizer_hash(Path(model_path)) if Path(model_path).is_dir() else model_path},
            "versions": package_versions(("fucina_jobs", "llguidance", "transformers", "tokenizers")),
            "started": started,
            "ended": utc_now(),
            "status": "complete",
            "totals": {"files": report["files"], "instances": report["instances"]},
        },
    )
    run = read_run(cfg.output.dir, base)
    scores = _header(run, cfg, "grammar")
    scores["grammar"] = scoring.grammar_scores(report, KNOWN_LIMITATIONS)
    scores["timing"] = scoring.grammar_timing(report)
    if cfg.eval.baseline:
        scores["regressions"] = scoring.regressions(_baseline_verdicts(base / cfg.eval.baseline), report["verdicts"])
        return Evaluation(run, scores, not scores["regressions"]["count"])
    return Evaluation(run, scores, not scores["grammar"]["unexplained"])


def _baseline_verdicts(path: Path) -> list[dict[str, Any]]:
    run = read_run(path)
    if not run.verdicts:
        raise ConfigError(f"eval.baseline={path}: no verdicts/ there; give the output.dir of an earlier eval.mode=grammar run")
    return run.verdicts


def _tokenizer_hash(model_dir: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for file in sorted(model_dir.glob("*token*")) + sorted(model_dir.glob("vocab*")) + sorted(model_dir.glob("merges*")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


# -- shared -----------------------------------------------------------------------------


def _header(run: Run, cfg: JobConfig, mode: str) -> dict[str, Any]:
    manifest = run.manifest or {}
    d, r = cfg.decoding, cfg.runtime
    constraint = getattr(cfg.constraint, cfg.constraint.kind) if cfg.constraint.kind else f"per row ({cfg.dataset.schema_field})"
    setup = {"constraint": constraint, "relax": cfg.constraint.relax, "dataset": cfg.dataset.path}
    if mode == "grammar":  # no model runs: only its tokenizer matters
        setup |= {"tokenizer": cfg.model.source, "baseline": cfg.eval.baseline}
    else:
        setup |= {
            "model": cfg.model.source,
            "dtype": cfg.model.dtype,
            "gold": cfg.eval.gold,
            "temperature": d.temperature,
            "seed": d.seed,
            "max_tokens": d.max_tokens,
            "replicas": r.replicas,
            "streams": r.streams,
            "speculative": d.speculative.enabled,
        }
    return {
        "name": cfg.name,
        "mode": mode,
        "run_dir": run.path,
        "content_hash": content_hash(run),
        "fingerprint": manifest.get("fingerprint"),
        "status": manifest.get("status"),
        "config": setup,
    }
