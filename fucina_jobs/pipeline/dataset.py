"""Dataset readers: every input row comes back, readable or not, and each knows where it lives.

A row that cannot be used (bad JSON, invalid UTF-8, a lone surrogate, a
binary file, a missing text field) is returned with its problem attached, so
the sink turns it into a reject instead of losing it. Whole-file problems (a
missing file, a directory where a file belongs, a CSV quote that never
closes) are errors that name the file and line.

The driver never holds the rows. ``scan`` streams the dataset once and keeps
an index of about 80 bytes a row, whatever the rows' size: the row's id, its
content digest (what "the same row" means across runs, so an edited row is
decoded again) and its ``Loc``: file, byte range (jsonl, csv) or row number
(parquet), line and position. The driver ships shards as ``Slice``s of that
index, and each replica reads its own rows back with ``read_slice``.
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
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, NamedTuple, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .config import ConfigError, DatasetConfig
from .storage import is_local, list_files, open_input, read_bytes, resolve_input


@dataclass(frozen=True)
class Row:
    id: str
    index: int  # position in the input, for messages
    fields: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why this row cannot be decoded

    @property
    def digest(self) -> str:
        """The row's content (every field, or its problem), hashed: what "the same row" means across runs."""
        content = {str(k): v for k, v in self.fields.items()} if self.fields else {"problem": self.problem}
        return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: What a reader yields per row: its fields, a problem with no fields, or fields it could read plus a problem.
Item = Union[dict[str, Any], str, tuple[dict[str, Any], str]]


class Loc(NamedTuple):
    """Where a row lives: ``file`` indexes ``Slice.files``; ``start``/``end`` are bytes (jsonl, csv) or the row number (parquet)."""

    file: int
    start: int
    end: int
    line: int  # the file's line, for messages (jsonl)
    index: int  # the row's position in the dataset


@dataclass
class Slice:
    """Rows a replica reads for itself: small to ship (five integer columns), whatever the rows' size."""

    fs: pafs.FileSystem  # where the files are (local, or an object store)
    root: str  # the resolved dataset.path (text_dir ids are paths below it)
    files: list[str]
    table: pa.Table  # Loc's columns; ``file`` indexes ``files``

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
    first_usable: Row | None  # the template is checked against it

    def __len__(self) -> int:
        return self.table.num_rows

    def slice(self, table: pa.Table) -> Slice:
        """A ``Slice`` of the rows of ``table`` (a subset of this index), naming only the files they use."""
        used = pc.unique(table.column("file")).sort()
        locs = table.select(list(Loc._fields)).set_column(0, "file", pc.index_in(table.column("file"), value_set=used))
        return Slice(self.fs, self.root, [self.files[f] for f in used.to_pylist()], locs.combine_chunks())


INDEX_SCHEMA = pa.schema([("id", pa.string()), ("digest", pa.string()), ("file", pa.int32()), ("start", pa.int64()),
                          ("end", pa.int64()), ("line", pa.int64()), ("index", pa.int64())])
_BATCH = 65_536


def scan(cfg: DatasetConfig, base: Path) -> RowIndex:
    """Stream the dataset once into a ``RowIndex``; duplicate ids are an error naming both rows."""
    fs, root = resolve_input(cfg.path, base)
    files = _files(cfg, fs, root)
    batches, pending, first_usable = [], [], None
    for loc, row in _located(cfg, fs, root, files):
        if first_usable is None and row.problem is None:
            first_usable = row
        pending.append((row.id, row.digest, *loc))
        if len(pending) == _BATCH:
            batches.append(_batch(pending))
            pending = []
    batches.append(_batch(pending))
    table = pa.Table.from_batches(batches, INDEX_SCHEMA)
    _check_unique(table, root, cfg.id_field)
    return RowIndex(fs, root, files, table, first_usable)


