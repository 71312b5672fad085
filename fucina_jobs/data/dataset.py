"""Dataset readers: every input row comes back, readable or not, and each knows where it lives.

A row that cannot be used (bad JSON, invalid UTF-8, a lone surrogate, a
binary file, a missing text field, a symlink loop in a text_dir, an encrypted
or damaged PDF) is returned with its problem attached, so the sink turns it
into a reject instead of losing it. Whole-file problems (a missing file, a
directory where a file belongs, a CSV quote that never closes, a file of the
wrong format or encoding) are errors that name the file and say what to set;
``dataset_files.py`` opens (and decompresses) the files and sniffs them, and
``documents.py`` reads a ``documents`` dataset's PDF, Word and HTML files as text.

The driver never holds the rows. ``scan`` streams the dataset once and keeps
an index of about 80 bytes a row, whatever the rows' size: the row's id, its
content digest (what "the same row" means across runs, so an edited row is
decoded again; a ``documents`` file's is of its bytes) and its ``Loc``: file,
byte range (jsonl, csv) or row number (parquet), line and position. The driver
ships shards as ``Slice``s of that index, and each replica reads its own rows
back with ``read_slice``, which checks each against the id and digest the scan
found there: a file replaced or moved during the run raises ``DatasetChanged``
rather than decode a row the plan does not hold. The scan hashes the bytes it
reads: the manifest's dataset hash. A ``documents`` file is parsed once, by
the replica that decodes it: the scan hashes its bytes and parses nothing (a
scanned page's OCR takes seconds), and the replica parses the bytes it hashes,
so the check proves it parsed the file the scan saw. A jsonl, csv or parquet
file's ``Stamp`` (size, modification time) is taken before the scan reads it:
one that changed by the end of its read is an error naming it, and a replica
refuses one that is shorter now (``dataset_files.py``), so an object cut short
or replaced between the listing and a read is never read as a file of fewer rows.
``dataset.path`` is a local path or a ``pyarrow.fs`` URI (``storage.py``):
every read goes through the filesystem, and a replica's byte ranges are
ranged reads, so an ``s3://`` dataset is never copied whole.
Duplicate ids are found by sorting the index's id column and comparing
neighbours: about 40 MB for a million ids, never the rows.
"""

from __future__ import annotations

import csv
import fnmatch
import glob
import hashlib
import io
import json
import os
import re
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, NamedTuple, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..config import ConfigError, DatasetConfig
from .dataset_files import (
    COMPRESSED_SUFFIXES,
    HEAD,
    READ_ERRORS,
    Stamp,
    decompress,
    open_ranged,
    open_stream,
    sniff,
    special_file,
    stamps,
    unreadable,
    walk,
    wide_encoding,
)
from .documents import Layout, Unreadable, is_document, read as read_document, unread
from .s3_retries import RetriesExhausted
from .storage import is_local, list_files, open_input, read_bytes, resolve, resolve_input


class DatasetChanged(RuntimeError):
    """A replica read back a row that is not the one the scan indexed there (or its file is gone): the dataset changed under the run."""


@dataclass(frozen=True)
class Row:
    id: str
    index: int  # position in the input, for messages
    fields: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why this row cannot be decoded
    _: KW_ONLY
    source_digest: str | None = None  # a documents file's row: its file's bytes, hashed, which the scan knows unparsed
    layout: Layout | None = field(default=None, compare=False, repr=False)  # a PDF's row: where its text is on its pages

    @property
    def digest(self) -> str:
        """The row's content (every field, or its problem), hashed, or its file's bytes (``source_digest``): what "the
        same row" means across runs."""
        if self.source_digest is not None:
            return self.source_digest
        content = {str(k): v for k, v in self.fields.items()} if self.fields else {"problem": self.problem}
        return _hex(hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()))


def _hex(hashed: Any) -> str:
    """A sha256 as rows' digests are: its first 16 hex digits."""
    return hashed.hexdigest()[:16]


class Unparsed(NamedTuple):
    """A documents file as the scan indexes it: its row's fields by name (``documents.unread``, values empty) and the
    digest of its bytes. Its parse (OCR: seconds a page) is the replica's, which decodes it."""

    fields: dict[str, Any]
    digest: str


class Parsed(NamedTuple):
    """A documents file's row as parsed from its bytes, with their digest: the scan's ``Unparsed`` one for the same file."""

    item: Item
    digest: str
    layout: Layout | None = None  # a PDF's: where its text is on its pages, for its values' boxes


#: What a reader yields per row: its fields, a problem with no fields, or fields it could read plus a problem; for a
#: documents file, whose row's digest is of its bytes, ``Unparsed`` (the scan) or ``Parsed``.
Item = Union[dict[str, Any], str, tuple[dict[str, Any], str], Unparsed, Parsed]
#: Where a reader hands the bytes it read, for the dataset's hash (None: nobody asks).
Seen = Union[Callable[[bytes], Any], None]
#: A format's reader of one file: each row's byte range or row number (start, end), line and item.
Reader = Callable[[pafs.FileSystem, str, str, DatasetConfig, Seen], Iterator[tuple[int, int, int, Item]]]


