"""One model replica: it owns an engine, reads its shards' rows, decodes them and writes the outputs.

``ShardWorker`` is plain Python so it can be tested without Ray; the driver
wraps it in a Ray actor that runs several shards at once, each in a thread of
its own, all feeding one ``DecodeLoop``. The driver sends a shard as a
``Slice`` (where its rows live, not the rows) and gets back a ``ShardSummary``
(counts, not records): rows and records never pass through the driver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..confidence import Confidence, Leaf, capped, confidence, output_values
from .. import engines
from ..engines import DRAFT_SOURCES, Completion, GrammarError, Prompt, load_tokenizer, prompt_overflow, sampling_params
from ..grounding.declaration import Grounded, GroundingError, grounded_fields
from ..grounding.grammar import NothingToGround, field_values, grounded_lark
from ..grounding.shape import misfits
from ..rules.expression import RuleError
from ..rules.repair import Field, Repair
from .chunking import Chunk, Chunker, ChunkingError, chunk_id, gather
from ..config import JobConfig, read_text_option
from ..data import RetryTally, Row, RunDir, Slice, read_slice
from .decode_loop import DecodeLoop
from .examples import EXAMPLES_SHARE, Example, ExamplePicker
from .job_constraint import JobConstraint, RowSchemaError, compile_schema, meta_schema_problem, parse_row_schema
from .shard_writer import ShardSummary, ShardWriter
from .voting import sample_prompts, vote

log = logging.getLogger(__name__)


def record_seed(seed: int, row_id: str) -> int:
    """A per-record seed: the same record samples the same way on any replica or stream."""
    digest = hashlib.sha256(f"{seed}:{row_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class ShardWorker:
    def __init__(self, cfg: dict[str, Any], *, constraint: JobConstraint | None, model_path: str, base: str, out: RunDir, run_id: str, replica: int):
        self.cfg = JobConfig.model_validate(cfg)
        self.base = Path(base)
        self.replica = replica
        _log_to_file(out.log_path(replica))
        self.writer = ShardWriter(self.cfg, constraint, base=self.base, out=out, run_id=run_id)
        self.engine = engines.build(self.cfg, model_path)
        self.job_constraint = constraint
        self.constraint, self.relaxations = constraint.compile(self.engine, self.cfg.constraint) if constraint else (None, [])
        self.schema = constraint.schema if constraint else None  # grounded rows build their grammar from it
        self.grounded = bool(grounded_fields(self.schema))  # read once: rows without a schema of their own share it
        self.system = read_text_option(self.cfg.prompt.system, self.base) or None
        self.template = read_text_option(self.cfg.prompt.template, self.base)
        self.picker = self._picker(model_path)
        self._row_constraints: dict[str, tuple[Any, list[str]]] = {}
        self.vote_params = dataclasses.replace(sampling_params(self.cfg.decoding), temperature=self.cfg.decoding.vote_temperature)
        self.chunker = self._chunker(model_path) if self.cfg.dataset.chunking.enabled else None
        self.loop = DecodeLoop(self.engine, self.cfg.runtime.streams)
        log.info("replica %d ready: %s with the %s engine, %d torch threads", replica, model_path, self.cfg.engine.name, torch.get_num_threads())

    def ping(self) -> int:
        return self.replica

    def run(self, shard: int, key: str, piece: Slice) -> ShardSummary:
        """Read, decode, validate, write and commit one shard."""
        start = time.perf_counter()
        retries = RetryTally()  # the shard's S3 retries: its rows' reads, its writes (the decoding between reads nothing)
        with retries:
            rows = read_slice(self.cfg.dataset, piece)
        refused, pending, relaxed, grammar_s = [], [], {}, 0.0
        chunks: dict[str, tuple[str, Chunk]] = {}  # a chunk's prompt id -> its row's id and the chunk
        for row in (r for r in rows if r.problem is None):  # the writer rejects the others with their problem
            row_prompts, problem, relaxed[row.id], seconds = self._prompts(row, chunks)
            grammar_s += seconds
            if problem:
                reason, message = problem
                refused.append({"row_id": row.id, "text": "", "finish_reason": "error", "error": message, "reason": reason})
            else:
                pending += [(row, prompt) for prompt in row_prompts]
        outputs, completions, occupancy = self._decode(pending, relaxed)  # a long row's chunks are streams of the batch like any row
        repair_start = time.perf_counter()
        whole = [(row, prompt) for row, prompt in pending if prompt.id not in chunks]  # rules judge a chunked row's merged record
        repaired, repair_completions, grammar_s = self._repair(whole, outputs, relaxed, grammar_s)
        stats = shard_stats(completions + repair_completions, time.perf_counter() - start)
        stats["relaxed_rows"] = sum(bool(relaxed[row_id]) for row_id in {row.id for row, _ in pending})
        stats["grounded_grammar_s"] = grammar_s  # building and compiling per-row grounded grammars
        stats["occupancy"] = occupancy  # mean live streams per step over runtime.streams, while the shard's first decode was held
        stats["repair_s"] = time.perf_counter() - repair_start if repaired else 0.0  # re-decoding rows that broke a rule
        decoded = gather([output | {"row_id": prompt_id} for prompt_id, output in outputs.items()], chunks)
        with retries:
            summary = self.writer.write(key, shard, self.replica, rows, refused + decoded, stats, retries=retries)
        log.info("replica %d committed shard %d: %d rows in %.1fs", self.replica, shard, len(rows), time.perf_counter() - start)
        return summary

    def _decode(
        self, pending: list[tuple[Row, Prompt]], relaxed: dict[str, list[str]], first: bool = False
    ) -> tuple[dict[str, dict], list[Completion], float | None]:
        """Each prompt's output, by prompt id, its ``decoding.samples`` samples voted (``voting.py``); every completion; the
        occupancy. ``first``: before the prompts waiting in the decoder (``DecodeLoop.submit``)."""
        samples = {prompt.id: sample_prompts(prompt, self.cfg.decoding.samples, self.vote_params) for _, prompt in pending}
        completions, occupancy = self.loop.decode([s for prompts in samples.values() for s in prompts], first)
        by_id = {c.id: c for c in completions}
        kind = self.cfg.constraint.kind
        pattern = self.job_constraint.pattern if self.job_constraint else None  # a regex's named groups carry confidence
        outputs = {}
        for row, prompt in pending:
            decoded = [by_id[s.id] for s in samples[prompt.id]]
            ids = [e.id for e in self._examples(row)]
            shaped = [g for g in grounded_fields(self._schema(row)) if g.shape] if kind in (None, "json_schema") else []
            found = [
                _shaped(_as_dict(c, output_values(c.text, kind, pattern) if c.token_probs else None), shaped)
                | {"row_id": row.id, "relaxations": relaxed[row.id], "example_ids": ids}
                for c in decoded
            ]
            if len(found) == 1:
                outputs[prompt.id] = found[0]
            else:
                valid = lambda text: self.writer.judge(row, {"text": text, "finish_reason": "stop"})[0] is not None  # noqa: E731
                outputs[prompt.id] = vote(found, [self.writer.judge(row, o)[0] for o in found], valid)
        return outputs, completions, occupancy

    def _repair(
        self, pending: list[tuple[Row, Prompt]], outputs: dict[str, dict], relaxed: dict[str, list[str]], grammar_s: float
    ) -> tuple[int, list[Completion], float]:
        """Decode the rows whose output breaks a rule again, up to ``decoding.repairs`` times, with the values
        ``rules.repair`` excludes (docs/RULES.md); each output gets its ``rule_failures`` and ``repair_attempts``.

        A plan's alternatives decode side by side, and the row keeps the one that keeps its rules, the one
        whose changed string the model is surest of first. The fields before the first one a plan touches are
        pinned to their values, so their tokens are forced and drafted; they keep their confidence. Every attempt is part of the shard's unit of work:
        it is committed, or retried, with the shard. Return the re-decodes, their completions and the grammar seconds."""
        rows_by_id = {row.id: row for row, _ in pending}
        repairs = {row.id: Repair() for row in rows_by_id.values()}
        failures: dict[str, list[str]] = {row.id: [] for row, _ in pending}
        attempts = dict.fromkeys(failures, 0)
        todo, completions = [row for row, _ in pending], []
        for attempt in range(self.cfg.decoding.repairs + 1):
            again: list[tuple[Row, Prompt]] = []
            plans: dict[str, list[tuple[str, Any]]] = {}  # row id -> (prompt id, plan) per alternative
            for row in todo:
                record, alternatives = self._plans(row, outputs[row.id], repairs[row.id], failures[row.id])  # the last one only notes failures
                for i, plan in enumerate(alternatives if attempt < self.cfg.decoding.repairs else []):
                    prompt, _, _, seconds = self._prompt(row, plan.exclude, self._prefix(row, record, plan))
                    grammar_s += seconds
                    if prompt is not None:
                        again.append((row, dataclasses.replace(prompt, id=f"{row.id}\0repair{i}")))
                        plans.setdefault(row.id, []).append((again[-1][1].id, plan))
            if not again:
                break
            redone, more, _ = self._decode(again, relaxed, first=True)
            completions += more
            for row_id, alternatives in plans.items():
                chosen, plan = max(alternatives, key=lambda a: self._standing(rows_by_id[row_id], redone[a[0]], a[1]))
                repairs[row_id].take(plan)
                before = outputs[row_id]
                spent = {key: before[key] + sum(redone[p][key] for p, _ in alternatives) for key in ("prompt_tokens", "generated_tokens")}
                outputs[row_id] = redone[chosen] | spent | {"confidence": _kept_confidence(before, redone[chosen])}
                attempts[row_id] += 1
            todo = [rows_by_id[row_id] for row_id in plans]
        for row, _ in pending:
            outputs[row.id] |= {"rule_failures": failures[row.id], "repair_attempts": attempts[row.id]}
        return sum(attempts.values()), completions, grammar_s

    def _plans(self, row: Row, output: dict, repair: Repair, failures: list[str]) -> tuple[dict | None, list]:
        """The output's record, and the alternatives to decode next when it breaks a rule (noting the rules it broke)."""
        record = self.writer.judge(row, output)[0]
        try:
            rules = self.writer.rules_for(row)
        except RuleError:
            return record, []  # the writer rejects the row for its schema
        broken = [r.name for r in rules if record is not None and not r.holds(record)]
        failures += [name for name in broken if name not in failures]
        if not broken:
            return record, []
        return record, repair.plans(record, rules, self._rule_fields(row), _field_confidence(output))

    def _prefix(self, row: Row, record: dict, plan: Any) -> dict[tuple[str, ...], Any]:
        """The record's top-level values before the first field ``plan`` touches, in the schema's key order."""
        touched = {path[0] for path in plan.exclude}
        pinned = {}
        for key in (self._schema(row) or {}).get("properties", {}):
            if key in touched:
                break
            if key in record:
                pinned[(key,)] = record[key]
        return pinned

    def _standing(self, row: Row, output: dict, plan: Any) -> tuple[bool, float]:
        """How an alternative ranks: it keeps every rule, then how sure the model is of the string it changed."""
        record = self.writer.judge(row, output)[0]
        keeps = record is not None and all(r.holds(record) for r in self.writer.rules_for(row))
        return keeps, _field_confidence(output).get(plan.doubt, 0.0) if plan.doubt else 0.0

    def _rule_fields(self, row: Row) -> dict[str, Field]:
        """The row's grounded fields a rule can read (not inside arrays), with their candidates in its text."""
        source = str(row.fields.get(self.cfg.dataset.text_field, ""))
        fields = {}
        for g in grounded_fields(self._schema(row)):
            if "[]" not in g.path:
                found = field_values(g, source)
                written = field_values(dataclasses.replace(g, allow=()), source) if found is not None else None
                fields[g.name] = Field(g.path, found, frozenset(found or ()) - frozenset(written or ()))
        return fields

    def _prompts(self, row: Row, chunks: dict[str, tuple[str, Chunk]]) -> tuple[list[Prompt], tuple[str, str] | None, list[str], float]:
        """The row's prompt, or one per chunk when ``dataset.chunking`` cuts its text (each registered in ``chunks``), or the
        (reject reason, message) that keeps it from being decoded; its schema's relaxations; grammar seconds."""
        try:
            cut = self.chunker.chunks(row.fields, [e.turn for e in self._examples(row)]) if self.chunker else []
        except KeyError as err:
            return [], ("error", f"row {row.id!r}: prompt.template uses field {err} that the row does not have"), [], 0.0
        except ChunkingError as err:
            return [], ("error", f"row {row.id!r}: {err}"), [], 0.0
        if len(cut) < 2:
            prompt, problem, relaxations, seconds = self._prompt(row)
            return [prompt] if prompt else [], problem, relaxations, seconds
        source = str(row.fields.get(self.cfg.dataset.text_field, ""))
        prompts, seconds = [], 0.0
        for c in cut:  # each chunk grounded in its own text
            prompt, problem, relaxations, spent = self._prompt(row, piece=(chunk_id(row.id, c.index), source[c.start : c.end]))
            if problem:
                reason, message = problem
                return [], (reason, f"{message} (chunk {c.index + 1} of {len(cut)}, characters {c.start}-{c.end})"), [], 0.0
            prompts.append(prompt)
            seconds += spent
        chunks.update((prompt.id, (row.id, c)) for prompt, c in zip(prompts, cut))
        return prompts, None, relaxations, seconds

    def _prompt(
        self, row: Row, exclude: dict | None = None, pinned: dict | None = None, piece: tuple[str, str] | None = None
    ) -> tuple[Prompt | None, tuple[str, str] | None, list[str], float]:
        """The row's prompt (a chunk's, for ``piece``: its prompt id and text), or the (reject reason, message) that keeps it
        from being decoded; its schema's relaxations; grammar seconds. A repair's prompt holds ``exclude``'s values away and
        the ``pinned`` ones fixed (``_constraint``)."""
        name = self.cfg.dataset.text_field
        prompt_id, source = piece or (row.id, str(row.fields.get(name, "")))
        try:
            text = self.template.format_map(row.fields if piece is None else {**row.fields, name: source})
        except KeyError as err:
            return None, ("error", f"row {row.id!r}: prompt.template uses field {err} that the row does not have"), [], 0.0
        d = self.cfg.decoding
        examples = tuple(e.turn for e in self._examples(row))
        overflow = prompt_overflow(self.engine, Prompt(prompt_id, text, self.system, max_tokens=d.max_tokens, examples=examples))
        if overflow:  # from the token count alone: a long document's grounded grammar takes minutes to build
            return (
                None,
                ("error", overflow + ("; or cut it into chunks that fit: dataset.chunking.enabled=true" if self.chunker is None else "")),
                [],
                0.0,
            )
        start = time.perf_counter()
        try:
            constraint, relaxations, grounded = self._constraint(row, source, exclude, pinned)
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
        seed = record_seed(d.seed, prompt_id)
        prompt = Prompt(prompt_id, text, self.system, constraint, seed=seed, max_tokens=d.max_tokens, examples=examples)
        return prompt, None, relaxations, seconds

    def _examples(self, row: Row) -> tuple[Example, ...]:
        """The worked examples the row's prompts carry (every chunk's and repair's alike): ``prompt.examples_nearest`` picks them by its whole text."""
        return self.picker.pick(str(row.fields.get(self.cfg.dataset.text_field, "")))

    def _picker(self, model_path: str) -> ExamplePicker:
        """The job's worked examples for each row; nearest ones fit ``EXAMPLES_SHARE`` of the model's context, where it has one."""
        p, context, count = self.cfg.prompt, getattr(self.engine, "context", None), len
        if p.examples_nearest and context:
            tokenizer = getattr(self.engine, "tokenizer", None) or load_tokenizer(model_path)
            count = lambda turn: len(tokenizer.encode(turn, add_special_tokens=False))  # noqa: E731
        budget = int(EXAMPLES_SHARE * context) if p.examples_nearest and context else None
        return ExamplePicker(self.writer.examples, p.examples_k, p.examples_nearest, budget=budget, count=count)

    def _chunker(self, model_path: str) -> Chunker:
        tokenizer = getattr(self.engine, "tokenizer", None) or load_tokenizer(model_path)  # an engine without a model (canned) has none
        return Chunker(
            self.cfg.dataset.chunking,
            tokenizer,
            context=getattr(self.engine, "context", None),
            system=self.system,
            template=self.template,
            text_field=self.cfg.dataset.text_field,
            max_tokens=self.cfg.decoding.max_tokens,
        )

    def _constraint(self, row: Row, source: str, exclude: dict | None = None, pinned: dict | None = None) -> tuple[Any, list[str], bool]:
        """The row's own grounded grammar (over ``source``: its text or its chunk's) where its schema grounds fields (a repair's:
        less the values ``exclude`` takes away, with the ``pinned`` ones held), else the shared constraint; its relaxations;
        grounded or not."""
        field_name = self.cfg.dataset.schema_field
        schema = self._schema(row)
        if grounded_fields(schema) if field_name else self.grounded:
            whole = str(row.fields.get(self.cfg.dataset.text_field, ""))  # a chunk's fields whose labels other chunks write are left to them
            return self.engine.constraint(lark=grounded_lark(schema, source, exclude, pinned, whole)), [], True
        return *(self._row_constraint(schema) if field_name else (self.constraint, self.relaxations)), False

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