def read_rows(cfg: DatasetConfig, base: Path) -> list[Row]:
    """Every row, in memory: for small datasets and tests; jobs use ``scan`` and ``read_slice``."""
    fs, root = resolve_input(cfg.path, base)
    rows = [row for _, row in _located(cfg, fs, root, _files(cfg, fs, root))]
    _check_unique(pa.table({"id": [r.id for r in rows], "index": [r.index for r in rows]}), root, cfg.id_field)
    return rows


def read_slice(cfg: DatasetConfig, piece: Slice) -> list[Row]:
    """The rows of a slice, read from their files, checked as ``scan`` checked them."""
    where = [_where(cfg, piece.root, file) for file in piece.files]
    return [_checked(cfg, where[loc.file], loc.index, item) for loc, item in _items_at(cfg, piece)]


def dataset_hash(cfg: DatasetConfig, index: RowIndex) -> str:
    """sha256 over the dataset's files' bytes, in scan order: the manifest's record of what was read."""
    digest = hashlib.sha256()
    for file in index.files:
        with index.fs.open_input_stream(_path(cfg, index.root, file)) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _batch(pending: list[tuple]) -> pa.RecordBatch:
    """Index rows (id, digest, *Loc) as one Arrow batch: the Python tuples live only until here."""
    columns = list(zip(*pending)) or [[] for _ in INDEX_SCHEMA]
    return pa.RecordBatch.from_arrays([pa.array(col, f.type) for col, f in zip(columns, INDEX_SCHEMA)], schema=INDEX_SCHEMA)


def _files(cfg: DatasetConfig, fs: pafs.FileSystem, root: str) -> list[str]:
    """The dataset's files: one path, a glob (``data/*.jsonl``), a parquet folder, or a text_dir/maskbench folder's documents."""
    if any(ch in root for ch in "*?["):  # the path, not the location: a URI's query has a '?'
        matches = _glob(fs, root)
        if not matches:
            raise ConfigError(f"dataset.path {cfg.path} matches no file")
        return matches
    kind = fs.get_file_info(root).type
    if kind == pafs.FileType.NotFound:
        raise ConfigError(f"dataset.path {root} does not exist")
    is_dir = kind == pafs.FileType.Directory
    if cfg.format in ("text_dir", "maskbench"):
        if not is_dir:
            what = "a directory" if cfg.format == "text_dir" else "a directory of MaskBench .json files"
            raise ConfigError(f"dataset.format={cfg.format} needs {what}, but {root} is a file")
        below = [path[len(root.rstrip("/")) + 1:] for path in list_files(fs, root)]
        if cfg.format == "maskbench":
            return [name for name in below if "/" not in name and name.endswith(".json")]
        return [name for name in below if not any(part.startswith(".") for part in name.split("/"))]
    if is_dir and cfg.format in ("jsonl", "csv"):
        raise ConfigError(f"dataset.path {root} is a directory, but dataset.format={cfg.format} reads one file; "
                          "give the file, a glob of files, or dataset.format=text_dir for a folder of documents")
    if is_dir:
        return [path for path in list_files(fs, root) if path.endswith(".parquet")]
    return [root]


def _glob(fs: pafs.FileSystem, pattern: str) -> list[str]:
    """Files matching a glob: the local ``glob`` (``**`` recurses); on an object store, a listing below the
    pattern's fixed prefix, matched with ``fnmatch`` (``*`` there crosses ``/``)."""
    if is_local(fs):
        return sorted(glob.glob(pattern, recursive=True))
    fixed = pattern.split("/")
    fixed = "/".join(fixed[: next(i for i, part in enumerate(fixed) if any(ch in part for ch in "*?["))])
    return [path for path in list_files(fs, fixed) if fnmatch.fnmatchcase(path, pattern)]


def _path(cfg: DatasetConfig, root: str, file: str) -> str:
    """A file's path on the filesystem: text_dir and maskbench files are named below ``root``, the rest in full."""
    return f"{root}/{file}" if cfg.format in ("text_dir", "maskbench") else file