class Loc(NamedTuple):
    """Where a row lives: ``file`` indexes ``Slice.files``; ``start``/``end`` are bytes (jsonl, csv) or the row number (parquet)."""

    file: int
    start: int
    end: int
    line: int  # the file's line (jsonl, csv) or row number from 1 (parquet), for messages and id-less rows' names
    index: int  # the row's position in the dataset


@dataclass
class Slice:
    """Rows a replica reads for itself: small to ship (their locations, ids and digests), whatever the rows' size."""

    fs: pafs.FileSystem  # where the files are (local, or an object store)
    root: str  # the resolved dataset.path; a glob's leading folders, or a document's folder (one-file-a-row ids are paths below it)
    files: list[str]
    table: pa.Table  # Loc's columns (``file`` indexes ``files``), then id and digest: what the scan found there
    _: KW_ONLY
    problems: dict[str, str] = field(default_factory=dict)  # text_dir files that are rejects whatever they hold (a loop, a dangling link)
    stamps: dict[str, Stamp] = field(default_factory=dict)  # jsonl, csv, parquet files as the scan listed them

    @property
    def locs(self) -> list[Loc]:
        return [Loc(*values) for values in zip(*(self.table.column(name).to_pylist() for name in Loc._fields))]


@dataclass
class RowIndex:
    """The dataset, scanned: ids, digests and locations, in input order, with no row content."""

    fs: pafs.FileSystem
    root: str
    files: list[str]
    table: pa.Table  # id, digest, file, start, end, line, index
    _: KW_ONLY
    first_usable: Row | None  # the template is checked against it
    hash: str = ""  # sha256 of the bytes the scan parsed: the manifest's record of what was read
    problems: dict[str, str] = field(default_factory=dict)  # text_dir files that are rejects whatever they hold
    stamps: dict[str, Stamp] = field(default_factory=dict)  # jsonl, csv, parquet files as the listing found them

    def __len__(self) -> int:
        return self.table.num_rows

    def slice(self, table: pa.Table) -> Slice:
        """A ``Slice`` of the rows of ``table`` (a subset of this index), naming only the files they use."""
        used = pc.unique(table.column("file")).sort()
        locs = table.select([*Loc._fields, "id", "digest"]).set_column(0, "file", pc.index_in(table.column("file"), value_set=used))
        files = [self.files[f] for f in used.to_pylist()]
        problems = {f: self.problems[f] for f in files if f in self.problems}
        stamps = {f: self.stamps[f] for f in files if f in self.stamps}
        return Slice(self.fs, self.root, files, locs.combine_chunks(), problems=problems, stamps=stamps)


INDEX_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("digest", pa.string()),
        ("file", pa.int32()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("line", pa.int64()),
        ("index", pa.int64()),
    ]
)
_BATCH = 65_536
#: Deeper JSON is a reject, not a RecursionError (serde_json's default limit).
MAX_DEPTH = 128


def scan(cfg: DatasetConfig, base: Path) -> RowIndex:
    """Stream the dataset once into a ``RowIndex``; duplicate ids are an error naming both rows."""
    fs, root = _resolve(cfg, base)
    root, files, problems = _files(cfg, fs, root)
    listed = _listed(cfg, fs, files)
    batches, pending, first_usable = [], [], None
    digest = hashlib.sha256()
    for loc, row in _located(cfg, fs, root, files, problems, digest.update, listed, _SCANNERS[cfg.format]):
        if first_usable is None and row.problem is None:
            first_usable = row
        pending.append((row.id, row.digest, *loc))
        if len(pending) == _BATCH:
            batches.append(_batch(pending))
            pending = []
    batches.append(_batch(pending))
    table = pa.Table.from_batches(batches, INDEX_SCHEMA)
    _check_unique(table, cfg, root, files)
    return RowIndex(fs, root, files, table, first_usable=first_usable, hash=digest.hexdigest(), problems=problems, stamps=listed)


def read_rows(cfg: DatasetConfig, base: Path) -> list[Row]:
    """Every row, in memory: for small datasets and tests; jobs use ``scan`` and ``read_slice``."""
    fs, root = _resolve(cfg, base)
    root, files, problems = _files(cfg, fs, root)
    located = list(_located(cfg, fs, root, files, problems, None, _listed(cfg, fs, files), _READERS[cfg.format]))
    rows = [row for _, row in located]
    table = pa.table(
        {
            "id": [r.id for r in rows],
            "index": [r.index for r in rows],
            "file": [loc.file for loc, _ in located],
            "line": [loc.line for loc, _ in located],
        }
    )
    _check_unique(table, cfg, root, files)
    return rows


