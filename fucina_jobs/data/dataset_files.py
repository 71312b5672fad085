"""A dataset file's bytes: decompressed when they are compressed, and sniffed for what they hold.

Compression is told by the file's first bytes (its magic number), whatever its
name: gzip, bz2 and zstd are read through pyarrow's ``CompressedInputStream``,
xz through the standard library's ``lzma`` (pyarrow 26 has no xz codec). A
compressed file has no random access, so ``open_ranged`` gives a replica a
reader that "seeks" forward by decompressing and skipping: a shard in the
middle of a file costs a decompression of everything before it
(``docs/SCALE.md``).

``sniff`` reads a line-format file's first bytes before any row is, so a file
of the wrong kind (Parquet, UTF-16, binary, lone-CR line ends, a JSON array or
pretty-printed JSON, CSV given as jsonl or jsonl as CSV) is one error that says
what to set or do, never rows of garbage.

A ``Stamp`` is a file's size and modification time as the scan's listing
found them: the scan refuses a file that changed while it read it, and a
replica one that is shorter than the scan found it, naming the file, rather
than take a cut-short object for a file of fewer rows. (``pyarrow.fs`` shows
no ETag; a same-size rewrite within a second of an object store's clock is
left to the rows' content digests, which a replica checks too.)

``walk`` lists a local folder's files the way a ``text_dir`` reads them: each
real file once, symlinked folders followed once, and a problem, not a silent
skip, for a link that loops, dangles or leads to a file read already, a name
that is not UTF-8, or something that is not a regular file.
"""

from __future__ import annotations

import datetime as dt
import heapq
import io
import json
import lzma
import os
import re
import stat
from typing import Any, BinaryIO, Callable, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from ..config import ConfigError
from .s3_retries import RetriesExhausted
from .storage import open_input

#: Leading bytes of each compression we read, and the codec that reads it.
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
#: Their usual suffixes: a text_dir document's id drops them (``a.txt.gz`` is ``a``); reading goes by the magic bytes.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
#: What a stream raises when its file stops decoding midway (a compressed file cut short or corrupt).
READ_ERRORS = (OSError, EOFError, lzma.LZMAError)
_BUFFER = 1 << 20
HEAD = 1 << 16  # what ``sniff`` looks at


# -- what the listing saw ----------------------------------------------------------


class Stamp(NamedTuple):
    """A file's size and modification time at the scan's listing."""

    size: int
    mtime_ns: int | None

    def __str__(self) -> str:
        if self.mtime_ns is None:
            return f"{self.size} bytes"
        return f"{self.size} bytes, modified {dt.datetime.fromtimestamp(self.mtime_ns / 1e9, dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f} UTC"


def stamps(fs: pafs.FileSystem, paths: list[str]) -> list[Stamp | None]:
    """Each file's ``Stamp`` (None: not there any more), in one listing call."""
    return [Stamp(i.size, i.mtime_ns) if i.type == pafs.FileType.File else None for i in fs.get_file_info(paths)] if paths else []


# -- compression ---------------------------------------------------------------


def compression(fs: pafs.FileSystem, path: str) -> str | None:
    """The file's compression, from its first bytes; None for a plain file."""
    with fs.open_input_stream(path, compression=None) as f:
        return _codec(f.read(6))


def _codec(head: bytes) -> str | None:
    return next((codec for magic, codec in MAGIC.items() if head.startswith(magic)), None)


def open_stream(fs: pafs.FileSystem, path: str, codec: str | None = None) -> BinaryIO:
    """The file's (decompressed) bytes for one sequential pass, buffered: lines, ``peek`` and ``read``."""
    codec = codec or compression(fs, path)
    if codec is None:
        return open_input(fs, path)
    raw = fs.open_input_file(path)
    inner = lzma.LZMAFile(raw) if codec == "xz" else pa.CompressedInputStream(raw, codec)
    return io.BufferedReader(inner, buffer_size=_BUFFER)


def decompress(data: bytes) -> bytes:
    """A whole (small) file's bytes, decompressed when they are compressed: a text_dir document, a MaskBench file."""
    codec = _codec(data[:6])
    if codec is None:
        return data
    if codec == "xz":
        return lzma.decompress(data)
    with pa.CompressedInputStream(pa.BufferReader(data), codec) as f:
        return f.read()


