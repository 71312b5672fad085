"""Reading a run directory back, and its content hash.

The content hash is what "the same run" means for reproducibility: it covers
what a run *output* (per row: id, text, reject reason, finish reason; per
MaskBench instance: the verdict) and never how long it took or where it ran.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..pipeline.rundir import RunDir
from ..pipeline.sink import META_FIELDS

#: Written by ``eval.mode=grammar`` in place of records and rejects: one row per instance
#: (instance -1 for a schema that did not compile), the per-file detail the report leaves out.
VERDICTS = "verdicts"
VERDICT_SCHEMA = pa.schema([
    ("file", pa.string()), ("instance", pa.int64()), ("expected", pa.bool_()),
    ("accepted", pa.bool_()),  # the grammar verdict
    ("final", pa.bool_()),  # accepted and valid against the original schema
    ("cause", pa.string()),  # why a verdict is wrong at either stage
    ("compile_error", pa.string()), ("relaxations", pa.list_(pa.string())),
])
_CONTENT_KEYS = ("row_id", "text", "reason", "finish_reason")
_VERDICT_KEYS = tuple(VERDICT_SCHEMA.names)


@dataclass
class Run:
    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    scores: dict[str, Any] | None = None

    @property
    def exists(self) -> bool:
        return any((self.path / sub).is_dir() for sub in ("records", "rejects", VERDICTS)) or self.manifest is not None


def _read_dir(path: Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    if not path.is_dir():
        return []
    rows: list[dict[str, Any]] = []
    for file in sorted(path.glob("*.parquet")):
        table = pq.read_table(file)
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        rows += table.to_pylist()
    return rows


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_run(path: Path) -> Run:
    """Everything ``eval`` and ``compare`` need from a run directory (missing parts are empty).

    ``path`` is an output.dir (its newest version is read: every run partition),
    one of its ``version=`` folders, or a folder written before versions."""
    run_dir = RunDir.open(path)
    path = Path(run_dir.path)
    meta = [f.name for f in META_FIELDS]
    return Run(
        path=path,
        records=run_dir.read("records", meta).to_pylist(),
        rejects=run_dir.read("rejects").to_pylist(),
        stats=run_dir.read("stats").to_pylist(),
        verdicts=_read_dir(path / VERDICTS),
        manifest=_read_json(path / "manifest.json"),
        scores=_read_json(path / "scores.json"),
    )


def content_rows(run: Run) -> list[dict[str, Any]]:
    """One canonical row per output, sorted by row id: records and rejects alike."""
    rows = [{k: r.get(k) for k in _CONTENT_KEYS} for r in [*run.records, *run.rejects]]
    return sorted(rows, key=lambda r: (str(r["row_id"]), r["reason"] or ""))


def content_hash(run: Run) -> str:
    """sha256 over the canonical outputs (and MaskBench verdicts, for grammar runs)."""
    digest = hashlib.sha256()
    for row in content_rows(run):
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    for verdict in sorted(run.verdicts, key=lambda v: (v["file"], v["instance"])):
        digest.update(json.dumps({k: verdict.get(k) for k in _VERDICT_KEYS}, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()