def read_slice(cfg: DatasetConfig, piece: Slice) -> list[Row]:
    """The rows of a slice, read from their files and checked as ``scan`` checked them.

    Each must be the row the scan found there, by id and content digest; a
    file replaced, edited or moved since the scan raises ``DatasetChanged``, so
    a shard never decodes a row its plan does not hold."""
    where = [_where(cfg, piece.root, file) for file in piece.files]
    names = [_nameless(cfg, piece.root, file) for file in piece.files]
    try:
        rows = [_checked(cfg, where[loc.file], names[loc.file].format(line=loc.line), loc.index, item) for loc, item in _items_at(cfg, piece)]
    except FileNotFoundError as err:
        raise DatasetChanged(
            f"a file of dataset.path {piece.root} is gone, moved or deleted during the run ({str(err).splitlines()[0]}); "
            "put it back and rerun the same command, or rerun to decode the dataset as it is now"
        ) from None
    expected = zip(piece.table.column("id").to_pylist(), piece.table.column("digest").to_pylist())
    for row, loc, (row_id, digest) in zip(rows, piece.locs, expected):
        if (row.id, row.digest) != (row_id, digest):
            now = (
                "its content is not what the scan read"
                if row.id == row_id
                else f"now holds row {row.id!r}"
                if row.problem is None
                else f"now holds something else ({row.problem})"
            )
            raise DatasetChanged(
                f"dataset.path changed during the run: {_place(cfg, piece, loc)} held row {row_id!r} at the scan and "
                f"{now}; rerun the same command to decode the dataset as it is now"
            )
    return rows


def failed_rows(cfg: DatasetConfig, piece: Slice) -> list[Row]:
    """A failed shard's rows, for its rejects: read back, or named by the plan alone when the dataset no longer reads
    back, or holds documents: the driver parses none (their OCR is the replicas', and a file that failed them may fail it)."""
    if cfg.format != "documents":
        try:
            return read_slice(cfg, piece)
        except (DatasetChanged, *READ_ERRORS):
            pass
    return [Row(row_id, loc.index) for row_id, loc in zip(piece.table.column("id").to_pylist(), piece.locs)]


def check_output_outside(cfg: DatasetConfig, output_dir: str, base: Path) -> None:
    """Refuse an output.dir that the scan would read back as rows: inside a dataset folder, or reached by its glob."""
    fs, root = _resolve(cfg, base)
    out_fs, out = resolve(output_dir, base)
    if type(fs) is not type(out_fs):
        return
    real = os.path.realpath if is_local(fs) else (lambda path: path)
    if fs.get_file_info(root).type == pafs.FileType.Directory:
        if real(out) == real(root) or real(out).startswith(real(root).rstrip("/") + "/"):
            raise ConfigError(
                f"output.dir {out} is inside dataset.path {root}: each run would read its own outputs (logs, manifest, "
                f"Parquet shards) back as rows; choose an output.dir outside {root}{_log_only(fs, out)}"
            )
        return
    pattern = _glob_pattern(fs, root)
    ours = ["cli.log", "logs/replica-0.log", "version=0/manifest.json", "version=0/records/run=0/shard-0.parquet"]
    if pattern and any(_glob_matches(pattern, f"{path}/{name}") for path in {out, real(out)} for name in ours):
        raise ConfigError(
            f"output.dir {out} is reached by the glob dataset.path {cfg.path}: each run would read its own outputs "
            "back as rows; choose an output.dir the glob does not match"
        )


def _resolve(cfg: DatasetConfig, base: Path) -> tuple[pafs.FileSystem, str]:
    """dataset.path's filesystem and path; ``/dev/stdin`` redirected from a file is that file (a replica's own stdin is not)."""
    fs, root = resolve_input(cfg.path, base)
    if is_local(fs) and root.startswith(("/dev/", "/proc/")) and os.path.isfile(root):
        return fs, os.path.realpath(root)
    return fs, root


def _log_only(fs: pafs.FileSystem, out: str) -> str:
    """A hint to delete an output.dir that holds nothing but the log the command line opened before the refusal."""
    return (
        f", and delete {out}, which holds only this command's cli.log" if [PurePosixPath(p).name for p in list_files(fs, out)] == ["cli.log"] else ""
    )


def _batch(pending: list[tuple]) -> pa.RecordBatch:
    """Index rows (id, digest, *Loc) as one Arrow batch: the Python tuples live only until here."""
    columns = list(zip(*pending)) or [[] for _ in INDEX_SCHEMA]
    return pa.RecordBatch.from_arrays([pa.array(col, f.type) for col, f in zip(columns, INDEX_SCHEMA)], schema=INDEX_SCHEMA)


