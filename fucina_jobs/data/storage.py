"""Where a job reads and writes: a local path, or a ``pyarrow.fs`` URI (``s3://``, ``gs://``, ``file://``).

A location with ``://`` goes to ``pyarrow.fs.FileSystem.from_uri`` (so an S3
endpoint can ride in the URI: ``s3://bucket/out?endpoint_override=host:port&scheme=http``,
or come from ``AWS_ENDPOINT_URL``); any other location is a local path,
relative to the config's base folder.

Writes are atomic on both. Locally a file is written to a hidden temporary
name, fsynced and renamed, then its folder is fsynced. On an object store a
PUT (a multipart upload included) makes the object appear whole or not at
all, so the object is written in place, from bytes serialized beforehand: a
stream that failed half-way through a Parquet write would still complete its
upload on close, and leave a partial file under the final name. Readers skip
names that start with ``.`` or ``_``, so a local temporary is never read as
data.

An S3 store's transient errors (503 SlowDown, 500, a cut connection) are
retried with exponential backoff and counted, in the Ray replicas too
(``s3_retries.py``: pyarrow's own retry strategies cannot count). When they run
out, or the error is not transient (an expired token), a write is a
``StoreError`` naming the object.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..config import ConfigError, locate
from .s3_retries import RetriesExhausted, RetryingS3

log = logging.getLogger(__name__)


class StoreError(OSError):
    """An object store that failed a write or a manifest's read: one line naming the object, for the command line's message."""


def resolve(location: str, base: Path) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path on it: a URI through ``from_uri`` (S3 with its retries), anything else local below ``base``."""
    if "://" in location:
        try:
            fs, path = pafs.FileSystem.from_uri(location)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as err:
            raise ConfigError(f"{location}: not a usable filesystem URI ({str(err).splitlines()[0]})") from None
        if isinstance(fs, pafs.S3FileSystem):
            fs = RetryingS3.filesystem(fs.__reduce__()[1][0])  # the URI's options (endpoint, region, keys), and our retries
        return fs, path
    return pafs.LocalFileSystem(), os.path.abspath(base / location)  # not resolve(): /dev/stdin must not become /proc/N/fd/pipe:[M]


def resolve_input(location: str, base: Path) -> tuple[pafs.FileSystem, str]:
    """``resolve`` for what a job reads: a local relative path is found as ``config.locate`` says."""
    if "://" in location:
        return resolve(location, base)
    return pafs.LocalFileSystem(), os.path.abspath(locate(location, base))


#: Seconds a URI's store gets to answer its first request: without credentials some (gs://) retry for minutes, printing nothing.
PROBE_SECONDS = 10.0


def probe(location: str, base: Path, timeout: float = PROBE_SECONDS) -> tuple[pafs.FileSystem, str, pafs.FileInfo]:
    """Resolve ``location`` and ask its store what is there, within ``timeout`` seconds, whatever the URI's scheme.

    A store that refuses (no credentials, no access) or does not answer in time
    is a one-line ``ConfigError`` in seconds, before any model loads."""

    def ask() -> tuple[pafs.FileSystem, str, pafs.FileInfo]:
        fs, path = resolve(location, base)
        return fs, path, fs.get_file_info(path)

    if "://" not in location:
        return ask()
    shown = location.split("?", 1)[0]  # a URI's query may carry keys
    answer: list = []
    asking = threading.Thread(target=lambda: answer.append(_outcome(ask)), name="storage-probe", daemon=True)
    asking.start()
    asking.join(timeout)
    if not answer:  # the thread is left to its retries; it holds nothing of ours
        raise ConfigError(f"{shown}: the store did not answer within {timeout:.0f}s; check its credentials, endpoint and network")
    value, err = answer[0]
    if isinstance(err, ConfigError):
        raise err
    if err is not None:
        raise ConfigError(f"{shown}: cannot reach it ({_first_line(err)})") from None
    return value


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as err:  # handed to the caller's thread
        return None, err


def _first_line(err: BaseException) -> str:
    text = (err.strerror if isinstance(err, OSError) and err.strerror else str(err)).strip()  # an OSError's filename is named apart
    return text.splitlines()[0] if text else type(err).__name__


