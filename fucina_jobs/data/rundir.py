"""The layout of a job's outputs: versions, run partitions, the manifest, and which shards are committed.

    output.dir/                               a local path or a URI (storage.py)
      .lock                                   local outputs: one run at a time
      .reserve                                local outputs, while a run holds them: room for its last manifest
      logs/replica-N.log                      local outputs (URI outputs: see ``log_path``)
      version=<fingerprint[:12]>/             one per config; a config change starts a new one
        manifest.json                         this version's last run
        records/run=<UTC start>/shard-<key>.parquet
        rejects/run=<UTC start>/shard-<key>.parquet
        stats/run=<UTC start>/shard-<key>.parquet    the commit marker

Every run that decodes anything writes into a partition of its own, named by
its UTC start (``run=20261130T120501Z``), and counts the committed shards of
every earlier partition of its version as done. So a nightly run over a grown
dataset decodes only the new rows, into a new partition, and
``pyarrow.dataset.dataset(".../records", partitioning="hive")`` reads every
partition as one table with a ``run`` column.

A shard is named by the ids and content digests of its rows, so resharding
or editing the dataset between runs can never make two files claim one row.
Its stats file is the commit marker: it is written after the shard's records
and rejects, and removed before them. Records or rejects without stats are
leftovers of a stopped run, and the next run removes them.

A run only touches a directory that is empty of outputs or holds a manifest
of ours. On a local disk it holds an exclusive lock while it runs, so two
runs never mix their shards. An object store has no such lock: there the
manifest's ``run_id``, checked before every commit, is the guard; a second
run takes the manifest over, and the first one's shards stop committing.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import time
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from ..config import ConfigError
from .storage import Storage

log = logging.getLogger(__name__)

KINDS = ("records", "rejects", "stats")
MANIFEST = "manifest.json"
_REPLICA_LOG = re.compile(r"replica-\d+\.log")
#: Keys every manifest of ours has: a ``manifest.json`` without them (a web app's, say) is the user's.
_MANIFEST_KEYS = {"fingerprint", "status"}
LOCK = ".lock"
RESERVE = ".reserve"
#: Bytes a run sets aside on a local output.dir (``RESERVE``) and frees for the manifest that records its end: on a full
#: disk that manifest would not fit, and the last one would say ``running``. It holds a manifest of about 3000 shards.
RESERVE_BYTES = 1 << 16
VERSION = "version="
RUN = "run="


class DamagedShard(OSError):
    """A shard file that does not read as Parquet, or disagrees with its stats: the shard is not committed."""


@dataclass(frozen=True)
class Committed:
    """A finished shard as its stats file describes it."""

    key: str
    run: str | None  # its partition (None: a run written before partitions)
    rows: pa.Table  # id, digest: Arrow, so a rerun over a million committed rows stays small
    _: KW_ONLY
    failed: bool
    records: int
    rejects: int


def _reserve(path: Path) -> None:
    """``RESERVE_BYTES`` of disk in ``path``, allocated (not a sparse file); ``ENOSPC`` names it when they are not there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError as err:
        path.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    finally:
        os.close(fd)


class ShardFile(NamedTuple):
    kind: str
    run: str | None
    key: str | None  # None for a temporary of a killed write
    path: str


def shard_key(ids: Sequence[str], digests: Sequence[str]) -> str:
    """The shard's name: a digest of its rows' ids and contents, stable across shard sizes and runs."""
    digest = hashlib.sha256()
    for row_id, row_digest in zip(ids, digests):
        digest.update(f"{row_id}\0{row_digest}\n".encode())
    return digest.hexdigest()[:16]


def is_our_manifest(value: Any) -> bool:
    """Whether a parsed ``manifest.json`` is one a run of ours wrote."""
    return isinstance(value, dict) and _MANIFEST_KEYS <= value.keys()


def run_name(now: dt.datetime | None = None) -> str:
    """A run partition's name: its UTC start to the second, sortable as text."""
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


