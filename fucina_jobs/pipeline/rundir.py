"""The output directory of a job: who holds it, which shards it has committed, what a run may delete.

A shard is named by the ids and content digests of its rows, so resharding
or editing the dataset between runs can never make two files claim one row.
Its stats file is the commit marker: it is written after the shard's records
and rejects, and removed before them. Records or rejects without stats are
leftovers of a stopped run, and the next run removes them.

A run only touches a directory that is empty of outputs or holds a manifest
of ours, and holds an exclusive lock on it while it runs, so two runs never
mix their shards.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from .config import ConfigError

log = logging.getLogger(__name__)

KINDS = ("records", "rejects", "stats")
MANIFEST = "manifest.json"
LOCK = ".lock"


@dataclass(frozen=True)
class Committed:
    """A finished shard as its stats file describes it."""

    key: str
    rows: pa.Table  # id, digest: Arrow, so a rerun over a million committed rows stays small
    failed: bool
    records: int
    rejects: int


def shard_key(ids: Sequence[str], digests: Sequence[str]) -> str:
    """The shard's name: a digest of its rows' ids and contents, stable across shard sizes and runs."""
    digest = hashlib.sha256()
    for row_id, row_digest in zip(ids, digests):
        digest.update(f"{row_id}\0{row_digest}\n".encode())
    return digest.hexdigest()[:16]


class RunDir:
    def __init__(self, path: Path):
        self.path = path

    def file(self, kind: str, key: str) -> Path:
        return self.path / kind / f"shard-{key}.parquet"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``.lock`` exclusively; a second run on the same directory stops at once, naming the first."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise ConfigError(f"output.dir {self.path} is not writable ({err.strerror}); choose another output.dir") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                raise ConfigError(
                    f"output.dir {self.path} is in use by another run (pid {holder}); wait for it to end or choose another output.dir"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # closing releases the lock; the kernel releases it too when the process dies

    def run_id(self) -> str | None:
        """The run the manifest names: the only one whose shards may commit."""
        try:
            return json.loads((self.path / MANIFEST).read_text()).get("run_id")
        except (OSError, ValueError):
            return None

    def has_manifest(self) -> bool:
        return (self.path / MANIFEST).exists()

    def ours(self) -> list[Path]:
        """Every file a run of ours writes here (the lock aside)."""
        files = [p for kind in KINDS for p in (self.path / kind).glob("shard-*.parquet")]
        files += list((self.path / "logs").glob("replica-*.log"))
        if self.has_manifest():
            files.append(self.path / MANIFEST)
        return files

    def claim(self, fresh: bool) -> None:
        """Refuse a directory holding outputs that no run of ours made; with ``fresh``, delete our last run's files."""
        foreign = [p for kind in (*KINDS, "logs") if (self.path / kind).is_dir() for p in (self.path / kind).iterdir()]
        if foreign and not self.has_manifest():
            raise ConfigError(
                f"output.dir {self.path} holds {len(foreign)} file(s) under records/, rejects/, stats/ or logs/ but no {MANIFEST}: "
                "it is not a run of fucina_jobs, so nothing there is resumed or deleted; choose another output.dir"
            )
        if fresh:
            for path in self.ours():
                path.unlink(missing_ok=True)

    def committed(self) -> list[Committed]:
        shards = []
        for path in sorted((self.path / "stats").glob("shard-*.parquet")):
            key = path.stem[len("shard-"):]
            stats = pq.read_table(path)
            if "row_ids" not in stats.column_names:  # written before shards carried their rows: redo it
                self.discard(key)
                continue
            rows = pa.table({"id": stats.column("row_ids")[0].values, "digest": stats.column("row_digests")[0].values})
            scalar = {name: stats.column(name)[0].as_py() for name in ("failed", "records", "rejects")}
            shards.append(Committed(key, rows, bool(scalar["failed"]), scalar["records"], scalar["rejects"]))
        return shards

    def discard(self, key: str) -> None:
        """Uncommit a shard: its stats go first, so a stop half-way leaves only leftovers."""
        for kind in ("stats", "records", "rejects"):
            self.file(kind, key).unlink(missing_ok=True)

    def remove_leftovers(self) -> int:
        """Delete records and rejects of shards that never committed; return how many files went."""
        committed = {p.stem for p in (self.path / "stats").glob("shard-*.parquet")}
        leftovers = [p for kind in ("records", "rejects") for p in (self.path / kind).glob("shard-*.parquet") if p.stem not in committed]
        leftovers += [p for kind in KINDS for p in (self.path / kind).glob(".shard-*")]  # temporaries of a killed write
        for path in leftovers:
            path.unlink(missing_ok=True)
        if leftovers:
            log.info("removed %d file(s) of shards that never committed", len(leftovers))
        return len(leftovers)
