"""The job's constraint, read once by the driver into one value that travels to every replica.

The driver reads ``constraint.json_schema``, ``.lark`` or ``.regex`` from disk
and checks it before any model loads; replicas get the text itself, not a
path, so they need no copy of the config's files (on a cluster they have
none) and cannot read a file that changed mid-run. Its digest is the
constraint's hash in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema

from ..engines import Engine, compile_json_schema
from ..config import ConfigError, ConstraintConfig, locate
from ..grounding import learned_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobConstraint:
    kind: str  # json_schema | lark | regex
    text: str  # the file's content
    name: str  # the config value it was read from, for messages

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.kind}\0{self.text}".encode()).hexdigest()

    @cached_property
    def schema(self) -> dict[str, Any] | None:
        return json.loads(self.text) if self.kind == "json_schema" else None

    @cached_property
    def pattern(self) -> re.Pattern | None:
        return re.compile(self.text.strip()) if self.kind == "regex" else None

    def compile(self, engine: Engine, c: ConstraintConfig) -> tuple[Any, list[str]]:
        """Compile for ``engine``; return the handle and the relaxations its schema needed (none for Lark or regex)."""
        if self.kind == "json_schema":
            return compile_schema(engine, c, self.schema, self.name)
        return engine.constraint(**{self.kind: self.text.strip() if self.kind == "regex" else self.text}), []


def compile_schema(engine: Engine, c: ConstraintConfig, schema: dict[str, Any], name: str = "<schema>") -> tuple[Any, list[str]]:
    """Compile a JSON schema for ``engine``, relaxed where llguidance refuses it (``constraint.relax=auto``).

    The engine gets the relaxed schema, so both engines decode under the same
    grammar; the relaxations go with every row so its record says what the
    grammar left to post-validation."""
    compiled = compile_json_schema(schema, whitespace_flexible=c.whitespace_flexible, relax_schema=c.relax == "auto", name=name)
    relaxations = [str(r) for r in compiled.relaxations]
    if relaxations:
        log.info("schema %s relaxed to compile: %s", name, ", ".join(relaxations))
    return engine.constraint(json_schema=compiled.schema, whitespace_flexible=c.whitespace_flexible), relaxations


class RowSchemaError(ValueError):
    """A row's own schema (``dataset.schema_field``) is no JSON object: that row is a reject, and its shard goes on."""


def parse_row_schema(value: Any) -> dict[str, Any]:
    """A row's schema field as a schema: a JSON object, or JSON text of one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise RowSchemaError(f"is not JSON: {err.msg} at character {err.pos}") from None
    if not isinstance(value, dict):
        raise RowSchemaError(f"is a JSON {type(value).__name__}, not a JSON Schema object")
    return value


def meta_schema_problem(schema: dict[str, Any]) -> str | None:
    """Where ``schema`` breaks its draft's meta-schema (formats aside), or None: the why of a schema our code could not use."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    err = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    return f"not a valid JSON Schema at {'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}" if err else None


def read_constraint(c: ConstraintConfig, base: Path) -> JobConstraint | None:
    """Read and check the configured constraint file; None when rows carry their own schema."""
    if c.kind is None:
        return None
    value = getattr(c, c.kind)
    path = locate(value, base)
    if not path.is_file():
        raise ConfigError(f"constraint.{c.kind}: {path} does not exist")
    constraint = JobConstraint(c.kind, path.read_text(encoding="utf-8"), value)
    if c.kind == "json_schema":
        _check_schema(constraint, path)
        if c.learned is not None:
            constraint = _with_learned(constraint, c, base)
    elif c.kind == "regex":
        try:
            constraint.pattern
        except re.error as err:
            raise ConfigError(f"constraint.regex: {value} is not a valid regex: {err}") from None
    return constraint


def _with_learned(constraint: JobConstraint, c: ConstraintConfig, base: Path) -> JobConstraint:
    """The schema with the cues of ``constraint.learned`` merged in under its own options (``grounding.learned_file``),
    at ``constraint.learned_at``."""
    path = locate(c.learned, base)
    if not path.is_file():
        raise ConfigError(f"constraint.learned: {path} does not exist; `python -m fucina_jobs learn conf=NAME gold=FILE` writes it")
    try:
        learned = learned_file.under(learned_file.read(path), c.learned_at, constraint.schema)
        merged = learned_file.apply(constraint.schema, learned, f"constraint.learned: {c.learned}")
    except learned_file.LearnedError as err:
        raise ConfigError(str(err)) from None
    return JobConstraint(constraint.kind, json.dumps(merged, ensure_ascii=False, indent=1), constraint.name)


def _check_schema(constraint: JobConstraint, path: Path) -> None:
    try:
        schema = constraint.schema
    except json.JSONDecodeError as err:
        raise ConfigError(f"constraint.json_schema: {path} is not valid JSON: {err}") from None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        raise ConfigError(f"constraint.json_schema: {path} is not a valid JSON Schema at {where}: {err.message}") from None