def _files(cfg: DatasetConfig, fs: pafs.FileSystem, root: str) -> tuple[str, list[str], dict[str, str]]:
    """The dataset's root and files: one path, a glob (``data/*.jsonl``), a parquet folder, or a text_dir, documents or
    maskbench folder's documents; with the text_dir files that are rejects whatever they hold (a loop, a dangling
    link), and why.

    A path that exists is that path, brackets and all; only a path that does not is a glob. A one-file-a-row
    format's files are named below its root, which its ids are paths in: the folder, a glob's leading folders,
    or one document's own folder."""
    kind = fs.get_file_info(root).type
    if kind == pafs.FileType.NotFound:
        pattern = _glob_pattern(fs, root)
        if pattern is None:
            raise ConfigError(f"dataset.path {root} does not exist")
        matches = _glob(fs, pattern)
        if not matches:
            raise ConfigError(f"dataset.path {cfg.path} matches no file")
        if cfg.format in _ONE_A_FILE:
            folder = _fixed_prefix(root.rstrip("/"))
            return folder, [_relative(folder, match) for match in matches], {}
        return root, _not_documents(cfg, matches), {}
    special = special_file(root) if is_local(fs) else None
    if special:
        raise ConfigError(
            f"dataset.path {root} is {special}, not a file: replicas read their rows back from the file by position, "
            "so a stream cannot be read; save it to a file first (e.g. cat > rows.jsonl) and give that file"
        )
    is_dir = kind == pafs.FileType.Directory
    if cfg.format == "documents" and not is_dir:
        return str(PurePosixPath(root).parent), [PurePosixPath(root).name], {}
    if cfg.format in _ONE_A_FILE:
        if not is_dir:
            what = "a directory" if cfg.format == "text_dir" else "a directory of MaskBench .json files"
            raise ConfigError(f"dataset.format={cfg.format} needs {what}, but {root} is a file")
        if is_local(fs):
            listing = walk(root)
            files, problems = listing.files, listing.problems
        else:
            files, problems = [name for name in _below(fs, root) if not any(part.startswith(".") for part in name.split("/"))], {}
        if cfg.format == "maskbench":
            files = [name for name in files if "/" not in name and name.endswith(".json")]
        return root, files, {name: problems[name] for name in files if name in problems}
    if is_dir and cfg.format in ("jsonl", "csv"):
        raise ConfigError(
            f"dataset.path {root} is a directory, but dataset.format={cfg.format} reads one file; "
            f"give the file, a glob of files, or {_FOLDER_OF_DOCUMENTS}"
        )
    if is_dir:
        return root, _parquet_files(fs, root), {}
    return root, _not_documents(cfg, [root]), {}


#: What to set for a folder of documents, in messages.
_FOLDER_OF_DOCUMENTS = "dataset.format=documents for a folder of documents (PDF, Word, HTML or text files, one row each)"


def _not_documents(cfg: DatasetConfig, files: list[str]) -> list[str]:
    """A jsonl, csv or parquet dataset's files, refusing a PDF, Word or HTML file: a document is a row, not rows."""
    document = next((file for file in files if is_document(file)), None)
    if document is not None:
        raise ConfigError(f"dataset.path {_shown(cfg, document)} is a document, not {cfg.format}: set dataset.format=documents (one row per file)")
    return files


def _below(fs: pafs.FileSystem, root: str) -> list[str]:
    return [_relative(root, path) for path in list_files(fs, root)]


def _relative(folder: str, path: str) -> str:
    """``path`` named below ``folder`` (as it is when the folder holds it)."""
    prefix = folder.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


def _parquet_files(fs: pafs.FileSystem, root: str) -> list[str]:
    """A parquet folder's ``.parquet`` files, each real file once, without hidden or ``_`` names (Arrow's own rule)."""
    if is_local(fs):
        listing = walk(root)
        names = [name for name in listing.files if name not in listing.repeats]
        bad = next((listing.problems[name] for name in names if name in listing.problems and name.endswith(".parquet")), None)
        if bad:
            raise ConfigError(f"dataset.path {root}: {bad}")
    else:
        names = _below(fs, root)
    found = [
        f"{root.rstrip('/')}/{name}"
        for name in names
        if name.endswith(".parquet") and not any(part.startswith(("_", ".")) for part in name.split("/"))
    ]
    if not found:
        holds = f"it holds {len(names)} files, e.g. {', '.join(names[:3])}" if names else "it is empty"
        raise ConfigError(
            f"dataset.path {root} is a folder with no .parquet files ({holds}), but dataset.format=parquet; "
            "give a glob of the files and their format (dataset.path='<folder>/*.jsonl' dataset.format=jsonl), "
            f"or {_FOLDER_OF_DOCUMENTS}"
        )
    return found


def _glob_pattern(fs: pafs.FileSystem, root: str) -> str | None:
    """``root`` as a glob, its leading folders that exist taken literally (a ``[`` in the working directory is no
    character class); None when it holds no wildcard."""
    if not any(ch in root for ch in "*?["):  # the path, not the location: a URI's query has a '?'
        return None
    if not is_local(fs):
        return root
    parts = root.split("/")
    for n in range(len(parts) - 1, 0, -1):
        literal = "/".join(parts[:n]) or "/"
        if os.path.isdir(literal):
            return "/".join([glob.escape(literal).rstrip("/"), *parts[n:]])
    return root


def _glob(fs: pafs.FileSystem, pattern: str) -> list[str]:
    """Files matching a glob: the local ``glob`` (``**`` recurses); on an object store, a listing below the
    pattern's fixed prefix, matched with ``fnmatch`` (``*`` there crosses ``/``)."""
    if is_local(fs):
        return sorted(path for path in glob.glob(pattern, recursive=True) if os.path.isfile(path))
    return [path for path in list_files(fs, _fixed_prefix(pattern)) if fnmatch.fnmatchcase(path, pattern)]


def _fixed_prefix(pattern: str) -> str:
    """A glob's leading folders without wildcards."""
    parts = pattern.split("/")
    return "/".join(parts[: next((i for i, part in enumerate(parts) if any(ch in part for ch in "*?[")), len(parts))])


