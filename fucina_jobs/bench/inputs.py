"""The benchmark's inputs: the shipped invoice job's documents, system prompt and schema."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config import SHIPPED

log = logging.getLogger(__name__)

DEFAULT_JOB = SHIPPED / "jobs" / "invoices"
DEFAULT_SCHEMA = SHIPPED / "schemas" / "invoice.json"


@dataclass
class Doc:
    id: str
    user: str
    text: str = ""  # the source document: a grounded schema builds each row's grammar from it


def constraint_source(schema_path: Path, text: str) -> dict[str, Any]:
    """What ``engine.constraint`` takes for one document, as the job decodes it: the row's own
    grounded Lark grammar where the schema grounds fields (``x-grounded``), else the schema itself."""
    from ..grounding.declaration import grounded_fields
    from ..grounding.grammar import grounded_lark

    schema = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    return {"lark": grounded_lark(schema, text)} if grounded_fields(schema) else {"json_schema": Path(schema_path)}


def load_docs(job: Path, n: int) -> tuple[str, list[Doc]]:
    """The job's system prompt and its first ``n`` user messages."""
    system = (job / "system.txt").read_text(encoding="utf-8")
    template = (job / "template.txt").read_text(encoding="utf-8")
    docs = []
    with open(job / "inputs.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                docs.append(Doc(row["id"], template.format(text=row["text"]), row["text"]))
    if n > len(docs):
        log.warning("--docs %d asked for, the job has %d documents: using %d", n, len(docs), len(docs))
    return system, docs[:n]


def cycle_docs(docs: Sequence[Doc], n: int) -> list[Doc]:
    """At least ``n`` requests: the documents, cycled, each copy under a distinct id."""
    out = []
    for i in range(max(n, len(docs))):
        doc = docs[i % len(docs)]
        copy = i // len(docs)
        out.append(Doc(doc.id if copy == 0 else f"{doc.id}#{copy}", doc.user, doc.text))
    return out