def _why(err: OSError) -> str:
    """How a store's request failed, after a verb: after its retries, or at once (403, an expired token)."""
    return f", {_first_line(err)}" if isinstance(err, RetriesExhausted) else f" ({_first_line(err)})"


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def open_input(fs: pafs.FileSystem, path: str) -> BinaryIO:
    """A buffered, seekable binary file: lines for the scan, ``seek``/``read`` for a replica's byte ranges (ranged GETs on S3)."""
    return io.BufferedReader(fs.open_input_file(path), buffer_size=1 << 20)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    """The file's bytes as stored (pyarrow would otherwise decompress by suffix: ``dataset_files`` goes by magic bytes)."""
    with fs.open_input_stream(path, compression=None) as f:
        return f.read()


def list_files(fs: pafs.FileSystem, folder: str) -> list[str]:
    """Every file below ``folder`` (recursive), sorted; none when it does not exist."""
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


@dataclass(frozen=True)
class Storage:
    """An output location: atomic writes, listing, reading and deleting, the same on a local disk and an object store."""

    fs: pafs.FileSystem
    root: str  # the location's path on ``fs``
    location: str  # as the user wrote it, for messages

    @classmethod
    def at(cls, location: str, base: Path) -> "Storage":
        """The location's store, asked once (``probe``): an unreachable store or a file in the folder's place is a ``ConfigError``."""
        fs, root, info = probe(location, base)
        if info.type == pafs.FileType.File:
            raise ConfigError(f"{location.split('?', 1)[0]} is a file, not a folder; give a folder's path")
        return cls(fs, root.rstrip("/"), location if "://" in location else root)

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def name(self, path: str) -> str:
        """``path`` as a user can find it: a local path, or the URI's scheme and path."""
        if self.local:
            return path
        return f"{self.location.split('://', 1)[0]}://{path}"

    def write_table(self, path: str, table: pa.Table) -> None:
        self._write(path, lambda f: pq.write_table(table, f))

    def write_json(self, path: str, value: Any) -> None:
        self.write_bytes(path, _json_bytes(value))

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write(path, lambda f: f.write(data))

    def _write(self, path: str, write: Callable[[Any], None]) -> None:
        if self.local:
            atomic(Path(path), write)
            return
        buffer = pa.BufferOutputStream()
        write(buffer)  # serialized first: the upload below is all of the file or nothing
        try:
            with self.fs.open_output_stream(path) as f:  # the object appears when the stream closes, whole
                f.write(buffer.getvalue())
        except OSError as err:
            self.delete_quietly(path)
            raise StoreError(errno.EIO, f"not written{_why(err)}", self.name(path)) from err

    def delete_quietly(self, path: str) -> None:
        """Delete ``path`` if the store lets us: a failed upload must leave nothing under its name, and may not reach the store."""
        try:
            self.delete(path)
        except OSError as err:
            log.warning("%s: could not delete it after a failed write (%s)", self.name(path), _first_line(err))

    def read_table(self, path: str, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(path, columns=columns, filesystem=self.fs)

    def row_count(self, path: str) -> int:
        """A Parquet file's rows, from its footer alone."""
        with self.fs.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def read_json(self, path: str) -> Any | None:
        """The JSON at ``path``, or None when it is missing or unreadable; a ``StoreError`` when an object store fails to
        answer: a manifest it could not read is not a missing one (a commit would take it for another run's)."""
        try:
            return json.loads(read_bytes(self.fs, path))
        except FileNotFoundError:
            return None
        except OSError as err:
            if self.local:
                return None
            raise StoreError(errno.EIO, f"not read{_why(err)}", self.name(path)) from err
        except ValueError:
            return None

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def list(self, folder: str) -> list[str]:
        return list_files(self.fs, folder)

    def delete(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, indent=2, sort_keys=True, default=str).encode()


def write_table(path: Path, table: pa.Table) -> None:
    """Write a local Parquet file atomically."""
    atomic(path, lambda f: pq.write_table(table, f))


def write_json(path: Path, value: Any) -> None:
    """Write a local JSON file atomically."""
    atomic(path, lambda f: f.write(_json_bytes(value)))


def atomic(path: Path, write: Callable[[Any], None]) -> None:
    """Write to a hidden temporary, fsync, rename over ``path``, fsync the folder: a reader sees all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0666 minus the umask, as any file the user makes
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:  # pyarrow names no file: name it, for the one-line message
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