def _glob_matches(pattern: str, path: str) -> bool:
    """Whether ``glob.glob(pattern, recursive=True)`` would list ``path``: ``*`` stays within a name, ``**`` spans folders."""

    def match(parts: list[str], names: list[str]) -> bool:
        if not parts:
            return not names
        if parts[0] == "**":
            return any(match(parts[1:], names[i:]) for i in range(len(names) + 1))
        return bool(names) and fnmatch.fnmatchcase(names[0], parts[0]) and match(parts[1:], names[1:])

    return match(pattern.split("/"), path.split("/"))


def _where(cfg: DatasetConfig, root: str, file: str) -> PurePosixPath:
    """The path a row's messages name: its file, or the folder for one-file-a-row formats."""
    return PurePosixPath(root if cfg.format in _ONE_A_FILE else file)


def _nameless(cfg: DatasetConfig, root: str, file: str) -> str:
    """How a file's rows without an id are named (``.format(line=...)``): the document's id, or the file (below the
    dataset's folder or glob) and the line."""
    if cfg.format in _ONE_A_FILE:
        return _document_id(file).replace("{", "{{").replace("}", "}}")
    below = _fixed_prefix(root.rstrip("/")).rstrip("/") + "/"
    name = file[len(below) :] if file.startswith(below) and file != root else PurePosixPath(file).name
    return name.replace("{", "{{").replace("}", "}}") + ":{line}"


def _place(cfg: DatasetConfig, piece: Slice, loc: Loc) -> str:
    """Where a row is, for a message: its file and line (jsonl, csv), row (parquet), or document."""
    file = piece.files[loc.file]
    if cfg.format in _ONE_A_FILE:
        return f"{PurePosixPath(piece.root).name}/{file}"
    return f"{PurePosixPath(file).name} {'row' if cfg.format == 'parquet' else 'line'} {loc.line}"


def _document_id(file: str) -> str:
    """A text_dir or documents file's id: its path below the folder without its suffix (nor a compression suffix before it)."""
    path = PurePosixPath(file)
    if path.suffix.lower() in COMPRESSED_SUFFIXES:
        path = path.with_suffix("")
    return path.with_suffix("").as_posix().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")  # a name not UTF-8: caf\xe9


def _located(
    cfg: DatasetConfig,
    fs: pafs.FileSystem,
    root: str,
    files: list[str],
    problems: dict[str, str],
    seen: Seen,
    listed: dict[str, Stamp],
    reader: Reader,
) -> Iterator[tuple[Loc, Row]]:
    index = 0
    for file_no, file in enumerate(files):
        where, nameless = _where(cfg, root, file), _nameless(cfg, root, file)
        items = [(0, 0, 0, _problem_item(cfg, file, problems[file]))] if file in problems else reader(fs, root, file, cfg, seen)
        for start, end, line, item in items:
            if cfg.limit is not None and index >= cfg.limit:
                return
            yield Loc(file_no, start, end, line, index), _checked(cfg, where, nameless.format(line=line), index, item)
            index += 1
        if file in listed:
            _check_read_whole(cfg, fs, file, listed[file])


#: The formats whose files hold many rows each, read by byte range or row number: their files are stamped at the listing.
_STAMPED = ("jsonl", "csv", "parquet")


def _listed(cfg: DatasetConfig, fs: pafs.FileSystem, files: list[str]) -> dict[str, Stamp]:
    """Each many-row file's ``Stamp``, taken before any of it is read."""
    if cfg.format not in _STAMPED:
        return {}
    return {file: stamp for file, stamp in zip(files, stamps(fs, files)) if stamp is not None}


def _check_read_whole(cfg: DatasetConfig, fs: pafs.FileSystem, file: str, listed: Stamp) -> None:
    """A file the scan just read must be as the listing found it: one replaced, cut short or grown meanwhile is an
    error naming it, rather than an index of rows that are not the file's (fewer, or two versions' mixed)."""
    now = (stamps(fs, [file]) or [None])[0]
    if now != listed:
        raise ConfigError(
            f"dataset.path {_shown(cfg, file)} changed while the scan read it: {listed} when listed, "
            f"{now or 'gone'} after the read; rerun once whatever writes it has finished"
        )


def _shown(cfg: DatasetConfig, file: str) -> str:
    """A dataset file as the user finds it: a local path, or the URI's scheme and path."""
    return f"{cfg.path.split('://', 1)[0]}://{file}" if "://" in cfg.path else file


def _problem_item(cfg: DatasetConfig, file: str, problem: str) -> Item:
    return {cfg.id_field: _document_id(file)}, problem