class _Forward:
    """A compressed file's decompressed bytes with ``seek``: forward by reading and dropping, backward by reopening."""

    def __init__(self, reopen: Callable[[], BinaryIO]):
        self._reopen = reopen
        self._f = reopen()
        self._pos = 0

    def seek(self, pos: int) -> None:
        if pos < self._pos:
            self._f.close()
            self._f, self._pos = self._reopen(), 0
        while self._pos < pos:
            skipped = len(self._f.read(min(_BUFFER, pos - self._pos)))
            if not skipped:
                return
            self._pos += skipped

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        self._pos += len(data)
        return data

    def readline(self) -> bytes:
        line = self._f.readline()
        self._pos += len(line)
        return line

    def close(self) -> None:
        self._f.close()


def open_ranged(fs: pafs.FileSystem, path: str) -> Any:
    """``seek``/``read`` over the file's (decompressed) bytes: ranged reads on a plain file, decompress-and-skip on a compressed one."""
    codec = compression(fs, path)
    if codec is None:
        return open_input(fs, path)
    return _Forward(lambda: open_stream(fs, path, codec))


def unreadable(name: str, err: Exception) -> Exception:
    """A file that stops reading midway (a compressed file cut short or corrupt), as one line; an object store still
    failing after its retries is that error (it names the object), not the file's."""
    if isinstance(err, RetriesExhausted):
        return err
    return ConfigError(f"dataset.path {name}: cannot read it to the end ({str(err).splitlines()[0]}); a compressed file may be damaged or cut short")


# -- what a file holds -----------------------------------------------------------


