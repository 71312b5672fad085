"""Dataset readers: every input row comes back, readable or not.

A row that cannot be used (bad JSON, a missing text field) is returned with
its problem attached, so the sink turns it into a reject instead of losing
it. Whole-file problems (a missing file, an unknown format) are errors.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq

from .config import ConfigError, DatasetConfig


@dataclass(frozen=True)
class Row:
    id: str
    index: int  # position in the input, for messages
    fields: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why this row cannot be decoded


def read_rows(cfg: DatasetConfig, base: Path) -> list[Row]:
    path = (base / cfg.path).resolve()
    if not path.exists():
        raise ConfigError(f"dataset.path {path} does not exist")
    reader = {"jsonl": _jsonl, "parquet": _parquet, "csv": _csv, "text_dir": _text_dir, "maskbench": _maskbench}[cfg.format]
    rows = [_checked(cfg, path, i, fields) for i, fields in enumerate(reader(path, cfg))]
    if cfg.limit is not None:
        rows = rows[: cfg.limit]
    _check_unique(rows, path, cfg.id_field)
    return rows


def _jsonl(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any] | str]:
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                yield f"{path.name}:{line_no}: not valid JSON ({err.msg})"
                continue
            yield value if isinstance(value, dict) else f"{path.name}:{line_no}: expected a JSON object, got {type(value).__name__}"


def _parquet(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any]]:
    yield from pq.read_table(path).to_pylist()


def _csv(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8", newline="") as f:
        yield from csv.DictReader(f)


def _text_dir(path: Path, cfg: DatasetConfig) -> Iterator[dict[str, Any]]:
    if not path.is_dir():
        raise ConfigError(f"dataset.format=text_dir needs a directory, but {path} is a file")
    for file in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
        yield {cfg.id_field: file.stem, cfg.text_field: file.read_text(encoding="utf-8", errors="replace")}


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


def _checked(cfg: DatasetConfig, path: Path, index: int, fields: dict[str, Any] | str) -> Row:
    fallback_id = f"row-{index}"
    if isinstance(fields, str):
        return Row(fallback_id, index, problem=fields)
    row_id = fields.get(cfg.id_field)
    where = f"{path.name} row {index}"
    if row_id is None or row_id == "":
        return Row(fallback_id, index, fields, f"{where}: missing id field {cfg.id_field!r}")
    text = fields.get(cfg.text_field)
    if not isinstance(text, str) or not text.strip():
        return Row(str(row_id), index, fields, f"{where}: missing or empty text field {cfg.text_field!r}")
    if cfg.schema_field and not isinstance(fields.get(cfg.schema_field), (dict, str)):
        return Row(str(row_id), index, fields, f"{where}: missing schema field {cfg.schema_field!r}")
    return Row(str(row_id), index, fields)


def _check_unique(rows: list[Row], path: Path, id_field: str) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        if row.id in seen:
            raise ConfigError(
                f"{path.name}: rows {seen[row.id]} and {row.index} share the id {row.id!r} in field {id_field!r}; "
                "ids must be unique so that every row is accounted for exactly once"
            )
        seen[row.id] = row.index
