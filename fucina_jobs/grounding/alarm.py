"""The run alarm: three shares that betray made-up output, and the thresholds above which a run says so.

Schema-valid is not correct. A small model that copies its prompt's worked
example, or writes the same record for every row, still produces valid
records; these shares catch it without gold labels:

- ``ungrounded_values``: grounded values not found in their source, over all grounded values
  (rows rejected as ``ungrounded`` included);
- ``duplicate_records``: records identical to another record of the run;
- ``prompt_copies``: record values written in the system prompt, template or worked examples but not in the
  row's own source (values the schema itself lists, enums, consts and allowances, are exempt).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .check import ungrounded_values
from .declaration import GroundingError, grounded_fields
from .paths import leaves
from .values import dates_in, normalize_whitespace, numbers_in

#: Above these shares the run warns. Any ungrounded or copied value is suspect, but a few can be
#: coincidence (a date in the template, one bad document); a fifth of identical records cannot.
THRESHOLDS = {"ungrounded_values": 0.05, "duplicate_records": 0.20, "prompt_copies": 0.05}
_MEANING = {
    "ungrounded_values": "of grounded values are not in their source text",
    "duplicate_records": "of records are identical to another record",
    "prompt_copies": "of record values are copied from the prompt, not from the row",
}


@dataclass
class Output:
    """One decoded row to judge: its JSON value, source text and schema."""

    value: Any
    text: str
    schema: dict[str, Any] | None
    is_record: bool = True


@dataclass
class RunAlarm:
    counts: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in THRESHOLDS})  # name -> [hits, out of]

    def shares(self) -> dict[str, float | None]:
        return {k: (hits / total if total else None) for k, (hits, total) in self.counts.items()}

    def warnings(self) -> list[str]:
        return [
            f"{share:.0%} {_MEANING[k]} ({self.counts[k][0]} of {self.counts[k][1]}; alarm above {THRESHOLDS[k]:.0%})"
            for k, share in self.shares().items()
            if share is not None and share > THRESHOLDS[k]
        ]

    def as_dict(self) -> dict[str, Any]:
        return {"shares": self.shares(), "counts": self.counts, "thresholds": THRESHOLDS, "warnings": self.warnings()}


def measure(outputs: Iterable[Output], prompt: str) -> RunAlarm:
    """The three shares over a run's records (and its ``ungrounded`` rejects, for the first share)."""
    counts, digests = shard_counts(outputs, prompt)
    return combine([counts], digests)


def shard_counts(outputs: Iterable[Output], prompt: str) -> tuple[dict[str, list[int]], list[int]]:
    """One shard's ungrounded and prompt-copy counts, and a 63-bit digest per record.

    Replicas count their own shards, so the driver never reads a record; the
    digests are all it needs to count duplicates across the run."""
    counts = {k: [0, 0] for k in ("ungrounded_values", "prompt_copies")}
    copies = _PromptCopies(prompt)
    known: dict[int, tuple[Any, list]] = {}  # a job's rows share one schema object: read its declaration once
    digests = []
    for out in outputs:
        fields = _grounded(out.schema, known)
        checked, misses = ungrounded_values(out.value, fields, out.text)
        counts["ungrounded_values"][0] += len(misses)
        counts["ungrounded_values"][1] += checked
        if out.is_record:
            canonical = json.dumps(out.value, sort_keys=True).encode()
            digests.append(int.from_bytes(hashlib.sha256(canonical).digest()[:8], "little") >> 1)
            copied, considered = copies.count(out)
            counts["prompt_copies"][0] += copied
            counts["prompt_copies"][1] += considered
    return counts, digests


def combine(shards: Iterable[dict[str, list[int]]], digests: Sequence[int] | Any) -> RunAlarm:
    """The run's alarm from its shards' counts and every record's digest (a list or an Arrow array)."""
    alarm = RunAlarm()
    for counts in shards:
        for name, (hits, total) in counts.items():
            alarm.counts[name][0] += hits
            alarm.counts[name][1] += total
    values = digests if isinstance(digests, (pa.Array, pa.ChunkedArray)) else pa.array(digests, pa.int64())
    seen = pc.value_counts(values).field("counts") if len(values) else pa.array([], pa.int64())
    duplicated = pc.sum(pc.filter(seen, pc.greater(seen, 1))).as_py() or 0
    alarm.counts["duplicate_records"] = [duplicated, len(values)]
    return alarm


def _grounded(schema: Any, known: dict[int, tuple[Any, list]]) -> list:
    if id(schema) not in known:
        try:
            known[id(schema)] = (schema, grounded_fields(schema))
        except GroundingError:
            known[id(schema)] = (schema, [])  # the row was rejected for it already
    return known[id(schema)][1]


class _PromptCopies:
    def __init__(self, prompt: str):
        self.prompt = _norm(prompt)
        self.numbers = numbers_in(prompt)
        self.dates = set(dates_in(prompt))
        self._exempt: dict[int, tuple[Any, list[Any]]] = {}  # per schema object, kept with it so its id is not reused

    def exempt(self, schema: Any) -> list[Any]:
        if id(schema) not in self._exempt:
            self._exempt[id(schema)] = (schema, _schema_values(schema))
        return self._exempt[id(schema)][1]

    def count(self, out: Output) -> tuple[int, int]:
        """(values copied from the prompt, values considered); the source's dates and numbers are parsed only
        when a value is in the prompt, since parsing them costs more than the rest of the check."""
        exempt = self.exempt(out.schema)
        source, numbers, dates = _norm(out.text), None, None
        copied = considered = 0
        for _, value in leaves(out.value):
            if value in exempt:
                continue
            if isinstance(value, str) and len(_norm(value)) >= 3:
                considered += 1
                if (_norm(value) in self.prompt or value in self.dates) and _norm(value) not in source:
                    dates = set(dates_in(out.text)) if dates is None else dates
                    copied += value not in dates
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                considered += 1
                number = Decimal(str(value))
                if number in self.numbers:
                    numbers = numbers_in(out.text) if numbers is None else numbers
                    copied += number not in numbers
        return copied, considered


def _norm(text: str) -> str:
    return normalize_whitespace(text).casefold()


def _schema_values(schema: Any) -> list[Any]:
    """Every value the schema itself names: enum members, consts, grounding allowances."""
    found: list[Any] = []
    if isinstance(schema, dict):
        found += schema.get("enum", []) if isinstance(schema.get("enum"), list) else []
        found += [schema["const"]] if "const" in schema else []
        options = schema.get("x-grounded")
        found += options.get("allow", []) if isinstance(options, dict) else []
        for sub in schema.values():
            found += _schema_values(sub)
    elif isinstance(schema, list):
        for sub in schema:
            found += _schema_values(sub)
    return found


def prompt_text(system: str, template: str, examples: Sequence[str] = ()) -> str:
    """What the prompt itself writes: the system message, the template without its ``{field}`` slots,
    and the worked examples' documents and answers."""
    return "\n".join([system, re.sub(r"\{[^{}]*\}", " ", template), *examples])