def _items_at(cfg: DatasetConfig, piece: Slice) -> Iterator[tuple[Loc, Item]]:
    """Read each located row's item back, opening each file once."""
    locs = piece.locs
    if cfg.format == "parquet":
        by_file: dict[int, list[Loc]] = {}
        for loc in locs:
            by_file.setdefault(loc.file, []).append(loc)
        for f, locs in by_file.items():  # a parquet file cut short has no footer: ArrowInvalid below
            try:
                table = pds.dataset(piece.files[f], format="parquet", filesystem=piece.fs).take(pa.array([loc.start for loc in locs]))
            except (pa.ArrowIndexError, pa.ArrowInvalid) as err:
                raise DatasetChanged(
                    f"dataset.path changed during the run: {piece.files[f]} no longer holds the rows the scan read "
                    f"({str(err).splitlines()[0]}); rerun the same command to decode the dataset as it is now"
                ) from None
            yield from zip(locs, table.to_pylist())
        return
    if cfg.format in _ONE_A_FILE:
        reader = _READERS[cfg.format]
        for loc in locs:
            file = piece.files[loc.file]
            yield (
                loc,
                _problem_item(cfg, file, piece.problems[file])
                if file in piece.problems
                else next(iter(reader(piece.fs, piece.root, file, cfg, None)))[3],
            )
        return
    handles: dict[int, Any] = {}
    names = [PurePosixPath(file).name for file in piece.files]
    try:
        header = {}
        for loc in locs:
            if loc.file not in handles:
                _check_not_shorter(cfg, piece, loc.file)
                handles[loc.file] = open_ranged(piece.fs, piece.files[loc.file])
                if cfg.format == "csv":
                    header[loc.file] = _csv_header(handles[loc.file], piece.files[loc.file])
            f = handles[loc.file]
            f.seek(loc.start)
            raw = f.read(loc.end - loc.start)
            if len(raw) < loc.end - loc.start:  # cut short after the check above: the row's bytes end early
                raise _cut_short(cfg, piece.files[loc.file], f"line {loc.line} ends at byte {loc.start + len(raw)}, not {loc.end}")
            yield loc, _jsonl_item(raw, names[loc.file], loc.line) if cfg.format == "jsonl" else _csv_record(raw, header[loc.file])
    finally:
        for f in handles.values():
            f.close()


def _check_not_shorter(cfg: DatasetConfig, piece: Slice, f: int) -> None:
    """A replica's jsonl or csv file must be at least as long as the scan listed it: a shorter one (an object cut short, a file
    truncated) holds fewer rows than the plan, and would read as blank lines or none. A longer or rewritten one may
    still hold the scan's rows, which their digests then prove; a file gone is ``read_slice``'s to name."""
    file = piece.files[f]
    listed, now = piece.stamps.get(file), (stamps(piece.fs, [file]) or [None])[0]
    if listed is not None and now is not None and now.size < listed.size:
        raise _cut_short(cfg, file, f"{now}; {listed} at the scan")


def _cut_short(cfg: DatasetConfig, file: str, how: str) -> DatasetChanged:
    return DatasetChanged(
        f"dataset.path changed during the run: {_shown(cfg, file)} is cut short ({how}); rerun the same command to decode the dataset as it is now"
    )


def _jsonl(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, Item]]:
    name, offset = PurePosixPath(file).name, 0
    with open_stream(fs, file) as f:
        try:
            sniff(f.peek(HEAD)[:HEAD], name, "jsonl")
            for line_no, raw in enumerate(f, 1):
                if seen:
                    seen(raw)
                start, offset = offset, offset + len(raw)
                item = _jsonl_item(raw, name, line_no)
                if item is not None:
                    yield start, offset, line_no, item
        except READ_ERRORS as err:
            raise unreadable(name, err) from None


def _jsonl_item(raw: bytes, name: str, line_no: int) -> Item | None:
    """One jsonl line's row, or None for a blank line."""
    try:
        line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as err:
        return f"{name}:{line_no}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
    if not line.strip():
        return None
    too_deep = f"{name}:{line_no}: JSON nested deeper than {MAX_DEPTH} levels"
    if _depth(line) > MAX_DEPTH:
        return too_deep
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        return f"{name}:{line_no}: not valid JSON ({err.msg})"
    except RecursionError:
        return too_deep
    return value if isinstance(value, dict) else f"{name}:{line_no}: expected a JSON object, got {type(value).__name__}"


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _depth(line: str) -> int:
    """How deep a JSON text nests (brackets inside strings aside): cheap, since most lines hold few brackets."""
    if line.count("[") + line.count("{") <= MAX_DEPTH:
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", line)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _parquet(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    try:
        f = fs.open_input_file(file)
        if seen:  # the file's own bytes, through the handle the rows are read from
            for chunk in iter(lambda: f.read(1 << 20), b""):
                seen(chunk)
            f.seek(0)
        batches = pq.ParquetFile(f).iter_batches(batch_size=_BATCH)
        number = 0
        for batch in batches:
            for row in batch.to_pylist():
                yield number, number + 1, number + 1, row
                number += 1
    except RetriesExhausted:  # the store's failure, not the file's: it names the object
        raise
    except (pa.ArrowInvalid, OSError) as err:
        raise ConfigError(f"dataset.path {file} is not a Parquet file ({str(err).splitlines()[0]}); check dataset.format") from None


