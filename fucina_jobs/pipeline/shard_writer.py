"""A shard's outputs: validate its completions into records and rejects, write them, commit.

The replica that decoded a shard writes it, straight into its run's partition
of ``output.dir`` (``rundir.py``: a local path or a URI), and
sends the driver only a ``ShardSummary``; the driver writes a shard itself
only when every replica failed it (all its rows become rejects carrying the
error). The driver builds a ``ShardWriter`` too, before any model loads, so a
constraint that cannot validate records is a config error, not a replica
that dies.

The stats file is the commit (``rundir.py``): it is written after the records
and rejects, and carries the shard's row ids and digests. A writer commits
only while ``manifest.json`` names its run: a replica that outlives a killed
driver (Ray ends it within seconds) must not commit into the next run's plan.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections import Counter
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa

from ..confidence import Confidence
from ..engines import DRAFT_SOURCES
from ..grounding import alarm
from ..grounding.check import ungrounded_values
from ..grounding.declaration import GroundingError, grounded_arrays, grounded_fields
from ..grounding.spans import value_spans
from ..rules.declaration import Rule, rules_of
from ..rules.expression import RuleError
from ..config import ConfigError, JobConfig, read_text_option
from ..data import Outcome, RetryTally, Row, RunDir, Validator, json_schema_fields, outcome_tables, record_schema
from .examples import load_examples
from .flags import record_flags
from .job_constraint import JobConstraint, parse_row_schema
from .merging import MergeError, Part, check_rules, merge

#: Stats columns whose type a single None or empty value would hide.
_STATS_TYPES = {
    "occupancy": pa.float64(),
    "record_digests": pa.list_(pa.int64()),
    "row_ids": pa.list_(pa.string()),
    "row_digests": pa.list_(pa.string()),
}

#: Stats columns of chunked rows (``dataset.chunking``), summed into the run's summary.
CHUNK_STATS = ("chunked_rows", "chunks", "merge_conflicts", "overlap_duplicates")

#: The decoder statistics the driver's progress line adds up.
_PROGRESS_KEYS = tuple(f"{what}_{source}" for what in ("drafted", "accepted") for source in DRAFT_SOURCES)


@dataclass
class ShardSummary:
    """What a committed shard tells the driver: counts, never rows."""

    rows: int
    records: int
    rejects: int
    _: KW_ONLY
    failed: bool
    reasons: dict[str, int] = field(default_factory=dict)
    progress: dict[str, int] = field(default_factory=dict)
    store_retries: int = 0  # the shard's S3 requests made again (``s3_retries.py``), its commit's included


class RunSuperseded(RuntimeError):
    """Another run owns ``output.dir`` now: this shard stays uncommitted, and that run decodes its rows."""


class ShardWriter:
    def __init__(self, cfg: JobConfig, constraint: JobConstraint | None, *, base: Path, out: RunDir, run_id: str):
        self.cfg = cfg
        self.constraint = constraint
        self.base = base
        self.dir = out
        self.run_id = run_id
        self.schema_source = constraint.schema if constraint and constraint.kind == "json_schema" else None
        self.grounded = self._declared(grounded_fields)
        self.rules = self._declared(rules_of)
        template = read_text_option(cfg.prompt.template, base)
        self.examples = load_examples(cfg, base, template, self.schema_source)  # checked here, before any model loads
        self.prompt = alarm.prompt_text(
            read_text_option(cfg.prompt.system, base), template, [t for e in self.examples for t in (e.document, e.answer)]
        )
        self.validator = self._validator()
        self.record_schema = self._record_schema()
        self._check_chunking()

    # -- built once, checked before any model loads ----------------------------

    def _declared(self, read: Callable[[Any], list]) -> list:
        """What the job schema declares (``x-grounded`` fields, ``x-rules``); a malformed declaration is a config error before any model loads."""
        if self.cfg.constraint.kind != "json_schema":
            return []
        try:
            return read(self.schema_source)
        except (GroundingError, RuleError) as err:
            raise ConfigError(f"constraint.json_schema: {self.cfg.constraint.json_schema}: {err}") from None

    def _check_chunking(self) -> None:
        """Chunked rows merge as their JSON schema says: a chunked job needs one, and its ``x-merge`` rules must apply."""
        if not self.cfg.dataset.chunking.enabled:
            return
        if self.cfg.constraint.kind not in ("json_schema", None):
            raise ConfigError(
                f"dataset.chunking merges chunk records as their JSON schema says; constraint.{self.cfg.constraint.kind} has none: "
                "use constraint.json_schema, or turn dataset.chunking.enabled off"
            )
        try:
            check_rules(self.schema_source)
        except MergeError as err:
            raise ConfigError(f"constraint.json_schema: {self.cfg.constraint.json_schema}: {err}") from None

    def _validator(self) -> Validator:
        c = self.constraint
        model = _import(self.cfg.constraint.pydantic_model) if self.cfg.constraint.pydantic_model else None
        return Validator(c.kind if c else "json_schema", c.pattern.pattern if c and c.pattern else self.schema_source, model)

    def _record_schema(self) -> pa.Schema:
        c = self.constraint
        if self.schema_source is not None:
            fields = json_schema_fields(self.schema_source)
        elif c and c.pattern:
            fields = [pa.field(name, pa.string()) for name in c.pattern.groupindex]
        else:
            fields = []
        try:
            return record_schema(fields, boxes=self.cfg.dataset.format == "documents")
        except ValueError as err:
            raise ConfigError(f"constraint.{c.kind}: {err}") from None

    # -- one shard -------------------------------------------------------------

    def write(
        self,
        key: str,
        shard: int,
        replica: int,
        rows: list[Row],
        completions: list[dict[str, Any]] | None,
        stats: dict[str, Any],
        *,
        error: str | None = None,
        retries: RetryTally | None = None,
    ) -> ShardSummary:
        """Write and commit a shard; ``completions`` None means it failed with ``error`` and every row is a reject.

        ``retries`` counts the shard's S3 retries: its stats row holds those before its commit (the row is the commit's
        upload), its summary those of the commit too."""
        retries = retries or RetryTally()
        outcomes = self._outcomes(rows, completions, error)
        records_table, rejects_table = outcome_tables(outcomes, self.record_schema, self._record_id)
        self.dir.write_outputs(key, records_table, rejects_table)
        records, rejects = records_table.num_rows, rejects_table.num_rows
        counts, digests = alarm.shard_counts(self._judged(rows, outcomes), self.prompt)
        row = {"shard": shard, "replica": replica, "rows": len(rows), "records": records, "rejects": rejects} | stats | _rule_stats(outcomes)
        row |= _chunk_stats(outcomes)
        row |= {
            "failed": completions is None,
            "row_ids": [r.id for r in rows],
            "row_digests": [r.digest for r in rows],
            "alarm_counts": json.dumps(counts),
            "record_digests": digests,
        }
        if self.dir.run_id() != self.run_id:
            raise RunSuperseded(f"{self.dir.path} belongs to another run now; shard {key} is left uncommitted")
        self.dir.commit(key, _stats_table(row | {"store_retries": retries.count}))
        reasons = Counter(o.reason for o in outcomes if o.reason)
        progress = {k: stats.get(k, 0) for k in _PROGRESS_KEYS}
        return ShardSummary(
            len(rows), records, rejects, failed=completions is None, reasons=dict(reasons), progress=progress, store_retries=retries.count
        )

    def _outcomes(self, rows: list[Row], completions: list[dict[str, Any]] | None, error: str | None) -> list[Outcome]:
        by_id = {c["row_id"]: c for c in completions or []}
        outcomes = []
        for row in rows:
            c = by_id.get(row.id)
            if row.problem or c is None:
                why = row.problem or f"shard failed after {self.cfg.runtime.max_retries} retries: {error}; rerun to retry it"
                outcomes.append(Outcome(row.id, "", "error", reason="error", error=why))
                continue
            if "chunks" in c:
                outcomes.append(self._merged(row, c))
                continue
            record, reason, message = self.judge(row, c)
            if record is not None:
                record, reason, message = self._ruled(row, record, c.get("repair_attempts", 0))
            flags = record_flags(record, self._source(row)) if record is not None else []
            spans = self._spans(row, record) if record is not None else {}
            outcomes.append(
                Outcome(
                    row.id,
                    c["text"],
                    c["finish_reason"],
                    prompt_tokens=c.get("prompt_tokens", 0),
                    generated_tokens=c.get("generated_tokens", 0),
                    record=record,
                    reason=reason,
                    error=message,
                    flags=flags,
                    relaxations=c.get("relaxations") or [],
                    example_ids=c.get("example_ids") or [],
                    confidence=c.get("confidence"),
                    rule_failures=c.get("rule_failures") or [],
                    repair_attempts=c.get("repair_attempts", 0),
                    agreement=c.get("agreement"),
                    spans=spans,
                    boxes=self._boxes(row, spans),
                )
            )
        return outcomes

    def judge(self, row: Row, c: dict[str, Any], source: str | None = None) -> tuple[dict | None, str | None, str | None]:
        """A completion's record, or its reject reason and message: it must parse, validate and be grounded (in the row's
        text, or ``source``: a chunk's). A row refused before decoding keeps the reason it was refused for."""
        if c.get("reason"):
            return None, c["reason"], c["error"]
        row_schema = self._row_schema(row) if c["finish_reason"] == "stop" else None  # a refused row's schema may be what is wrong
        record, reason, message = self.validator(c["text"], c["finish_reason"], c.get("error"), row_schema)
        if record is not None:
            record, reason, message = self._grounded(row, record, row_schema, source)
        return record, reason, message

    def _spans(self, row: Row, record: Any, source: str | None = None) -> dict[str, tuple[int, int]]:
        """Where each grounded value of ``record`` sits in the row's text, or ``source`` (its chunk's; ``grounding/spans.py``)."""
        row_schema = self._row_schema(row)
        fields = grounded_fields(row_schema) if row_schema else self.grounded
        return value_spans(record, fields, self._source(row) if source is None else source, grounded_arrays(row_schema or self.schema_source))

    def _boxes(self, row: Row, spans: dict[str, tuple[int, int]]) -> dict[str, list[tuple]] | None:
        """A PDF row's values on its pages (``documents.Layout``), found from its spans on the replica that parsed it."""
        return row.layout.boxes(self._source(row), spans) if row.layout is not None and spans else None

    def rules_for(self, row: Row) -> list[Rule]:
        """The rules a row's record must keep: its own schema's, or the job's; ``RuleError`` for a bad row schema."""
        row_schema = self._row_schema(row)
        return rules_of(row_schema) if row_schema is not None else self.rules

    def _ruled(self, row: Row, record: dict, attempts: int) -> tuple[dict | None, str | None, str | None]:
        """A record that keeps every rule stays; one that breaks a rule after its repairs is rejected ``rule_violation``."""
        try:
            broken = [r for r in self.rules_for(row) if not r.holds(record)]
        except RuleError as err:
            return None, "error", f"row {row.id!r}: its schema: {err}"
        if broken:
            return None, "rule_violation", f"after {attempts} repair attempt(s), breaks: {'; '.join(r.explain(record) for r in broken)}"
        return record, None, None

    def _grounded(self, row: Row, record: dict, row_schema: dict | None, source: str | None = None) -> tuple[dict | None, str | None, str | None]:
        """A record whose grounded values are all in the row's text (or ``source``, its chunk) stays; otherwise the row is rejected."""
        try:
            fields = grounded_fields(row_schema) if row_schema else self.grounded
        except GroundingError as err:
            return None, "error", f"row {row.id!r}: its schema: {err}"
        _, misses = ungrounded_values(record, fields, self._source(row) if source is None else source)
        if misses:
            return None, "ungrounded", f"not found in {self.cfg.dataset.text_field}: {'; '.join(misses)}"
        return record, None, None

    def _merged(self, row: Row, c: dict[str, Any]) -> Outcome:
        """A chunked row: each chunk validated and grounded in its own text, then merged (``merging.py``) and judged whole:
        validated, grounded and held to the rules (a chunked row is not repaired).

        A chunk that fails makes the row a reject with that chunk's reason: a record is all of the row or nothing."""
        chunks, source, schema = c["chunks"], self._source(row), self._row_schema(row) or self.schema_source
        parts, used = [], {k: sum(part.get(k, 0) for part in chunks) for k in ("prompt_tokens", "generated_tokens")}
        for part in chunks:
            chunk = part["chunk"]
            text = source[chunk.start : chunk.end]
            record, reason, message = self.judge(row, part, text)
            if record is None:
                where = f"chunk {chunk.index + 1} of {len(chunks)} (characters {chunk.start}-{chunk.end})"
                return Outcome(
                    row.id,
                    part["text"],
                    part["finish_reason"],
                    **used,
                    reason=reason,
                    error=f"{where}: {message}",
                    relaxations=c.get("relaxations") or [],
                    chunk_count=len(chunks),
                )
            value = json.loads(part["text"])
            parts.append(Part(chunk, value, part.get("confidence") or Confidence(), self._spans(row, value, text)))
        merged = merge(schema, parts)
        text = json.dumps(merged.record, ensure_ascii=False, separators=(",", ":"))
        record, reason, message = self.judge(row, {"text": text, "finish_reason": "stop"})
        if record is not None:
            record, reason, message = self._ruled(row, record, 0)
        flags = record_flags(record, source) if record is not None else []
        return Outcome(
            row.id,
            text,
            "stop",
            **used,
            record=record,
            reason=reason,
            error=message and f"the merged record: {message}",
            flags=flags,
            relaxations=c.get("relaxations") or [],
            example_ids=c.get("example_ids") or [],
            confidence=merged.confidence,
            spans=merged.spans if record is not None else {},
            boxes=self._boxes(row, merged.spans) if record is not None else None,
            chunk_count=len(chunks),
            field_chunks=merged.chunks,
            merge_conflicts=[k.as_row() for k in merged.conflicts],
            overlap_duplicates=merged.duplicates,
        )

    def _judged(self, rows: list[Row], outcomes: list[Outcome]) -> Iterator[alarm.Output]:
        """What the run alarm judges: the records and the ``ungrounded`` rejects whose text is JSON."""
        for row, o in zip(rows, outcomes):
            if o.record is None and o.reason != "ungrounded":
                continue
            try:
                value = json.loads(o.text)
            except json.JSONDecodeError:
                continue  # a regex or Lark job: its records are not JSON
            schema = self._row_schema(row) or (self.schema_source if isinstance(self.schema_source, dict) else None)
            yield alarm.Output(value, self._source(row), schema, o.record is not None)

    def _source(self, row: Row) -> str:
        return str(row.fields.get(self.cfg.dataset.text_field, ""))

    def _row_schema(self, row: Row) -> dict | None:
        field_name = self.cfg.dataset.schema_field
        return parse_row_schema(row.fields.get(field_name)) if field_name else None

    def _record_id(self, row_id: str) -> str:
        return hashlib.sha256(f"{self.cfg.name}:{row_id}".encode()).hexdigest()[:16]


