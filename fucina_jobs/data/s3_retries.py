"""S3 requests retried with backoff by us, and counted: pyarrow's retry strategies cannot say how often they retried.

pyarrow's ``S3FileSystem`` retries through the AWS SDK (``AwsStandardS3RetryStrategy``,
``AwsDefaultS3RetryStrategy``), which reports nothing, and ``pyarrow.fs.S3RetryStrategy`` has no hook to implement
in Python (pyarrow 26 maps those two classes onto the SDK's strategies and refuses any other: ``ValueError``). So an
``s3://`` location's filesystem is ``RetryingS3.filesystem(options)``: a ``pyarrow.fs.PyFileSystem`` over an
``S3FileSystem`` whose SDK makes a single attempt a request, each of whose calls (a listing, a HEAD, a ranged GET, a
whole upload) is retried here when its error is transient (``transient``: 5xx, SlowDown and other throttling, a
timeout, a connection refused or cut, mid-body included), up to ``ATTEMPTS`` attempts with exponential backoff. Any
other error (403, 404, an expired token) is final at once, named by its object; when the attempts run out, it
is a ``RetriesExhausted`` naming the object.

A retry counts in this process's ``retries()``, and in the ``RetryTally`` active in the thread that made the call,
or opened the file, whichever thread reads it later (pyarrow reads a Parquet file's column chunks on its own
threads): a replica counts each shard's own, however many it runs at once. Writes are buffered and uploaded whole
when the file closes, so an upload is retried whole. The filesystem pickles (Ray ships it to the replicas) as its
options, and is rebuilt with the same retries.
"""

from __future__ import annotations

import errno
import random
import re
import threading
import time
from typing import Any, Callable, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

T = TypeVar("T")

#: Attempts per S3 request (the first included) before its error is final.
ATTEMPTS = 5
#: The wait before the first retry, in seconds; each later one doubles it, half of it random (about 4 s over ``ATTEMPTS``).
BACKOFF_S = 0.25

#: What pyarrow says of a transient S3 error: the SDK's error types the SDK itself retries, or an unnamed 5xx or 429.
_TRANSIENT = re.compile(
    r"AWS Error (SLOW_DOWN|THROTTLING|INTERNAL_FAILURE|SERVICE_UNAVAILABLE|NETWORK_CONNECTION|REQUEST_TIMEOUT)\b|HTTP status (5\d\d|429)\b"
)


class RetriesExhausted(OSError):
    """An S3 request still failing with a transient error after ``ATTEMPTS`` attempts."""


def transient(err: BaseException) -> bool:
    """Whether an S3 error may pass if the request is made again."""
    return isinstance(err, OSError) and not isinstance(err, RetriesExhausted) and _TRANSIENT.search(str(err)) is not None


def backoff(retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first): exponential, half of it random ("equal jitter")."""
    delay = BACKOFF_S * 2 ** (retry - 1)
    return delay / 2 + random.uniform(0, delay / 2)


class RetryTally:
    """The S3 retries of what runs inside ``with tally:`` in this thread: its calls, and reads of files it opened."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> "RetryTally":
        self._outer = getattr(_local, "tally", None)
        _local.tally = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.tally = self._outer


_local = threading.local()
_lock = threading.Lock()
_total = 0


def retries() -> int:
    """The S3 retries this process has made so far: a driver counts its own as the difference over its run."""
    return _total


def _counted(tally: RetryTally | None) -> None:
    global _total
    with _lock:
        _total += 1
        if tally is not None:
            tally.count += 1


