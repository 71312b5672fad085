"""Validate completions into records or rejects, as Arrow tables.

Every row of a shard leaves here exactly once: as a record (it parsed and
validated) or as a reject carrying its reason. ``rundir.RunDir`` writes the
tables, atomically (``storage.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Callable, Iterable

import jsonschema
import pyarrow as pa

from ..confidence import Confidence
from .bounded_check import CheckTimeout, bounded, time_limit

#: A scalar that chunks of one row disagreed on (``merging.Conflict``): the value kept and the others, as JSON text.
CONFLICT = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("kept", pa.string()),
        pa.field("chunk", pa.int64()),
        pa.field(
            "alternatives", pa.list_(pa.struct([pa.field("value", pa.string()), pa.field("chunk", pa.int64()), pa.field("confidence", pa.float64())]))
        ),
    ]
)
#: One line of a value on its page: the page (from 1) and the box, in fractions of the page as rendered (documents.py).
BOX = pa.struct([pa.field("page", pa.int32()), *(pa.field(edge, pa.float32()) for edge in ("left", "top", "right", "bottom"))])
#: A PDF row's grounded values on its pages, keyed as ``field_spans``: the column only ``dataset.format=documents``
#: jobs' records have, so every other job's records are as they were.
BOXES = pa.field("field_boxes", pa.map_(pa.string(), pa.list_(BOX)))
META_FIELDS = [
    pa.field("record_id", pa.string()),
    pa.field("row_id", pa.string()),
    pa.field("text", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("prompt_tokens", pa.int64()),
    pa.field("generated_tokens", pa.int64()),
    pa.field("flags", pa.list_(pa.string())),  # warnings for a reviewer: see pipeline/flags.py
    pa.field("relaxations", pa.list_(pa.string())),  # what constraint.relax widened in the row's schema: see decoding/relaxation.py
    pa.field("rule_failures", pa.list_(pa.string())),  # x-rules an earlier decode broke, repaired since: see docs/RULES.md
    pa.field("repair_attempts", pa.int64()),  # re-decodes of the row to repair a broken rule
    pa.field("example_ids", pa.list_(pa.string())),  # the worked examples its prompt carried (prompt.examples_nearest picks them per row)
    # Token probabilities in [0, 1] (``fucina_jobs.confidence``): the record's least certain value
    # (lowest mean), and per value (keyed by path such as ``items[0].name``) the min and the mean.
    pa.field("record_confidence", pa.float64()),
    pa.field("field_confidence_min", pa.map_(pa.string(), pa.float64())),
    pa.field("field_confidence_mean", pa.map_(pa.string(), pa.float64())),
    # decoding.samples > 1: the share of the samples that wrote each top-level field's kept value, and the record's lowest (docs/VOTING.md)
    pa.field("record_agreement", pa.float64()),
    pa.field("field_agreement", pa.map_(pa.string(), pa.float64())),
    # Each grounded value's [start, end) in the row's source text, keyed like the confidence maps (grounding/spans.py).
    pa.field("field_spans", pa.map_(pa.string(), pa.list_(pa.int32()))),
    # A row cut into chunks (``dataset.chunking``; 1: decoded whole). For a chunked row, per value (keyed as above) the
    # chunk it came from, and the values its chunks disagreed on.
    pa.field("chunk_count", pa.int64()),
    pa.field("field_chunks", pa.map_(pa.string(), pa.int64())),
    pa.field("merge_conflicts", pa.list_(CONFLICT)),
    BOXES,
]
REJECT_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string()),
        pa.field("row_id", pa.string()),
        pa.field("reason", pa.string()),  # invalid_json | schema_violation | ungrounded | rule_violation | length | error
        pa.field("text", pa.string()),
        pa.field("error", pa.string()),
        pa.field("relaxations", pa.list_(pa.string())),
        pa.field("rule_failures", pa.list_(pa.string())),  # every x-rule a decode of the row broke
        pa.field("repair_attempts", pa.int64()),
    ]
)


@dataclass
class Outcome:
    """One row's fate. ``record`` is the typed data when it validated."""

    row_id: str
    text: str
    finish_reason: str
    _: KW_ONLY
    prompt_tokens: int = 0
    generated_tokens: int = 0
    record: dict[str, Any] | None = None
    reason: str | None = None
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    relaxations: list[str] = field(default_factory=list)  # a relaxed grammar left these to post-validation
    example_ids: list[str] = field(default_factory=list)  # the worked examples the row's prompt carried
    confidence: Confidence | None = None
    rule_failures: list[str] = field(default_factory=list)  # rules a decode of the row broke
    repair_attempts: int = 0
    agreement: dict[str, float] | None = None  # voting: each field's share of the samples
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # grounded values in the source text, by path
    boxes: dict[str, list[tuple]] | None = None  # a PDF row's values on its pages, by path: (page, left, top, right, bottom)
    chunk_count: int = 1
    field_chunks: dict[str, int] | None = None
    merge_conflicts: list[dict[str, Any]] | None = None
    overlap_duplicates: int = 0  # items the merge found twice in an overlap and kept once


