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

from ..data import META_FIELDS, RunDir

#: Written by ``eval.mode=grammar`` in place of records and rejects: one row per instance
#: (instance -1 for a schema that did not compile), the per-file detail the report leaves out.
VERDICTS = "verdicts"
VERDICT_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("instance", pa.int64()),
        ("expected", pa.bool_()),
        ("accepted", pa.bool_()),  # the grammar verdict
        ("final", pa.bool_()),  # accepted and valid against the original schema
        ("cause", pa.string()),  # why a verdict is wrong at either stage
        ("compile_error", pa.string()),
        ("relaxations", pa.list_(pa.string())),
    ]
)
_CONTENT_KEYS = ("row_id", "text", "reason", "finish_reason")
_VERDICT_KEYS = tuple(VERDICT_SCHEMA.names)


@dataclass(kw_only=True)
class Run:
    dir: RunDir  # where it lives, a local folder or an object store (``data/storage.py``): readers and writers go through it
    records: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    scores: dict[str, Any] | None = None
    exists: bool = False  # it holds records/, rejects/, verdicts/ or a manifest

    @property
    def path(self) -> str:
        """The run's folder as a user finds it: a local path, or a URI."""
        return self.dir.name

    def file(self, name: str) -> str:
        """Where ``name`` (``scores.json``, ``plots/x.png``) lives in the run's folder, on ``dir.store``."""
        return f"{self.dir.path}/{name}"


def read_run(location: str | Path, base: Path = Path(".")) -> Run:
    """Everything ``eval``, ``review`` and ``compare`` need from a run (missing parts are empty).

    ``location`` is an output.dir, local or a URI (its newest version is read:
    every run partition), one of its ``version=`` folders, or a folder written
    before versions. A file there, or a store that cannot be reached, is a ``ConfigError``."""
    run_dir = RunDir.open(str(location), base)
    store, path = run_dir.store, run_dir.path
    meta = [f.name for f in META_FIELDS]
    verdict_files = [p for p in store.list(f"{path}/{VERDICTS}") if p.endswith(".parquet")]
    manifest = store.read_json(run_dir.manifest_path)
    return Run(
        dir=run_dir,
        records=run_dir.read("records", meta).to_pylist(),
        rejects=run_dir.read("rejects").to_pylist(),
        stats=run_dir.read("stats").to_pylist(),
        verdicts=[row for f in verdict_files for row in store.read_table(f).to_pylist()],
        manifest=manifest,
        scores=store.read_json(f"{path}/scores.json"),
        exists=manifest is not None or any(store.list(f"{path}/{sub}") for sub in ("records", "rejects", VERDICTS)),
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