class RetryingS3(pafs.FileSystemHandler):
    """The handler of ``RetryingS3.filesystem``: each call goes to an ``S3FileSystem`` of one attempt, retried here."""

    def __init__(self, options: dict[str, Any], attempts: int = ATTEMPTS):
        self.options, self.attempts = options, attempts
        self.inner = pafs.S3FileSystem(**options, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))

    @classmethod
    def filesystem(cls, options: dict[str, Any], attempts: int = ATTEMPTS) -> pafs.PyFileSystem:
        """A filesystem for ``pyarrow.fs.S3FileSystem(**options)``'s store, its requests retried and counted here."""
        return pafs.PyFileSystem(cls(options, attempts))

    def __reduce__(self) -> tuple:
        return type(self), (self.options, self.attempts)

    def call(self, path: str, request: Callable[[], T], tally: RetryTally | None = None) -> T:
        """``request()``, made again after a transient error while attempts remain; counted in ``tally`` (by default this
        thread's). ``RetriesExhausted`` names ``path`` when they run out."""
        tally = tally if tally is not None else getattr(_local, "tally", None)
        attempt = 1
        while True:
            try:
                return request()
            except OSError as err:
                why = str(err).strip().splitlines()[0]
                if not transient(err):
                    if type(err) is OSError and err.filename is None:  # pyarrow names no object for a GET: name it
                        raise OSError(errno.EIO, why, f"s3://{path}") from err
                    raise
                if attempt == self.attempts:
                    raise RetriesExhausted(errno.EIO, f"the store still failing after {attempt} attempts ({why})", f"s3://{path}") from err
            _counted(tally)
            time.sleep(backoff(attempt))
            attempt += 1

    # -- pyarrow.fs.FileSystemHandler ----------------------------------------------

    def get_type_name(self) -> str:
        return "s3+retries"

    def normalize_path(self, path: str) -> str:
        return self.inner.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        named = paths[0] if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1} more"
        return self.call(named, lambda: self.inner.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.call(selector.base_dir, lambda: self.inner.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self.call(path, lambda: self.inner.create_dir(path, recursive=recursive))

    def delete_dir(self, path: str) -> None:
        self.call(path, lambda: self.inner.delete_dir(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.call(path, lambda: self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok))

    def delete_root_dir_contents(self) -> None:
        self.call("/", lambda: self.inner.delete_dir_contents("/", accept_root_dir=True))

    def delete_file(self, path: str) -> None:
        self.call(path, lambda: self.inner.delete_file(path))

    def move(self, src: str, dest: str) -> None:
        self.call(src, lambda: self.inner.move(src, dest))

    def copy_file(self, src: str, dest: str) -> None:
        self.call(src, lambda: self.inner.copy_file(src, dest))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_Reader(self, path), mode="r")

    def open_output_stream(self, path: str, metadata: dict | None) -> pa.NativeFile:
        return pa.PythonFile(_Upload(self, path, metadata), mode="w")

    def open_append_stream(self, path: str, metadata: dict | None) -> pa.NativeFile:
        return self.inner.open_append_stream(path, metadata=metadata)  # S3 has none: pyarrow's own error


class _Reader:
    """An object read by ranged GETs at our own position, each retried: a read that failed mid-body is made again whole."""

    def __init__(self, store: RetryingS3, path: str):
        self.store, self.path = store, path
        self.tally = getattr(_local, "tally", None)  # the opener's, whichever thread reads
        self.file = store.call(path, lambda: store.inner.open_input_file(path), self.tally)  # a HEAD: the size
        self.size = self.file.size()
        self.pos = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, max(0, self.size - self.pos))
        data = self.store.call(self.path, lambda: self.file.read_at(n, self.pos), self.tally) if n else b""
        self.pos += len(data)  # fewer bytes than asked, without an error: the object is shorter now (the dataset's checks name it)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset + (0, self.pos, self.size)[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        self.closed = True
        self.file.close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True


class _Upload:
    """An object's bytes, buffered and uploaded whole on close: one retry uploads all of it again."""

    def __init__(self, store: RetryingS3, path: str, metadata: dict | None):
        self.store, self.path, self.metadata = store, path, metadata
        self.tally = getattr(_local, "tally", None)
        self.parts: list[bytes] = []
        self.written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.written += len(chunk)
        return len(chunk)

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.written

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        data = b"".join(self.parts)
        self.store.call(self.path, lambda: self._put(data), self.tally)

    def _put(self, data: bytes) -> None:
        with self.store.inner.open_output_stream(self.path, metadata=self.metadata) as f:
            f.write(data)