def arrow_type(schema: dict[str, Any]) -> pa.DataType | None:
    """Map a JSON schema to an Arrow type, or None where it does not map."""
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: nullable is the Arrow default
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    members = [v for v in schema.get("enum", ()) if v is not None]  # a null member is a null in the column
    if members and all(isinstance(v, str) for v in members):
        return pa.string()
    if kind == "string":
        return pa.date32() if schema.get("format") == "date" else pa.string()
    simple = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    if kind in simple:
        return simple[kind]
    if kind == "array" and isinstance(schema.get("items"), dict):
        item = arrow_type(schema["items"])
        return pa.list_(item) if item is not None else None
    if kind == "object" and "properties" in schema:
        fields = [(name, arrow_type(sub)) for name, sub in schema["properties"].items()]
        return pa.struct(fields) if all(t is not None for _, t in fields) else None
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        value = arrow_type(schema["additionalProperties"])
        return pa.map_(pa.string(), value) if value is not None else None
    return None


def record_schema(fields: list[pa.Field], boxes: bool = False) -> pa.Schema:
    """The records' columns: the meta columns, ``field_boxes`` only where ``boxes`` (a documents job), then ``fields``."""
    taken = {f.name for f in META_FIELDS}
    clashes = [f.name for f in fields if f.name in taken]
    if clashes:
        raise ValueError(f"schema properties {clashes} clash with the record columns {sorted(taken)}; rename them")
    return pa.schema([f for f in META_FIELDS if boxes or f != BOXES] + fields)


def json_schema_fields(schema: dict[str, Any]) -> list[pa.Field]:
    """Typed columns for the top-level properties that map to Arrow."""
    props = schema.get("properties", {}) if schema.get("type") == "object" else {}
    fields = []
    for name, sub in props.items():
        kind = arrow_type(sub)
        if kind is not None:
            fields.append(pa.field(name, kind))
    return fields


class Validator:
    """Turns one completion into a record or a reject, per constraint kind."""

    def __init__(self, kind: str, source: Any = None, pydantic_model: type | None = None):
        self.kind = kind
        self.pydantic_model = pydantic_model
        if kind == "json_schema" and source is not None:
            self._json = json_validator(source)
        elif kind == "regex":
            self._regex = re.compile(source)

    def __call__(
        self, text: str, finish_reason: str, error: str | None, row_schema: dict | None = None
    ) -> tuple[dict | None, str | None, str | None]:
        """Return (record, reject reason, message)."""
        if finish_reason == "length":
            return None, "length", "the token budget ran out before the output was complete"
        if finish_reason != "stop":
            return None, "error", error or f"decoding ended with {finish_reason}"
        if self.kind == "json_schema":
            return self._check_json(text, row_schema)
        if self.kind == "regex":
            match = self._regex.fullmatch(text)
            if match is None:
                return None, "schema_violation", "output does not match the regex"
            return match.groupdict(), None, None
        return {}, None, None  # lark: a clean stop means the grammar accepted the text

    def _check_json(self, text: str, row_schema: dict | None) -> tuple[dict | None, str | None, str | None]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            return None, "invalid_json", f"{err.msg} at character {err.pos}"
        with time_limit():  # an untrusted row schema's regex cannot hold the replica
            failure = schema_failure(json_validator(row_schema) if row_schema else self._json, value)
        if failure is not None:
            return None, *failure
        if self.pydantic_model is not None:
            try:
                self.pydantic_model.model_validate(value)
            except Exception as err:  # pydantic's ValidationError
                return None, "schema_violation", f"{self.pydantic_model.__name__}: {err}"
        return value if isinstance(value, dict) else {"value": value}, None, None


