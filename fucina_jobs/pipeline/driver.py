"""The job flow: scan the rows, check everything, plan shards, fan them out to replicas, count.

    scan (ids, digests, locations; no row content) -> checks (config, prompts,
         constraint on the tokenizer alone) -> lock output.dir, this config's version
         -> keep committed shards (of every run partition) whose rows are unchanged
         -> shard the rest -> Ray replicas read their slices, decode, validate and
            write records | rejects, one stats row per shard (the commit), into
            this run's partition -> manifest

Shards are keyed by their rows' ids and content digests (``rundir.py``), so
a rerun after a kill, a reshard, an edited or a grown dataset decodes exactly
the rows that no committed shard holds, and a shard that failed is retried.
A changed config (``fingerprint``) writes a version of its own. Every check
that can fail runs before any model loads.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from .. import engines
from ..engines import EngineUnavailable, GrammarCheck, GrammarError, ModelNotFound, UnsupportedModel, load_tokenizer, resolve_device, resolve_source
from ..grounding import alarm
from ..run_info import file_hash, fingerprint, package_versions, text_hash, utc_now
from ..config import ConfigError, JobConfig, read_text_option
from ..data import Committed, RetryTally, RunDir, Slice, check_output_outside, failed_rows, retries, scan, shard_key
from .examples import load_examples
from .progress import Progress
from .job_constraint import read_constraint
from .shard_writer import CHUNK_STATS, ShardSummary, ShardWriter
from .signals import deferred, stop_of

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class JobSummary:
    rows: int = 0
    records: int = 0
    rejects: int = 0
    shards: int = 0
    shards_resumed: int = 0
    shards_redone: int = 0  # committed before, but failed or holding rows the dataset no longer has
    shards_failed: int = 0
    retries: int = 0
    store_retries: int = 0  # S3 requests made again after a transient error (``s3_retries.py``): the replicas' and the driver's
    reasons: dict[str, int] = field(default_factory=dict)
    alarm: dict[str, Any] = field(default_factory=dict)  # grounding.alarm.RunAlarm.as_dict()
    chunking: dict[str, int] = field(default_factory=dict)  # shard_writer.CHUNK_STATS over every committed shard

    @property
    def ok(self) -> bool:
        return self.shards_failed == 0

    def count(self, reasons: dict[str, int]) -> None:
        for reason, n in reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n


class Job:
    def __init__(self, cfg: JobConfig, base: Path, resolved: dict[str, Any] | None = None):
        self.cfg = cfg
        self.base = base
        self.retries_at = retries()  # the driver's own S3 retries are this process's from here (the scan's, the probe's included)
        _check_engine(cfg)
        self.resolved = resolved or cfg.model_dump()
        check_output_outside(cfg.dataset, cfg.output.dir, base)  # before the scan reads its own outputs back
        self.index = scan(cfg.dataset, base)
        self.run_id = secrets.token_hex(8)  # replicas commit only while the manifest names this run
        self._check_template()
        self.constraint = read_constraint(cfg.constraint, base)  # read once; replicas get its text, never the path
        self.examples = load_examples(cfg, base, self._prompt_option("template"), self.constraint.schema if self.constraint else None)
        self.fingerprint = fingerprint(cfg, self._contents())
        self.dir = RunDir.for_config(cfg.output.dir, base, self.fingerprint)  # a version per config
        self.writer = ShardWriter(cfg, self.constraint, base=base, out=self.dir, run_id=self.run_id)
        self.shards: dict[str, pa.Table] = {}  # this run's shards, by key: their rows' index entries

    # -- checks, before any model loads -----------------------------------------

    def _prompt_option(self, key: str) -> str:
        try:
            return read_text_option(getattr(self.cfg.prompt, key), self.base)
        except ConfigError as err:
            raise ConfigError(f"prompt.{key}: {err}") from None

    def _contents(self) -> dict[str, str]:
        """Digests of what the config names by path: the constraint, the prompt files and the worked examples."""
        p = self.cfg.prompt
        prompts = {key: text_hash(read_text_option(getattr(p, key), self.base)) for key in ("system", "template")}
        examples = {"examples": text_hash(json.dumps([e.turn for e in self.examples]))} if self.examples else {}
        return prompts | examples | ({"constraint": self.constraint.digest} if self.constraint else {}) | self._adapter()

    def _adapter(self) -> dict[str, str]:
        """The digest of the LoRA adapter merged into the model (``model.adapter``), where there is one."""
        try:
            return {"adapter": engines.adapters.digest(self.cfg.model.adapter)} if self.cfg.model.adapter else {}
        except engines.adapters.AdapterError as err:
            raise ConfigError(str(err)) from None

    def _check_template(self) -> None:
        """Fill the template from the first usable row, so a field the dataset lacks stops the run here."""
        template = self._prompt_option("template")
        self._prompt_option("system")
        row = self.index.first_usable
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
            engines.check_model(self.cfg.engine.name, model_path, m.source)
            if m.adapter:
                engines.adapters.check(m.adapter, model_path)
        except (ModelNotFound, UnsupportedModel, engines.adapters.AdapterError) as err:
            raise ConfigError(str(err)) from None
        except (OSError, ValueError) as err:  # transformers: a folder with no usable tokenizer files
            raise ConfigError(f"model.source={m.source!r}: cannot load its tokenizer ({str(err).strip().splitlines()[0]})") from None
        c = self.constraint
        if c is not None:
            try:
                c.compile(GrammarCheck(tokenizer), self.cfg.constraint)
            except (GrammarError, ValueError) as err:
                message = " ".join(str(err).split()).removeprefix(f"{c.name}: ")
                raise ConfigError(f"constraint.{c.kind}={c.name} does not compile: {message}") from None
        return model_path

    # -- the plan -----------------------------------------------------------------

    def _plan(self, summary: JobSummary) -> None:
        """Keep committed shards whose rows are all in the dataset unchanged; shard every other row anew.

        Arrow joins do the bookkeeping, so a rerun over a million rows holds
        ids and digests in columns, never a Python object per row.
        """
        self.dir.remove_leftovers()
        committed = self.dir.committed()
        current = self.index.table.select(["id", "digest"])
        unchanged = _rows_per_shard(committed, current)
        kept: list[str] = []
        claimed: set[str] = set()  # ids held by more than one kept shard: the first (by key) keeps them
        shared = _shared_ids(committed, unchanged)
        for shard in committed:
            ids = set(shard.rows.column("id").to_pylist()) & shared if shared else set()
            if shard.failed or unchanged.get(shard.key, 0) != shard.rows.num_rows or ids & claimed:
                log.info("shard %s is decoded again: %s", shard.key, "it failed" if shard.failed else "its rows changed")
                self.dir.discard(shard.key, shard.run)
                summary.shards_redone += 1
                continue
            claimed |= ids
            kept.append(shard)
            summary.shards_resumed += 1
        self._count_existing(kept, summary)
        held = [s.rows.column("id") for s in kept]
        todo = self.index.table
        if held:
            todo = todo.filter(pc.invert(pc.is_in(todo.column("id"), value_set=pa.concat_arrays([c.combine_chunks() for c in held]))))
        size = self.cfg.runtime.shard_size
        self.shards = {}
        for start in range(0, todo.num_rows, size):
            chunk = todo.slice(start, size)
            self.shards[shard_key(chunk.column("id").to_pylist(), chunk.column("digest").to_pylist())] = chunk
        summary.shards = summary.shards_resumed + len(self.shards)

    def _count_existing(self, kept: list[Committed], summary: JobSummary) -> None:
        import pyarrow.dataset as ds

        summary.records += sum(s.records for s in kept)
        summary.rejects += sum(s.rejects for s in kept)
        files = [self.dir.file("rejects", s.key, s.run) for s in kept if s.rejects]
        if files:
            reasons = ds.dataset(files, format="parquet", filesystem=self.dir.store.fs).to_table(columns=["reason"]).column("reason")
            summary.count(Counter(reasons.to_pylist()))

    def _manifest(self, started: str, summary: JobSummary, model_hash: str, status: str, error: str | None = None) -> dict[str, Any]:
        c = self.cfg
        committed = self.dir.shard_files("stats")
        manifest = {
            "name": c.name,
            "fingerprint": self.fingerprint,
            "config": self.resolved,
            "seed": c.decoding.seed,
            "hashes": {
                "dataset": self.index.hash,  # of what the scan read, even if the files change or go during the run
                "constraint": self.constraint.digest if self.constraint else None,
                "model": model_hash,
            },
            "versions": package_versions(),
            "started": started,
            "run_id": self.run_id,
            "status": status,
            "version": self.dir.version,
            "run": self.dir.run if self.shards else None,  # this run's partition; None when it decoded nothing
            "runs": sorted({f.run for f in committed if f.run}),
            "shards": sorted(f.key for f in committed if f.key),
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
        model_hash = file_hash(Path(model_path)) if Path(model_path).exists() else model_path  # once: both manifests name it
        if self.cfg.runtime.ray_address is not None:
            from .ray_pool import probe_cluster

            probe_cluster(self.cfg.runtime.ray_address)  # a mistyped address fails here, in seconds, not in ray.init's minutes
        with self.dir.locked():
            self.dir.claim(self.cfg.output.fresh)
            self.dir.start_run()
            summary = JobSummary(rows=len(self.index))
            self.dir.write_manifest(self._manifest(started, summary, model_hash, "running"))  # before any shard changes
            status, error = "interrupted", "stopped by Ctrl-C; rerun the same command to resume"
            try:
                self._plan(summary)
                self._decode(model_path, summary, on_dispatch)
                summary.alarm = self._alarm().as_dict()
                summary.chunking = self._chunking()
                for warning in summary.alarm["warnings"]:
                    log.warning("run alarm: %s", warning)
                status, error = ("complete" if summary.ok else "failed"), None
            except Exception as err:
                status, error = "failed", f"{type(err).__name__}: {err}"
                raise
            except KeyboardInterrupt as err:
                error = f"{stop_of(err)}; rerun the same command to resume"
                raise
            finally:
                with deferred():  # a stop signal now waits until the manifest says how the run ended
                    self._close(started, summary, model_hash, status, error)
        return summary

    def _close(self, started: str, summary: JobSummary, model_hash: str, status: str, error: str | None) -> None:
        summary.store_retries += retries() - self.retries_at
        try:
            if self.dir.run_id() != self.run_id:  # an object store has no lock: a run that took over keeps its manifest
                log.error("another run took %s over; this run's end (%s) is not recorded", self.dir.manifest_path, status)
                return
            self.dir.remove_leftovers()  # also frees what a half-written shard took on a full disk
            self.dir.release()  # the room a full disk keeps for this manifest
            self.dir.write_manifest(self._manifest(started, summary, model_hash, status, error))
        except OSError as err:
            log.error("could not record the run's end (%s) in %s: %s", status, self.dir.manifest_path, err)

    def _decode(self, model_path: str, summary: JobSummary, on_dispatch: Callable[[int, Any], None] | None) -> None:
        progress = Progress(total=len(self.index), done=len(self.index) - sum(t.num_rows for t in self.shards.values()))
        try:
            if self.shards:
                from .ray_pool import ReplicaPool

                keys = list(self.shards)

                def payload(shard: int) -> tuple[str, Slice]:  # built when sent: a million rows' slices never sit in the driver at once
                    return keys[shard], self.index.slice(self.shards[keys[shard]])

                with ReplicaPool(
                    self.cfg,
                    constraint=self.constraint,
                    model_path=model_path,
                    base=str(self.base),
                    out=self.dir,
                    run_id=self.run_id,
                    shards=len(keys),
                ) as pool:
                    try:
                        for index, result, error in pool.map(deque(range(len(keys))), payload, self.cfg.runtime.max_retries, on_dispatch):
                            if result is None:  # every replica failed it: its rows become rejects that carry the error
                                with RetryTally() as tally:  # its retries count in this process's, at the end
                                    rows = failed_rows(self.cfg.dataset, payload(index)[1])
                                    result = self.writer.write(keys[index], index, -1, rows, None, {}, error=error, retries=tally)
                            else:
                                summary.store_retries += result.store_retries
                            self._count(result, summary, progress)
                    finally:
                        summary.retries = pool.retries
        finally:
            progress.close()

    def _alarm(self) -> alarm.RunAlarm:
        """The run's alarm, from every committed shard's counts and record digests (resumed shards too, all partitions)."""
        table = self.dir.read("stats", columns=["alarm_counts", "record_digests"])
        if not table.num_rows:
            return alarm.combine([], [])
        counts = [json.loads(c) for c in table.column("alarm_counts").to_pylist() if c]
        return alarm.combine(counts, pc.list_flatten(table.column("record_digests")))

    def _chunking(self) -> dict[str, int]:
        """Chunked rows, their chunks, merge conflicts and overlap duplicates, over every committed shard (all partitions)."""
        table = self.dir.read("stats", columns=list(CHUNK_STATS))
        return {k: (pc.sum(table.column(k)).as_py() or 0) if k in table.column_names else 0 for k in CHUNK_STATS}

    def _count(self, result: ShardSummary, summary: JobSummary, progress: Progress) -> None:
        summary.records += result.records
        summary.rejects += result.rejects
        summary.shards_failed += result.failed
        summary.count(result.reasons)
        progress.update(result.rows, result.records, result.progress)


def _rows_per_shard(committed: list[Committed], current: pa.Table) -> dict[str, int]:
    """For each committed shard, how many of its rows the dataset still has with the same content."""
    if not committed:
        return {}
    held = pa.concat_tables([s.rows.append_column("key", pa.array([s.key] * s.rows.num_rows, pa.string())) for s in committed])
    same = held.join(current, keys=["id", "digest"], join_type="left semi")
    counts = same.group_by("key").aggregate([("id", "count")])
    return dict(zip(counts.column("key").to_pylist(), counts.column("id_count").to_pylist()))


def _shared_ids(committed: list[Committed], unchanged: dict[str, int]) -> set[str]:
    """Ids that more than one committed shard holds (left by a run stopped between two commits): usually none."""
    if len(committed) < 2:
        return set()
    ids = pa.concat_arrays([s.rows.column("id").combine_chunks() for s in committed])
    counts = pc.value_counts(ids)
    return set(counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist())


def _check_engine(cfg: JobConfig) -> None:
    """Fail before any row is read when the configured engine is not installed."""
    try:
        engines.require(cfg.engine.name)
    except EngineUnavailable as err:
        raise ConfigError(str(err)) from None
