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

With ``prompt.examples_nearest``, each row gets its own: the ``examples_k``
examples whose documents are nearest its text (``ExamplePicker``), so a
contract is shown contracts like it, within a quarter of the model's context.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Sequence

from ..grounding.check import ungrounded_values
from ..grounding.declaration import grounded_fields
from ..grounding.values import json_number
from ..config import ConfigError, JobConfig, locate
from ..data import json_validator, schema_failure


#: The share of the model's context that a row's nearest examples may fill, so the row's own text keeps the rest.
EXAMPLES_SHARE = 0.25
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Example:
    id: str  # the entry's "id", else its line in the file ("line 3")
    document: str  # the example's text
    user: str  # the template filled with it: the user turn
    answer: str  # the label as the grammar writes it: the assistant turn

    @property
    def turn(self) -> tuple[str, str]:
        return self.user, self.answer


def load_examples(cfg: JobConfig, base: Path, template: str, schema: dict[str, Any] | None) -> list[Example]:
    """The job's first ``prompt.examples_k`` examples (all when null, or with ``examples_nearest``, which picks among them
    per row); a bad one is a ``ConfigError`` naming its file and line."""
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
    kept = lines if p.examples_nearest else lines[: p.examples_k]
    return [checker.example(f"prompt.examples: {path.name}:{n}", n, line, template) for n, line in kept]


class _Checker:
    def __init__(self, cfg: JobConfig, schema: dict[str, Any] | None):
        self.text_field = cfg.dataset.text_field
        self.kind = cfg.constraint.kind
        self.schema = schema
        self.validator = json_validator(schema) if schema is not None else None
        self.grounded = grounded_fields(schema) if schema is not None else []

    def example(self, where: str, number: int, line: str, template: str) -> Example:
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
        return Example(str(entry.get("id", f"line {number}")), text, user, self.answer(where, text, label))

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


class ExamplePicker:
    """Which worked examples a row's prompt carries: the same ones for every row, or (``nearest``) the ``k`` whose
    documents are nearest the row's text, the nearest last (beside the row), as many as fit ``budget`` tokens
    (``count`` counts a turn's). Nearness is the cosine of word counts weighted by inverse document frequency over
    the examples: a cheap measure with no model, which finds the documents of the row's kind and wording."""

    def __init__(self, examples: Sequence[Example], k: int | None, nearest: bool, *, budget: int | None, count: Callable[[str], int]):
        self.examples, self.nearest, self.k, self.budget, self.count = list(examples), nearest, k, budget, count
        self.weights = _idf([e.document for e in self.examples]) if nearest else {}
        self.vectors = [self._vector(e.document) for e in self.examples] if nearest else []

    def pick(self, text: str) -> tuple[Example, ...]:
        if not self.nearest:
            return tuple(self.examples)
        row = self._vector(text)
        ranked = sorted(range(len(self.examples)), key=lambda i: (-_cosine(row, self.vectors[i]), i))
        chosen, room = [], self.budget
        for i in ranked:
            if self.k is not None and len(chosen) == self.k:
                break
            cost = sum(map(self.count, self.examples[i].turn))
            if room is None or cost <= room:
                chosen.append(self.examples[i])
                room = None if room is None else room - cost
        return tuple(reversed(chosen))

    def _vector(self, text: str) -> dict[str, float]:
        counts = Counter(w.casefold() for w in _WORD.findall(text))
        return {w: n * self.weights.get(w, 0.0) for w, n in counts.items()}


def _idf(documents: list[str]) -> dict[str, float]:
    seen = Counter(w for d in documents for w in {w.casefold() for w in _WORD.findall(d)})
    return {w: math.log((1 + len(documents)) / (1 + n)) + 1 for w, n in seen.items()}


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    dot = sum(v * b.get(w, 0.0) for w, v in a.items())
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


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