def _csv(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """Records with their byte ranges; a record may span lines (a quoted newline)."""
    path = PurePosixPath(file)
    ends = {0: 0}  # line number -> byte offset where it ends; only the last record's lines are kept

    def lines() -> Iterator[str]:
        with open_stream(fs, file) as f:
            try:
                sniff(f.peek(HEAD)[:HEAD], path.name, "csv")
                for n, raw in enumerate(f, 1):
                    if seen:
                        seen(raw)
                    ends[n] = ends[n - 1] + len(raw)
                    yield _utf8_line(raw, n, path)
            except READ_ERRORS as err:
                raise unreadable(path.name, err) from None

    reader = csv.DictReader(lines(), strict=True)  # utf-8-sig drops any BOM
    line = 1  # the header
    try:
        for record in reader:
            yield ends[line], ends[reader.line_num], line + 1, record
            for n in range(line, reader.line_num):
                ends.pop(n, None)
            line = reader.line_num
    except csv.Error as err:
        raise ConfigError(
            f"dataset.path {path}: line {line + 1}: malformed CSV ({err}); a quote that never closes "
            'swallows the lines after it: close or escape it ("")'
        ) from None


def _utf8_line(raw: bytes, n: int, path: PurePosixPath) -> str:
    try:
        return raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"dataset.path {path}: line {n}: not valid UTF-8 (byte 0x{raw[err.start]:02x}); save the file as UTF-8") from None


def _csv_header(f: Any, file: str) -> list[str]:
    f.seek(0)
    return next(csv.reader([_utf8_line(f.readline(), 1, PurePosixPath(file))]))


def _csv_record(raw: bytes, header: list[str]) -> dict[str, Any]:
    return next(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline=""), fieldnames=header, strict=True))


def _text_dir(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, Item]]:
    """One row per file, subdirectories included; a row's id is its path below ``root`` without the suffix."""
    yield 0, 0, 0, _text_item(cfg, file, read_bytes(fs, f"{root}/{file}"), seen)


def _text_item(cfg: DatasetConfig, file: str, raw: bytes, seen: Seen) -> Item:
    """A text file's row from its bytes as stored (compressed or not), or its reject: not UTF-8, binary."""
    where = PurePosixPath(file)
    row_id = _document_id(file)
    try:
        data = decompress(raw)
    except READ_ERRORS as err:
        return {cfg.id_field: row_id}, f"{where}: cannot decompress it ({str(err).splitlines()[0]})"
    if seen:
        seen(data)
    wide = wide_encoding(data[:1024])
    if wide:
        return {cfg.id_field: row_id}, f"{where}: {wide} text, not UTF-8; save it as UTF-8"
    document = "; dataset.format=documents reads it" if is_document(file) else ""  # a PDF in a text_dir
    if b"\x00" in data:
        return {cfg.id_field: row_id}, f"{where}: a binary file, not text (it holds NUL bytes){document}"
    try:
        return {cfg.id_field: row_id, cfg.text_field: data.decode("utf-8-sig")}
    except UnicodeDecodeError as err:
        why = f"byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8"
        return {cfg.id_field: row_id}, f"{where}: a binary file, not text ({why}){document}"


def _documents(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, Item]]:
    """One row per file, as text_dir reads them; a PDF, Word or HTML file's text is ``documents.read``'s, or its reject
    that reason (a PDF's row also says which pages OCR read: ``ocr_pages``). The file's bytes are read once, into
    memory: hashed for the row's digest, then parsed, so the digest the scan found (``_unparsed``) is of what was parsed."""
    data = read_bytes(fs, f"{root}/{file}")
    if seen:
        seen(data)
    item, layout = _document_item(cfg, file, data)
    yield 0, 0, 0, Parsed(item, _hex(hashlib.sha256(data)), layout)


def _document_item(cfg: DatasetConfig, file: str, data: bytes) -> tuple[Item, Layout | None]:
    if not is_document(file):
        return _text_item(cfg, file, data, None), None
    try:
        document = read_document(io.BytesIO(data), file, cfg.ocr)
    except Unreadable as err:
        return ({cfg.id_field: _document_id(file)}, str(err)), None
    return {cfg.id_field: _document_id(file), cfg.text_field: document.text, **document.fields}, document.layout


def _unparsed(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, Item]]:
    """A documents file as the scan indexes it: its bytes, streamed through the digest (a file of any size in a MB),
    and its row's fields by name. Nothing parses it here: the replica that decodes the row does, once."""
    digest = hashlib.sha256()
    with open_input(fs, f"{root}/{file}") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if seen:
                seen(chunk)
    blank = unread(file)
    yield 0, 0, 0, Unparsed({cfg.id_field: _document_id(file), cfg.text_field: blank.text, **blank.fields}, _hex(digest))


MASKBENCH_PROMPT = "Reply with one JSON value that validates against the JSON schema below, and nothing else.\n\nJSON schema:\n{schema}"


def _maskbench(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig, seen: Seen) -> Iterator[tuple[int, int, int, Item]]:
    """One row per MaskBench file (``schema``, ``tests``, ``meta.features``): generation prompts each schema."""
    path = PurePosixPath(root, file)
    try:
        data = decompress(read_bytes(fs, str(path)))
        if seen:
            seen(data)
        suite = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError, *READ_ERRORS) as err:  # JSON, UTF-8 and decompression errors
        yield 0, 0, 0, f"{path.name}: not valid JSON ({getattr(err, 'msg', None) or type(err).__name__})"
        return
    if not isinstance(suite, dict) or not isinstance(suite.get("schema"), (dict, bool)):
        yield 0, 0, 0, f"{path.name}: not a MaskBench file (no 'schema' object)"
        return
    schema = suite["schema"]
    yield (
        0,
        0,
        0,
        {
            cfg.id_field: path.stem,
            cfg.text_field: MASKBENCH_PROMPT.format(schema=json.dumps(schema, ensure_ascii=False)),
            cfg.schema_field or "schema": schema if isinstance(schema, dict) else json.dumps(schema),
            "features": list((suite.get("meta") or {}).get("features", [])),
        },
    )