def json_validator(schema: dict[str, Any]) -> Any:
    """A format-asserting validator of the draft ``schema`` names in ``$schema`` (2020-12 when none).

    The schema's own draft matters: 2020-12 ignores draft-7 keywords such as
    ``dependencies``, and a relaxed grammar leaves them to this check alone. Its
    regexes cannot hang a replica (``bounded_check``)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return bounded(cls)(schema, format_checker=cls.FORMAT_CHECKER)


def schema_failure(validator: Any, value: Any) -> tuple[str, str] | None:
    """(reject reason, message) when ``value`` fails the original schema, None when it validates."""
    try:
        problem = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except CheckTimeout as err:
        return "error", f"not checked: {err}"
    except Exception as err:  # a schema jsonschema cannot apply (unresolvable $ref, bad keyword value)
        return "error", f"the schema cannot be checked: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    if problem is None:
        return None
    path = "/".join(str(p) for p in problem.absolute_path) or "<root>"
    return "schema_violation", f"{path}: {problem.message}"


def _typed(record: dict[str, Any], fields: list[pa.Field]) -> dict[str, Any]:
    return {f.name: _arrow_value(record.get(f.name), f.type) for f in fields}


def _arrow_value(value: Any, kind: pa.DataType) -> Any:
    """A JSON value as Arrow takes it for ``kind``: ISO date strings as dates, at any depth (a date inside an array's items too)."""
    if pa.types.is_date32(kind) and isinstance(value, str):
        return dt.date.fromisoformat(value)
    if pa.types.is_struct(kind) and isinstance(value, dict):
        return {f.name: _arrow_value(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind) and isinstance(value, list):
        return [_arrow_value(v, kind.value_type) for v in value]
    if pa.types.is_map(kind) and isinstance(value, dict):
        return {k: _arrow_value(v, kind.item_type) for k, v in value.items()}
    return value


def outcome_tables(outcomes: Iterable[Outcome], schema: pa.Schema, record_id: Callable[[str], str]) -> tuple[pa.Table, pa.Table]:
    """A shard's records and rejects as Arrow tables (``rundir.RunDir`` writes them)."""
    typed_fields = [f for f in schema if f.name not in {m.name for m in META_FIELDS}]
    records, rejects = [], []
    for o in outcomes:
        rid = record_id(o.row_id)
        if o.record is not None:
            conf = o.confidence or Confidence()
            meta = {
                "record_id": rid,
                "row_id": o.row_id,
                "text": o.text,
                "finish_reason": o.finish_reason,
                "prompt_tokens": o.prompt_tokens,
                "generated_tokens": o.generated_tokens,
                "flags": o.flags,
                "relaxations": o.relaxations,
                "rule_failures": o.rule_failures,
                "repair_attempts": o.repair_attempts,
                "example_ids": o.example_ids,
                "record_confidence": conf.record,
                "field_confidence_min": conf.field_min,
                "field_confidence_mean": conf.field_mean,
                "record_agreement": min(o.agreement.values(), default=None) if o.agreement else None,
                "field_agreement": o.agreement,
                "field_spans": {path: list(span) for path, span in o.spans.items()},
                "chunk_count": o.chunk_count,
                "field_chunks": o.field_chunks,
                "merge_conflicts": o.merge_conflicts,
                "field_boxes": o.boxes and {path: [dict(zip(BOX.names, box)) for box in boxes] for path, boxes in o.boxes.items()},
            }
            records.append(meta | _typed(o.record, typed_fields))
        else:
            rejects.append(
                {
                    "record_id": rid,
                    "row_id": o.row_id,
                    "reason": o.reason,
                    "text": o.text,
                    "error": o.error,
                    "relaxations": o.relaxations,
                    "rule_failures": o.rule_failures,
                    "repair_attempts": o.repair_attempts,
                }
            )
    return pa.Table.from_pylist(records, schema=schema), pa.Table.from_pylist(rejects, schema=REJECT_SCHEMA)