class RunDir:
    """One version of a job's outputs (``path``), and the run partition this process writes (``run``)."""

    def __init__(self, store: Storage, path: str, run: str | None = None):
        self.store = store
        self.path = path
        self.run = run

    @classmethod
    def for_config(cls, location: str, base: Path, fingerprint: str) -> "RunDir":
        """The version of ``output.dir`` that a config with this fingerprint writes."""
        try:
            store = Storage.at(location, base)
        except ConfigError as err:
            raise ConfigError(f"output.dir={err}") from None
        return cls(store, store.join(f"{VERSION}{fingerprint[:12]}"))

    @classmethod
    def open(cls, location: str | Path, base: Path = Path(".")) -> "RunDir":
        """For readers: the newest version in ``location`` (by its manifest's start), else ``location`` itself
        (a version folder, a run written before versions, or nothing)."""
        store = Storage.at(str(location), base)
        infos = store.fs.get_file_info(pafs.FileSelector(store.root, allow_not_found=True))
        versions = [i.path for i in infos if i.type == pafs.FileType.Directory and i.base_name.startswith(VERSION)]
        started = {v: str((store.read_json(f"{v}/{MANIFEST}") or {}).get("started", "")) for v in versions}
        return cls(store, max(versions, key=lambda v: (started[v], v))) if versions else cls(store, store.root)

    # -- layout ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """This version's location as a user finds it: a local path, or a URI (without its query)."""
        return self.store.name(self.path)

    @property
    def version(self) -> str:
        return self.path.rsplit("/", 1)[-1].removeprefix(VERSION)

    @property
    def manifest_path(self) -> str:
        return f"{self.path}/{MANIFEST}"

    def folder(self, kind: str) -> str:
        """Where every partition of one kind lives: what ``pyarrow.dataset`` reads with ``partitioning="hive"``."""
        return f"{self.path}/{kind}"

    def file(self, kind: str, key: str, run: str | None = None) -> str:
        """A shard's file in partition ``run`` (this process's run by default)."""
        run = run or self.run
        if run is None:
            raise RuntimeError("no run partition: call start_run() before writing shards")
        return f"{self.path}/{kind}/{RUN}{run}/shard-{key}.parquet"

    def log_path(self, replica: int) -> Path:
        """A replica's log: in ``output.dir/logs`` when it is local, else in the replica node's temporary folder
        (``$TMPDIR/fucina_jobs/logs/version=<v>/``), since a log appended line by line is no object."""
        if self.store.local:
            return Path(self.store.root) / "logs" / f"replica-{replica}.log"
        return Path(tempfile.gettempdir()) / "fucina_jobs" / "logs" / f"{VERSION}{self.version}" / f"replica-{replica}.log"

    def shard_files(self, kind: str | None = None) -> list[ShardFile]:
        """This version's shard files (and temporaries of killed writes), in every partition."""
        files = []
        for path in self.store.list(self.path):
            parts = path[len(self.path) + 1 :].split("/")
            if parts[0] not in KINDS or (kind and parts[0] != kind) or len(parts) not in (2, 3):
                continue
            run = parts[1][len(RUN) :] if len(parts) == 3 and parts[1].startswith(RUN) else None
            name = parts[-1]
            if name.startswith(".shard-"):
                files.append(ShardFile(parts[0], run, None, path))
            elif name.startswith("shard-") and name.endswith(".parquet"):
                files.append(ShardFile(parts[0], run, name[len("shard-") : -len(".parquet")], path))
        return files

    def start_run(self) -> str:
        """Name this process's partition: its UTC start, unused by any earlier run of this version."""
        taken = {f.run for f in self.shard_files()}
        name = run_name()
        while name in taken:  # two runs within one second
            time.sleep(0.25)
            name = run_name()
        self.run = name
        return name

    # -- who holds it ---------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Locally, hold ``output.dir/.lock`` exclusively, and ``RESERVE_BYTES`` of its disk (``release``); a second run
        stops at once, naming the first. A disk without room for the reserve stops the run before anything is decoded.

        An object store has no lock: the manifest's ``run_id``, checked before each commit, guards it."""
        if not self.store.local:
            yield
            return
        root = Path(self.store.root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise ConfigError(f"output.dir {root} is not writable ({err.strerror}); choose another output.dir") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                raise ConfigError(
                    f"output.dir {root} is in use by another run (pid {holder}); wait for it to end or choose another output.dir"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _reserve(root / RESERVE)
            yield
        finally:
            self.release()
            os.close(fd)  # closing releases the lock; the kernel releases it too when the process dies

    def release(self) -> None:
        """Free the reserve ``locked`` set aside, for the manifest that records the run's end."""
        if self.store.local:
            (Path(self.store.root) / RESERVE).unlink(missing_ok=True)

    def read_manifest(self) -> dict[str, Any] | None:
        return self.store.read_json(self.manifest_path)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.store.write_json(self.manifest_path, manifest)

    def run_id(self) -> str | None:
        """The run the manifest names: the only one whose shards may commit."""
        return (self.read_manifest() or {}).get("run_id")

    def claim(self, fresh: bool) -> None:
        """Refuse an output.dir holding outputs that no run of ours made; with ``fresh``, delete this version's files.

        A manifest is ours by its content, not its name, and ``fresh`` deletes only
        names our writer makes (this version's ``shard-*.parquet`` and manifest, ``logs/replica-<N>.log``)."""
        store = self.store
        foreign = [p for kind in (*KINDS, "logs") for p in store.list(store.join(kind))]
        ours = is_our_manifest(store.read_json(store.join(MANIFEST))) or any(
            i.type == pafs.FileType.Directory and i.base_name.startswith(VERSION)
            for i in store.fs.get_file_info(pafs.FileSelector(store.root, allow_not_found=True))
        )
        if foreign and not ours:
            raise ConfigError(
                f"output.dir {store.location} holds {len(foreign)} file(s) under records/, rejects/, stats/ or logs/ but no {MANIFEST} "
                "of ours: it is not a run of fucina_jobs, so nothing there is resumed or deleted; choose another output.dir"
            )
        if fresh:
            logs = [p for p in store.list(store.join("logs")) if _REPLICA_LOG.fullmatch(p.rsplit("/", 1)[-1])]
            for path in [f.path for f in self.shard_files()] + logs + [self.manifest_path]:
                store.delete(path)

    # -- shards ---------------------------------------------------------------------

    def committed(self) -> list[Committed]:
        """Every committed shard of this version, in every partition.

        A damaged shard (a file that does not read as Parquet, as a crash on a full
        disk elsewhere leaves it, or holds other than its stats' count) is
        uncommitted here, so the run decodes its rows again."""
        files = self.shard_files()
        paths = {(f.kind, f.run, f.key): f.path for f in files if f.key is not None}
        shards = []
        for f in files:
            if f.kind != "stats" or f.key is None:
                continue
            try:
                shard = self._committed(f, paths)
            except DamagedShard as err:
                log.warning("%s: decoding its rows again", err)
                shard = None
            if shard is None:  # uncommit it: its stats go first, so a stop half-way leaves only leftovers
                for kind in ("stats", "records", "rejects"):
                    if (kind, f.run, f.key) in paths:
                        self.store.delete(paths[kind, f.run, f.key])
                continue
            shards.append(shard)
        return shards

    def _committed(self, f: ShardFile, paths: dict[tuple, str]) -> Committed | None:
        """The shard ``f`` commits, or None when it must be decoded again; ``DamagedShard`` when one of its files is damaged."""
        stats = self._parquet(f.path, self.store.read_table)
        if "row_ids" not in stats.column_names:  # written before shards carried their rows: redo it
            return None
        rows = pa.table({"id": stats.column("row_ids")[0].values, "digest": stats.column("row_digests")[0].values})
        scalar = {name: stats.column(name)[0].as_py() for name in ("failed", "records", "rejects")}
        for kind in ("records", "rejects"):
            path = paths.get((kind, f.run, f.key))
            if path is None:
                raise DamagedShard(f"shard {f.key} of {self.name} has no {kind} file")
            held = self._parquet(path, self.store.row_count)
            if held != scalar[kind]:
                raise DamagedShard(f"{self.store.name(path)} holds {held} rows where its stats say {scalar[kind]}")
        return Committed(f.key, f.run, rows, failed=bool(scalar["failed"]), records=scalar["records"], rejects=scalar["rejects"])

    def _parquet(self, path: str, read: Callable[[str], Any]) -> Any:
        """``read(path)``; a file that does not read as Parquet (truncated, empty: a disk that lost part of it) is a ``DamagedShard``."""
        try:
            return read(path)
        except pa.ArrowInvalid as err:
            why = re.sub(r"^Could not open Parquet input source '.*?': ", "", str(err).splitlines()[0])  # the path is named already
            raise DamagedShard(f"{self.store.name(path)} is damaged ({why})") from None

    def write_outputs(self, key: str, records: pa.Table, rejects: pa.Table) -> None:
        """A shard's records and rejects, before its commit."""
        self.store.write_table(self.file("records", key), records)
        self.store.write_table(self.file("rejects", key), rejects)

    def commit(self, key: str, stats: pa.Table) -> None:
        self.store.write_table(self.file("stats", key), stats)

    def discard(self, key: str, run: str | None) -> None:
        """Uncommit a shard of partition ``run``: its stats go first, so a stop half-way leaves only leftovers."""
        for kind in ("stats", "records", "rejects"):
            self.store.delete(self.file(kind, key, run))

    def remove_leftovers(self) -> int:
        """Delete records and rejects of shards that never committed, and temporaries; return how many files went."""
        files = self.shard_files()
        committed = {(f.run, f.key) for f in files if f.kind == "stats" and f.key is not None}
        leftovers = [f.path for f in files if f.key is None or (f.kind != "stats" and (f.run, f.key) not in committed)]
        for path in leftovers:
            self.store.delete(path)
        if leftovers:
            log.info("removed %d file(s) of shards that never committed", len(leftovers))
        return len(leftovers)

    def read(self, kind: str, columns: list[str] | None = None) -> pa.Table:
        """Every shard file of one kind, all partitions, as one table with a ``run`` column (schemas may differ: stats).

        A damaged file raises ``DamagedShard`` (a rerun of the job decodes its rows again)."""
        tables = []
        for f in self.shard_files(kind):
            if f.key is None:
                continue
            table = self._parquet(f.path, self.store.read_table)
            if columns is not None:
                table = table.select([c for c in columns if c in table.column_names])
            tables.append(table.append_column("run", pa.array([f.run] * table.num_rows, pa.string())))
        if not tables:  # nothing written yet: the columns asked for, empty
            return pa.table({name: pa.array([], pa.null()) for name in [*(columns or []), "run"]})
        return pa.concat_tables(tables, promote_options="permissive")