def _field_confidence(output: dict) -> dict[str, float]:
    return output["confidence"].field_mean if output.get("confidence") else {}


def _kept_confidence(before: dict, after: dict) -> Confidence | None:
    """A repaired output's confidence: its own, except for the values it kept, whose tokens a pin forced (they score 1),
    which keep the confidence the model had when it chose them."""
    old, new = before.get("confidence"), after.get("confidence")
    if old is None or new is None:
        return new
    record, previous = _parsed(after["text"]), _parsed(before["text"])
    kept = {name for name in record if name in previous and record[name] == previous[name]}
    same = lambda path: path.split(".")[0].split("[")[0] in kept  # noqa: E731
    result = Confidence(
        None,
        {p: (old.field_min if same(p) and p in old.field_min else new.field_min)[p] for p in new.field_min},
        {p: (old.field_mean if same(p) and p in old.field_mean else new.field_mean)[p] for p in new.field_mean},
    )
    result.record = min(result.field_mean.values(), default=None)
    return result


def _shaped(output: dict, fields: list[Grounded]) -> dict:
    """``output`` with its values that do not look like their field's gold (``fields``' shapes) at a low confidence."""
    if not fields or output["confidence"] is None:
        return output
    return output | {"confidence": capped(output["confidence"], misfits(fields, _parsed(output["text"])))}


def _parsed(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _as_dict(c: Completion, values: list[Leaf] | None) -> dict[str, Any]:
    return {
        "row_id": c.id,
        "text": c.text,
        "finish_reason": c.finish_reason,
        "error": c.error,
        "prompt_tokens": c.stats.prompt_tokens,
        "generated_tokens": len(c.tokens),
        "confidence": confidence(c.text, c.token_spans, c.token_probs, values),
    }


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