_READERS: dict[str, Reader] = {
    "jsonl": _jsonl,
    "parquet": _parquet,
    "csv": _csv,
    "text_dir": _text_dir,
    "documents": _documents,
    "maskbench": _maskbench,
}
#: What the scan reads: each format's reader, but a documents file's bytes alone, which the replica parses.
_SCANNERS: dict[str, Reader] = _READERS | {"documents": _unparsed}
#: The formats that read one row from each file, whose id is the file's path below the dataset's folder.
_ONE_A_FILE = ("text_dir", "documents", "maskbench")


def _checked(cfg: DatasetConfig, path: PurePosixPath, fallback_id: str, index: int, item: Item) -> Row:
    if isinstance(item, Unparsed):  # nothing to check before its parse, the replica's, which checks its digest too
        return Row(item.fields[cfg.id_field], index, item.fields, source_digest=item.digest)
    if isinstance(item, Parsed):
        return replace(_checked(cfg, path, fallback_id, index, item.item), source_digest=item.digest, layout=item.layout)
    if isinstance(item, str):
        return Row(fallback_id, index, problem=item)
    fields, problem = item if isinstance(item, tuple) else (item, None)
    fields = _text_values(fields)
    row_id = fields.get(cfg.id_field)
    where = f"{path.name} row {index}"
    if row_id is None or row_id == "":
        return Row(fallback_id, index, fields, f"{where}: missing id field {cfg.id_field!r} (this reject is named {fallback_id!r})")
    if problem:
        return Row(str(row_id), index, fields, problem)
    if _surrogate(str(row_id)):
        # Arrow and the tokenizer need valid Unicode; the escaped id still names the row.
        escaped = str(row_id).encode("utf-8", "backslashreplace").decode("utf-8")
        return Row(escaped, index, {}, f"{where}: the id {escaped} is not valid Unicode (a lone surrogate, \\ud800-\\udfff)")
    bad = next((k for k, v in fields.items() if _surrogate(k) or _surrogate(v)), None)
    if bad is not None:
        return Row(str(row_id), index, {}, f"{where}: field {bad!r} is not valid Unicode (a lone surrogate, \\ud800-\\udfff)")
    text = fields.get(cfg.text_field)
    if isinstance(text, bytes):
        return Row(str(row_id), index, fields, f"{where}: text field {cfg.text_field!r} holds bytes that are not UTF-8 text")
    if not isinstance(text, str) or not text.strip():
        return Row(str(row_id), index, fields, f"{where}: missing or empty text field {cfg.text_field!r}")
    if cfg.schema_field and not isinstance(fields.get(cfg.schema_field), (dict, str)):
        return Row(str(row_id), index, fields, f"{where}: missing schema field {cfg.schema_field!r}")
    return Row(str(row_id), index, fields)


def _text_values(fields: dict[str, Any]) -> dict[str, Any]:
    """Binary values that hold UTF-8 text (a Parquet string column stored as ``binary``) as strings."""
    if not any(isinstance(v, bytes) for v in fields.values()):
        return fields
    return {k: _utf8_or_bytes(v) if isinstance(v, bytes) else v for k, v in fields.items()}


def _utf8_or_bytes(value: bytes) -> str | bytes:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _surrogate(value: Any) -> bool:
    """Whether a value holds a lone surrogate (``"\\ud800"`` in JSON), which no UTF-8 writer accepts."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_surrogate(k) or _surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_surrogate(v) for v in value)
    return False


def _check_unique(table: pa.Table, cfg: DatasetConfig, root: str, files: list[str]) -> None:
    """Sort the ids and compare neighbours: a few bytes a row (the sorted copy and its order), never the rows."""
    ids = table.column("id")
    if len(ids) < 2:
        return
    ordered = ids.take(pc.sort_indices(ids)).combine_chunks()
    same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
    if not pc.any(same).as_py():
        return
    row_id = ordered[pc.index(same, True).as_py()].as_py()
    both = table.filter(pc.equal(ids, row_id)).slice(0, 2).to_pylist()
    first, second = (row["index"] for row in both)
    name = PurePosixPath(root).name
    nameless = [row["index"] for row in both if _nameless(cfg, root, files[row["file"]]).format(line=row["line"]) == row_id]
    if nameless and cfg.format not in _ONE_A_FILE:
        other = second if nameless[0] == first else first
        raise ConfigError(
            f"{name}: row {nameless[0]} has no id field {cfg.id_field!r}, so its reject would be named {row_id!r}, "
            f"which row {other} has as its id; give row {nameless[0]} an id"
        )
    raise ConfigError(
        f"{name}: rows {first} and {second} share the id {row_id!r} in field {cfg.id_field!r}; "
        "ids must be unique so that every row is accounted for exactly once"
    )
