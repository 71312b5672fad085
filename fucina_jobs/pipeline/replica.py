"""One model replica: it owns an engine, reads its shards' rows, decodes them and writes the outputs.

``ShardWorker`` is plain Python so it can be tested without Ray; the driver
wraps it in a Ray actor that runs several shards at once, each in a thread of
its own, all feeding one ``DecodeLoop``. The driver sends a shard as a
``Slice`` (where its rows live, not the rows) and gets back a ``ShardSummary``
(counts, not records): rows and records never pass through the driver.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..confidence import Leaf, confidence, output_values
from .. import engines
from ..engines import DRAFT_SOURCES, Completion, GrammarError, Prompt, prompt_overflow
from ..grounding.declaration import GroundingError, grounded_fields
from ..grounding.choices import grounded_choices
from ..grounding.grammar import NothingToGround, grounded_lark
from .config import JobConfig, read_text_option
from .dataset import Row, Slice, read_slice
from .decode_loop import DecodeLoop
from .job_constraint import JobConstraint, RowSchemaError, compile_schema, meta_schema_problem, parse_row_schema
from .rundir import RunDir
from .shard_writer import ShardSummary, ShardWriter

log = logging.getLogger(__name__)


def record_seed(seed: int, row_id: str) -> int:
    """A per-record seed: the same record samples the same way on any replica or stream."""
    digest = hashlib.sha256(f"{seed}:{row_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class ShardWorker:
    def __init__(self, cfg: dict[str, Any], constraint: JobConstraint | None, model_path: str, base: str, out: RunDir, run_id: str, replica: int):
        self.cfg = JobConfig.model_validate(cfg)
        self.base = Path(base)
        self.replica = replica
        _log_to_file(out.log_path(replica))
        self.writer = ShardWriter(self.cfg, constraint, self.base, out, run_id)
        self.engine = engines.build(self.cfg, model_path)
        self.job_constraint = constraint
        self.constraint, self.relaxations = constraint.compile(self.engine, self.cfg.constraint) if constraint else (None, [])
        self.schema = constraint.schema if constraint else None  # grounded rows build their grammar from it
        self.grounded = bool(grounded_fields(self.schema))  # read once: rows without a schema of their own share it
        self.system = read_text_option(self.cfg.prompt.system, self.base) or None
        self.template = read_text_option(self.cfg.prompt.template, self.base)
        self.examples = tuple(e.turn for e in self.writer.examples)
        self._row_constraints: dict[str, tuple[Any, list[str]]] = {}
        self.loop = DecodeLoop(self.engine, self.cfg.runtime.streams)
        log.info("replica %d ready: %s with the %s engine", replica, model_path, self.cfg.engine.name)

    def ping(self) -> int:
        return self.replica

    def run(self, shard: int, key: str, piece: Slice) -> ShardSummary:
        """Read, decode, validate, write and commit one shard."""
        start = time.perf_counter()
        rows = read_slice(self.cfg.dataset, piece)
        refused, prompts, relaxed, grammar_s = [], [], {}, 0.0
        for row in (r for r in rows if r.problem is None):  # the writer rejects the others with their problem
            prompt, problem, relaxed[row.id], seconds = self._prompt(row)
            grammar_s += seconds
            if problem:
                reason, message = problem
                refused.append({"row_id": row.id, "text": "", "finish_reason": "error", "error": message, "reason": reason})
            else:
                prompts.append(prompt)
        completions, occupancy = self.loop.decode(prompts)
        kind = self.cfg.constraint.kind
        pattern = self.job_constraint.pattern if self.job_constraint else None  # a regex's named groups carry confidence
        decoded = [_as_dict(c, output_values(c.text, kind, pattern) if c.token_probs else None) | {"relaxations": relaxed[c.id]}
                   for c in completions]
        stats = shard_stats(completions, time.perf_counter() - start)
        stats["relaxed_rows"] = sum(bool(relaxed[c.id]) for c in completions)
        stats["grounded_grammar_s"] = grammar_s  # building and compiling per-row grounded grammars
        stats["occupancy"] = occupancy  # mean live streams per step over runtime.streams, while the shard was held
        summary = self.writer.write(key, shard, self.replica, rows, refused + decoded, stats)
        log.info("replica %d committed shard %d: %d rows in %.1fs", self.replica, shard, len(rows), time.perf_counter() - start)
        return summary

    def _prompt(self, row: Row) -> tuple[Prompt | None, tuple[str, str] | None, list[str], float]:
        """The row's prompt, or the (reject reason, message) that keeps it from being decoded; its schema's relaxations; grammar seconds."""
        try:
            text = self.template.format_map(row.fields)
        except KeyError as err:
            return None, ("error", f"row {row.id!r}: prompt.template uses field {err} that the row does not have"), [], 0.0
        d = self.cfg.decoding
        overflow = prompt_overflow(self.engine, Prompt(row.id, text, self.system, max_tokens=d.max_tokens, examples=self.examples))
        if overflow:  # from the token count alone: a long document's grounded grammar takes minutes to build
            return None, ("error", overflow), [], 0.0
        start = time.perf_counter()
        try:
            constraint, relaxations, grounded = self._constraint(row)
            choices = self._choices(row) if grounded and d.choice == "likelihood" else ()
        except NothingToGround as err:  # no grammar could hold a true value: decided before decoding
            return None, ("ungrounded", f"{err}; decided before decoding"), [], 0.0
        except RowSchemaError as err:
            return None, ("error", f"row {row.id!r}: its schema ({self.cfg.dataset.schema_field}) {err}"), [], 0.0
        except (GrammarError, GroundingError) as err:
            return None, ("error", f"row {row.id!r}: its schema does not compile: {err}"), [], 0.0
        except Exception as err:  # an untrusted row schema no check foresaw: that row is a reject, its shard goes on
            if not self.cfg.dataset.schema_field:
                raise
            why = meta_schema_problem(parse_row_schema(row.fields.get(self.cfg.dataset.schema_field)))
            return None, ("error", f"row {row.id!r}: its schema cannot be used: {why or f'{type(err).__name__}: {str(err)[:200]}'}"), [], 0.0
        seconds = time.perf_counter() - start if grounded else 0.0
        prompt = Prompt(row.id, text, self.system, constraint, record_seed(d.seed, row.id), d.max_tokens, self.examples, choices)
        return prompt, None, relaxations, seconds

    def _constraint(self, row: Row) -> tuple[Any, list[str], bool]:
        """The row's own grounded grammar where its schema grounds fields, else the shared constraint; its relaxations; grounded or not."""
        field_name = self.cfg.dataset.schema_field
        schema = self._schema(row)
        if (grounded_fields(schema) if field_name else self.grounded):
            source = str(row.fields.get(self.cfg.dataset.text_field, ""))
            return self.engine.constraint(lark=grounded_lark(schema, source)), [], True
        return *(self._row_constraint(schema) if field_name else (self.constraint, self.relaxations)), False

    def _choices(self, row: Row) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The grounded fields of the row whose value is one of a short list: choose them by their likelihood."""
        return tuple(grounded_choices(self._schema(row), str(row.fields.get(self.cfg.dataset.text_field, ""))))

    def _schema(self, row: Row) -> Any:
        """The row's own schema (``dataset.schema_field``), else the job's."""
        field_name = self.cfg.dataset.schema_field
        return parse_row_schema(row.fields.get(field_name)) if field_name else self.schema

    def _row_constraint(self, schema: dict[str, Any]) -> tuple[Any, list[str]]:
        # Compile each distinct schema once; every stream still gets its own clone.
        key = json.dumps(schema, sort_keys=True)
        if key not in self._row_constraints:
            self._row_constraints[key] = compile_schema(self.engine, self.cfg.constraint, schema)
        return self._row_constraints[key]


def _as_dict(c: Completion, values: list[Leaf] | None) -> dict[str, Any]:
    return {"row_id": c.id, "text": c.text, "finish_reason": c.finish_reason, "error": c.error,
            "prompt_tokens": c.stats.prompt_tokens, "generated_tokens": len(c.tokens),
            "confidence": confidence(c.text, c.token_spans, c.token_probs, values)}


def shard_stats(completions: list[Completion], wall_s: float) -> dict[str, Any]:
    """Aggregate per-stream decoder stats into one row of ``stats/*.parquet``."""
    stats = [c.stats for c in completions]
    generated = sum(len(c.tokens) for c in completions)
    forwards = sum(s.forwards for s in stats)
    row: dict[str, Any] = {
        "prompt_tokens": sum(s.prompt_tokens for s in stats),
        "generated_tokens": generated,
        "forward_passes": forwards,
        "tokens_per_forward": sum(s.committed for s in stats) / forwards if forwards else 0.0,
        "tok_s": generated / wall_s if wall_s > 0 else 0.0,
        "wall_s": wall_s,
    }
    drafted = accepted = 0
    for source in DRAFT_SOURCES:
        d = sum(s.drafted.get(source, 0) for s in stats)
        a = sum(s.accepted.get(source, 0) for s in stats)
        row[f"drafted_{source}"], row[f"accepted_{source}"] = d, a
        drafted, accepted = drafted + d, accepted + a
    row["acceptance"] = accepted / drafted if drafted else 0.0
    mask_us = np.array([t for s in stats for t in s.process_seconds]) * 1e6
    row["mask_us_p50"] = float(np.percentile(mask_us, 50)) if mask_us.size else 0.0
    row["mask_us_p99"] = float(np.percentile(mask_us, 99)) if mask_us.size else 0.0
    return row


def _log_to_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