def _where(cfg: DatasetConfig, root: str, file: str) -> PurePosixPath:
    """The path a row's messages name: its file, or the folder for one-file-a-row formats."""
    return PurePosixPath(root if cfg.format in ("text_dir", "maskbench") else file)


def _located(cfg: DatasetConfig, fs: pafs.FileSystem, root: str, files: list[str]) -> Iterator[tuple[Loc, Row]]:
    reader = {"jsonl": _jsonl, "parquet": _parquet, "csv": _csv, "text_dir": _text_dir, "maskbench": _maskbench}[cfg.format]
    index = 0
    for file_no, file in enumerate(files):
        where = _where(cfg, root, file)
        for start, end, line, item in reader(fs, root, file, cfg):
            if cfg.limit is not None and index >= cfg.limit:
                return
            yield Loc(file_no, start, end, line, index), _checked(cfg, where, index, item)
            index += 1


def _items_at(cfg: DatasetConfig, piece: Slice) -> Iterator[tuple[Loc, Item]]:
    """Read each located row's item back, opening each file once."""
    locs = piece.locs
    if cfg.format == "parquet":
        by_file: dict[int, list[Loc]] = {}
        for loc in locs:
            by_file.setdefault(loc.file, []).append(loc)
        for f, locs in by_file.items():
            table = pds.dataset(piece.files[f], format="parquet", filesystem=piece.fs).take(pa.array([loc.start for loc in locs]))
            yield from zip(locs, table.to_pylist())
        return
    if cfg.format in ("text_dir", "maskbench"):
        reader = _text_dir if cfg.format == "text_dir" else _maskbench
        for loc in locs:
            yield loc, next(iter(reader(piece.fs, piece.root, piece.files[loc.file], cfg)))[3]
        return
    handles: dict[int, Any] = {}
    names = [PurePosixPath(file).name for file in piece.files]
    try:
        header = {}
        for loc in locs:
            if loc.file not in handles:
                handles[loc.file] = open_input(piece.fs, piece.files[loc.file])
                if cfg.format == "csv":
                    header[loc.file] = _csv_header(handles[loc.file], piece.files[loc.file])
            f = handles[loc.file]
            f.seek(loc.start)
            raw = f.read(loc.end - loc.start)
            yield loc, _jsonl_item(raw, names[loc.file], loc.line) if cfg.format == "jsonl" else _csv_record(raw, header[loc.file])
    finally:
        for f in handles.values():
            f.close()


def _jsonl(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig) -> Iterator[tuple[int, int, int, Item]]:
    path, offset = PurePosixPath(file), 0
    with open_input(fs, file) as f:
        for line_no, raw in enumerate(f, 1):
            start, offset = offset, offset + len(raw)
            item = _jsonl_item(raw, path.name, line_no)
            if item is not None:
                yield start, offset, line_no, item


def _jsonl_item(raw: bytes, name: str, line_no: int) -> Item | None:
    """One jsonl line's row, or None for a blank line."""
    try:
        line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as err:
        return f"{name}:{line_no}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        return f"{name}:{line_no}: not valid JSON ({err.msg})"
    return value if isinstance(value, dict) else f"{name}:{line_no}: expected a JSON object, got {type(value).__name__}"


