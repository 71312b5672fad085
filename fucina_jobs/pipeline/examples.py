"""Worked examples: a job's few-shot turns, read and checked once before any model loads.

``prompt.examples`` names a JSONL file of ``{"text": ..., "label": ...}``, one
worked example a line. Each becomes a pair of chat turns before the row's own:
the user message (the job's template filled with the example's text) and the
assistant's answer (the label written as the job's grammar writes a record:
compact JSON in the schema's key order). Every row writes the same turns, so
they sit in the shared prompt prefix and the prefix cache computes them once.

A bad example teaches the model a wrong answer on every row, so each label is
checked like a record: against the job's schema, and its grounded values
against its own text (an example whose total its receipt never writes teaches
the model to invent one). Grounding keeps an example's values out of the rows
that do not write them: a grounded field can only copy the row's own text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..grounding.check import ungrounded_values
from ..grounding.declaration import grounded_fields
from ..grounding.values import json_number
from ..config import ConfigError, JobConfig, locate
from ..data import json_validator, schema_failure


@dataclass(frozen=True)
class Example:
    document: str  # the example's text
    user: str  # the template filled with it: the user turn
    answer: str  # the label as the grammar writes it: the assistant turn

    @property
    def turn(self) -> tuple[str, str]:
        return self.user, self.answer


def load_examples(cfg: JobConfig, base: Path, template: str, schema: dict[str, Any] | None) -> list[Example]:
    """The job's first ``prompt.examples_k`` examples (all when null); a bad one is a ``ConfigError`` naming its file and line."""
    p = cfg.prompt
    if p.examples is None:
        return []
    path = locate(p.examples, base).resolve()
    if not path.is_file():
        raise ConfigError(f"prompt.examples: {path} does not exist")
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    if p.examples_k is not None and p.examples_k > len(lines):
        raise ConfigError(f"prompt.examples_k={p.examples_k}: {path.name} holds only {len(lines)} example(s)")
    checker = _Checker(cfg, schema)
    return [checker.example(f"prompt.examples: {path.name}:{n}", line, template) for n, line in lines[: p.examples_k]]


class _Checker:
    def __init__(self, cfg: JobConfig, schema: dict[str, Any] | None):
        self.text_field = cfg.dataset.text_field
        self.kind = cfg.constraint.kind
        self.schema = schema
        self.validator = json_validator(schema) if schema is not None else None
        self.grounded = grounded_fields(schema) if schema is not None else []

    def example(self, where: str, line: str, template: str) -> Example:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{where}: not JSON ({err.msg} at character {err.pos})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str) or not entry["text"].strip() or "label" not in entry:
            raise ConfigError(f'{where}: expected {{"text": "<the document>", "label": <its answer>}}')
        text, label = entry["text"], entry["label"]
        try:
            user = template.format_map({**entry, self.text_field: text})
        except KeyError as err:
            raise ConfigError(f"{where}: prompt.template uses the field {err}, which the example does not have") from None
        return Example(text, user, self.answer(where, text, label))

    def answer(self, where: str, text: str, label: Any) -> str:
        if self.kind in ("lark", "regex"):  # the label is the answer's text itself
            if not isinstance(label, str):
                raise ConfigError(f"{where}: a {self.kind} job's label is the answer's text, a string, not {type(label).__name__}")
            return label
        if self.validator is not None:
            failure = schema_failure(self.validator, label)
            if failure is not None:
                raise ConfigError(f"{where}: the label does not fit the job's schema: {failure[1]}")
            _, misses = ungrounded_values(label, self.grounded, text)
            if misses:
                raise ConfigError(f"{where}: grounded value(s) not found in the example's own text: {'; '.join(misses)}")
        return compact_json(label, self.schema)


def compact_json(value: Any, schema: Any) -> str:
    """``value`` as a grounded grammar writes it: compact JSON, objects in the schema's key order, numbers in their one spelling."""
    if isinstance(value, dict):
        order = list((schema or {}).get("properties", {}) if isinstance(schema, dict) else {})
        keys = [k for k in order if k in value] + [k for k in value if k not in order]
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{compact_json(value[k], props.get(k))}" for k in keys) + "}"
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return "[" + ",".join(compact_json(v, items) for v in value) + "]"
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return json_number(Decimal(str(value)))
    return json.dumps(value, ensure_ascii=False)