def _rule_stats(outcomes: list[Outcome]) -> dict[str, int]:
    """Rows that broke a rule at some decode, those kept after repair, and the re-decodes."""
    return {
        "rule_broken_rows": sum(bool(o.rule_failures) for o in outcomes),
        "repaired_rows": sum(bool(o.rule_failures) and o.record is not None for o in outcomes),
        "repair_attempts": sum(o.repair_attempts for o in outcomes),
    }


def _chunk_stats(outcomes: list[Outcome]) -> dict[str, int]:
    """``CHUNK_STATS``: chunked rows, their chunks, merge conflicts and items found twice in an overlap."""
    chunked = [o for o in outcomes if o.chunk_count > 1]
    return {
        "chunked_rows": len(chunked),
        "chunks": sum(o.chunk_count for o in chunked),
        "merge_conflicts": sum(len(o.merge_conflicts or []) for o in chunked),
        "overlap_duplicates": sum(o.overlap_duplicates for o in chunked),
    }


def _stats_table(row: dict[str, Any]) -> pa.Table:
    """One stats row, with the types inference cannot see in a value that is None or empty fixed."""
    table = pa.Table.from_pylist([row])
    return table.cast(pa.schema([pa.field(f.name, _STATS_TYPES.get(f.name, f.type)) for f in table.schema]))


def _import(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"constraint.pydantic_model={dotted!r}: cannot import it ({err}); use 'module:Class'") from None
