"""Dataset readers: every input row comes back, readable or not.

A row that cannot be used (bad JSON, invalid UTF-8, a lone surrogate, a
binary file, a missing text field) is returned with its problem attached, so
the sink turns it into a reject instead of losing it. Whole-file problems (a
missing file, a directory where a file belongs, a CSV quote that never
closes) are errors that name the file and line.

Each row also has a content digest: the driver keys finished shards by their
rows' ids and digests, so an edited row is noticed and decoded again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Union

import pyarrow as pa
import pyarrow.parquet as pq

from .config import ConfigError, DatasetConfig


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


def read_rows(cfg: DatasetConfig, base: Path) -> list[Row]:
    path = (base / cfg.path).resolve()
    if not path.exists():
        raise ConfigError(f"dataset.path {path} does not exist")
    if path.is_dir() and cfg.format in ("jsonl", "csv"):
        raise ConfigError(f"dataset.path {path} is a directory, but dataset.format={cfg.format} reads one file; "
                          "give the file, or dataset.format=text_dir for a folder of documents")
    reader = {"jsonl": _jsonl, "parquet": _parquet, "csv": _csv, "text_dir": _text_dir, "maskbench": _maskbench}[cfg.format]
    rows = [_checked(cfg, path, i, fields) for i, fields in enumerate(reader(path, cfg))]
    if cfg.limit is not None:
        rows = rows[: cfg.limit]
    _check_unique(rows, path, cfg.id_field)
    return rows


def _jsonl(path: Path, cfg: DatasetConfig) -> Iterator[Item]:
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as err:
                yield f"{path.name}:{line_no}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
                continue
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                yield f"{path.name}:{line_no}: not valid JSON ({err.msg})"
                continue
            yield value if isinstance(value, dict) else f"{path.name}:{line_no}: expected a JSON object, got {type(value).__name__}"


def _parquet(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any]]:
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise ConfigError(f"dataset.path {path} is not a Parquet file ({str(err).splitlines()[0]}); check dataset.format") from None
    yield from table.to_pylist()


def _csv(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any]]:
    text = _utf8(path)
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)  # utf-8-sig dropped any BOM
    line = 1  # the header
    try:
        for row in reader:
            line = reader.line_num
            yield row
    except csv.Error as err:
        raise ConfigError(
            f"dataset.path {path}: line {line + 1}: malformed CSV ({err}); a quote that never closes "
            "swallows the lines after it: close or escape it (\"\")"
        ) from None


def _utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ConfigError(f"dataset.path {path}: line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x}); save the file as UTF-8") from None


def _text_dir(path: Path, cfg: DatasetConfig) -> Iterator[Item]:
    """One row per file, subdirectories included; a row's id is its path below ``path`` without the suffix."""
    if not path.is_dir():
        raise ConfigError(f"dataset.format=text_dir needs a directory, but {path} is a file")
    files = (p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
    for file in sorted(files):
        row_id = file.relative_to(path).with_suffix("").as_posix()
        data, where = file.read_bytes(), file.relative_to(path)
        if b"\x00" in data:
            yield {cfg.id_field: row_id}, f"{where}: a binary file, not text (it holds NUL bytes)"
            continue
        try:
            yield {cfg.id_field: row_id, cfg.text_field: data.decode("utf-8-sig")}
        except UnicodeDecodeError as err:
            yield {cfg.id_field: row_id}, f"{where}: a binary file, not text (byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8)"


MASKBENCH_PROMPT = (
    "Reply with one JSON value that validates against the JSON schema below, and nothing else.\n\n"
    "JSON schema:\n{schema}"
)


def _maskbench(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any] | str]:
    """One row per MaskBench file (``schema``, ``tests``, ``meta.features``): generation prompts each schema."""
    if not path.is_dir():
        raise ConfigError(f"dataset.format=maskbench needs a directory of MaskBench .json files, but {path} is a file")
    for file in sorted(path.glob("*.json")):
        try:
            suite = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            yield f"{file.name}: not valid JSON ({err.msg})"
            continue
        if not isinstance(suite, dict) or not isinstance(suite.get("schema"), (dict, bool)):
            yield f"{file.name}: not a MaskBench file (no 'schema' object)"
            continue
        schema = suite["schema"]
        yield {
            cfg.id_field: file.stem,
            cfg.text_field: MASKBENCH_PROMPT.format(schema=json.dumps(schema, ensure_ascii=False)),
            cfg.schema_field or "schema": schema if isinstance(schema, dict) else json.dumps(schema),
            "features": list((suite.get("meta") or {}).get("features", [])),
        }


def _checked(cfg: DatasetConfig, path: Path, index: int, item: Item) -> Row:
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


def _check_unique(rows: list[Row], path: Path, id_field: str) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        if row.id in seen:
            raise ConfigError(
                f"{path.name}: rows {seen[row.id]} and {row.index} share the id {row.id!r} in field {id_field!r}; "
                "ids must be unique so that every row is accounted for exactly once"
            )
        seen[row.id] = row.index