def _parquet(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    try:
        batches = pq.ParquetFile(fs.open_input_file(file)).iter_batches(batch_size=_BATCH)
        number = 0
        for batch in batches:
            for row in batch.to_pylist():
                yield number, number + 1, 0, row
                number += 1
    except (pa.ArrowInvalid, OSError) as err:
        raise ConfigError(f"dataset.path {file} is not a Parquet file ({str(err).splitlines()[0]}); check dataset.format") from None


def _csv(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """Records with their byte ranges; a record may span lines (a quoted newline)."""
    path = PurePosixPath(file)
    ends = {0: 0}  # line number -> byte offset where it ends; only the last record's lines are kept

    def lines() -> Iterator[str]:
        with open_input(fs, file) as f:
            for n, raw in enumerate(f, 1):
                ends[n] = ends[n - 1] + len(raw)
                yield _utf8_line(raw, n, path)

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
            "swallows the lines after it: close or escape it (\"\")"
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


def _text_dir(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig) -> Iterator[tuple[int, int, int, Item]]:
    """One row per file, subdirectories included; a row's id is its path below ``root`` without the suffix."""
    where = PurePosixPath(file)
    row_id = where.with_suffix("").as_posix()
    data = read_bytes(fs, f"{root}/{file}")
    if b"\x00" in data:
        yield 0, 0, 0, ({cfg.id_field: row_id}, f"{where}: a binary file, not text (it holds NUL bytes)")
        return
    try:
        yield 0, 0, 0, {cfg.id_field: row_id, cfg.text_field: data.decode("utf-8-sig")}
    except UnicodeDecodeError as err:
        yield 0, 0, 0, ({cfg.id_field: row_id}, f"{where}: a binary file, not text (byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8)")


MASKBENCH_PROMPT = (
    "Reply with one JSON value that validates against the JSON schema below, and nothing else.\n\n"
    "JSON schema:\n{schema}"
)


def _maskbench(fs: pafs.FileSystem, root: str, file: str, cfg: DatasetConfig) -> Iterator[tuple[int, int, int, Item]]:
    """One row per MaskBench file (``schema``, ``tests``, ``meta.features``): generation prompts each schema."""
    path = PurePosixPath(root, file)
    try:
        suite = json.loads(read_bytes(fs, str(path)).decode("utf-8"))
    except json.JSONDecodeError as err:
        yield 0, 0, 0, f"{path.name}: not valid JSON ({err.msg})"
        return
    if not isinstance(suite, dict) or not isinstance(suite.get("schema"), (dict, bool)):
        yield 0, 0, 0, f"{path.name}: not a MaskBench file (no 'schema' object)"
        return
    schema = suite["schema"]
    yield 0, 0, 0, {
        cfg.id_field: path.stem,
        cfg.text_field: MASKBENCH_PROMPT.format(schema=json.dumps(schema, ensure_ascii=False)),
        cfg.schema_field or "schema": schema if isinstance(schema, dict) else json.dumps(schema),
        "features": list((suite.get("meta") or {}).get("features", [])),
    }


def _checked(cfg: DatasetConfig, path: PurePosixPath, index: int, item: Item) -> Row:
    fallback_id = f"row-{index}"
    if isinstance(item, str):
        return Row(fallback_id, index, problem=item)
    fields, problem = item if isinstance(item, tuple) else (item, None)
    row_id = fields.get(cfg.id_field)
    where = f"{path.name} row {index}"
    if row_id is None or row_id == "":
        return Row(fallback_id, index, fields, f"{where}: missing id field {cfg.id_field!r}")
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
    if not isinstance(text, str) or not text.strip():
        return Row(str(row_id), index, fields, f"{where}: missing or empty text field {cfg.text_field!r}")
    if cfg.schema_field and not isinstance(fields.get(cfg.schema_field), (dict, str)):
        return Row(str(row_id), index, fields, f"{where}: missing schema field {cfg.schema_field!r}")
    return Row(str(row_id), index, fields)


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


def _check_unique(table: pa.Table, path: str, id_field: str) -> None:
    """Sort the ids and compare neighbours: a few bytes a row (the sorted copy and its order), never the rows."""
    ids = table.column("id")
    if len(ids) < 2:
        return
    ordered = ids.take(pc.sort_indices(ids)).combine_chunks()
    same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
    if not pc.any(same).as_py():
        return
    row_id = ordered[pc.index(same, True).as_py()].as_py()
    first, second = table.filter(pc.equal(ids, row_id)).column("index").to_pylist()[:2]
    raise ConfigError(
        f"{PurePosixPath(path).name}: rows {first} and {second} share the id {row_id!r} in field {id_field!r}; "
        "ids must be unique so that every row is accounted for exactly once"
    )