def wide_encoding(head: bytes) -> str | None:
    """'UTF-16' or 'UTF-32' when the bytes are text in one of them (with a byte-order mark, or NULs in every other byte)."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    sample = head[:1024]
    if len(sample) >= 4:
        even, odd = sample[0::2].count(0), sample[1::2].count(0)
        half = len(sample) // 2
        if max(even, odd) > 0.6 * half and min(even, odd) < 0.1 * half:
            return "UTF-16"
    return None


def sniff(head: bytes, name: str, fmt: str) -> None:
    """Stop at a jsonl or csv file that is something else, saying what it is and what to set."""
    if head.startswith(b"PAR1"):
        raise ConfigError(f"dataset.path {name} is a Parquet file, not {fmt}: set dataset.format=parquet")
    wide = wide_encoding(head)
    if wide:
        raise ConfigError(
            f"dataset.path {name} is {wide} text (as PowerShell's > writes it), not UTF-8: save it as UTF-8 "
            f"(PowerShell: Get-Content {name} | Set-Content -Encoding utf8 out.{fmt}; or iconv -f {wide} -t UTF-8)"
        )
    if b"\x00" in head:
        raise ConfigError(
            f"dataset.path {name} is not a text file (a NUL byte at offset {head.index(0)}); "
            f"dataset.format={fmt} reads UTF-8 text: check dataset.path and dataset.format"
        )
    if b"\n" not in head and sum(1 for part in head.split(b"\r") if part.strip()) > 1:
        raise ConfigError(
            f"dataset.path {name} ends its lines with a lone CR (old Mac line ends): convert them to LF, e.g. tr '\\r' '\\n' < {name} > fixed.{fmt}"
        )
    lines = head.decode("utf-8-sig", "replace").split("\n")
    n = next((n for n, line in enumerate(lines) if line.strip()), None)
    if n is None:
        return
    first, whole = lines[n].strip(), n < len(lines) - 1 or len(head) < HEAD  # whole: the line ends within the head
    if fmt == "jsonl" and not whole and re.match(r"\[\s*\{", first):
        raise _json_array(name)
    if whole:
        (_sniff_jsonl if fmt == "jsonl" else _sniff_csv)(first, name)


def _json_array(name: str) -> ConfigError:
    return ConfigError(
        f"dataset.path {name} holds a JSON array of objects, not JSON Lines (one object per line): convert it, e.g. jq -c '.[]' {name} > rows.jsonl"
    )


def _sniff_jsonl(first: str, name: str) -> None:
    """The first line of a file read as JSON Lines: a JSON array, pretty-printed JSON or a CSV header are whole-file errors."""
    try:
        value = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        value = None
    else:
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            raise _json_array(name)
        return
    if first in ("{", "[") or (first[0] in "{[" and first[-1] in "{[,"):
        raise ConfigError(
            f"dataset.path {name} holds pretty-printed JSON (a value spread over lines), not JSON Lines "
            f"(one object per line): convert it, e.g. jq -c '{'.[]' if first[0] == '[' else '.'}' {name} > rows.jsonl"
        )
    if first[0] not in '{["' and ("," in first or "\t" in first):
        raise ConfigError(f"dataset.path {name} looks like CSV (its first line is {first[:80]!r}), not JSON Lines: set dataset.format=csv")


def _sniff_csv(first: str, name: str) -> None:
    if first.startswith("{"):
        try:
            value = json.loads(first)
        except (json.JSONDecodeError, RecursionError):
            return
        if isinstance(value, dict):
            raise ConfigError(f"dataset.path {name} holds JSON Lines (its first line is a JSON object), not CSV: set dataset.format=jsonl")


# -- a folder's files ------------------------------------------------------------


_REPEATED = "; skipped, so that nothing is read twice"


class Listing(NamedTuple):
    """A folder's files as names below it, sorted; ``problems`` holds the names that are rejects, with why, and
    ``repeats`` those of them that are a second route to a file or folder read already."""

    files: list[str]
    problems: dict[str, str]
    repeats: set[str]


def walk(root: str) -> Listing:
    """Every file below a local ``root`` (hidden names aside), each real file and folder once.

    A real path wins over a link to the same file, and among links the first
    name in sorted order wins: every later route to it is a problem naming the
    first, and so is a folder link that leads back to a folder already read
    (``loop -> .``), a dangling link, a name that is not UTF-8 and anything
    that is not a regular file (a named pipe would block its reader)."""
    files: dict[str, str | None] = {}  # name -> None, or why it is a reject
    read: dict[tuple[int, int], str] = {}  # (device, inode) -> the name that reads it
    seen_dirs = {_identity(os.stat(root))}
    linked: list[tuple[str, str]] = []  # a heap of (name below root, path) reached through a link, followed after the real tree
    _walk_real(root, "", files, read, seen_dirs, linked)
    while linked:
        _follow(*heapq.heappop(linked), files, read, seen_dirs, linked)
    problems = {name: why for name, why in files.items() if why}
    return Listing(sorted(files), problems, {name for name, why in problems.items() if why.endswith(_REPEATED)})


def _walk_real(path: str, prefix: str, files: dict, read: dict, seen_dirs: set, linked: list) -> None:
    with os.scandir(path) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            name = f"{prefix}{entry.name}"
            if entry.is_symlink():
                heapq.heappush(linked, (name, entry.path))
            elif entry.is_dir(follow_symlinks=False):
                seen_dirs.add(_identity(entry.stat(follow_symlinks=False)))
                _walk_real(entry.path, f"{name}/", files, read, seen_dirs, linked)
            else:
                _add_file(name, entry.stat(follow_symlinks=False), files, read)


def _follow(name: str, path: str, files: dict, read: dict, seen_dirs: set, linked: list) -> None:
    """A path reached through a symlink (the link itself, or something inside a linked folder)."""
    via = f" (-> {os.readlink(path)})" if os.path.islink(path) else ""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        files[name] = f"{name}{via}: a dangling symlink, its target does not exist"
        return
    except OSError as err:  # ELOOP: a link that leads to itself
        files[name] = f"{name}{via}: a symlink that cannot be followed ({err.strerror})"
        return
    if not stat.S_ISDIR(info.st_mode):
        _add_file(name, info, files, read, via)
    elif _identity(info) in seen_dirs:
        files[name] = f"{name}{via}: a link to a folder that is read already (a loop){_REPEATED}"
    else:
        seen_dirs.add(_identity(info))
        with os.scandir(path) as entries:
            for entry in entries:
                if not entry.name.startswith("."):
                    heapq.heappush(linked, (f"{name}/{entry.name}", entry.path))


def _add_file(name: str, info: os.stat_result, files: dict, read: dict, via: str = "") -> None:
    if not _utf8(name):
        files[name] = f"{name.encode('utf-8', 'surrogateescape')!r}: the file name is not valid UTF-8; rename it"
    elif not stat.S_ISREG(info.st_mode):
        files[name] = f"{name}{via}: not a regular file ({_kind(info.st_mode)})"
    elif _identity(info) in read:
        files[name] = f"{name}{via}: the same file as {read[_identity(info)]}, which is read already{_REPEATED}"
    else:
        read[_identity(info)] = name
        files[name] = None


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(mode: int) -> str:
    return next(
        (
            what
            for test, what in (
                (stat.S_ISFIFO, "a named pipe"),
                (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"),
            )
            if test(mode)
        ),
        "not a file",
    )


def special_file(path: str) -> str | None:
    """What a local path is when it is neither a regular file nor a folder (a pipe, ``/dev/stdin`` on a terminal), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)
