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
from ..engine import DRAFT_SOURCES, Completion, Engine, FucinaEngine, GrammarError, Prompt, SamplingParams, SpecConfig, load_model, load_tokenizer
from ..grounding.declaration import GroundingError, grounded_fields
from ..grounding.grammar import grounded_lark
from .chunking import Chunk, Chunker, ChunkingError, chunk_id, gather
from .config import JobConfig, NullEngineConfig, VLLMEngineConfig, read_text_option
from .dataset import Row, Slice, read_slice
from .decode_loop import DecodeLoop
from .job_constraint import JobConstraint, compile_schema
from .rundir import RunDir
from .shard_writer import ShardSummary, ShardWriter

log = logging.getLogger(__name__)


def record_seed(seed: int, row_id: str) -> int:
    """A per-record seed: the same record samples the same way on any replica or stream."""
    digest = hashlib.sha256(f"{seed}:{row_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def build_engine(cfg: JobConfig, model_path: str) -> Engine:
    d = cfg.decoding
    params = SamplingParams(d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty)
    s = d.speculative
    spec = SpecConfig(max_draft=s.max_draft, grammar_drafting=s.grammar_drafting, max_ngram=s.max_ngram, min_ngram=s.min_ngram) if s.enabled else None
    if isinstance(cfg.engine, NullEngineConfig):
        from ..null_engine import NullEngine

        return NullEngine(cfg.engine.output)
    if isinstance(cfg.engine, VLLMEngineConfig):
        from ..vllm_engine import VLLMEngine, VLLMOptions

        e = cfg.engine
        options = VLLMOptions(e.max_model_len, e.kv_cache_gib, e.gpu_memory_utilization, e.enforce_eager)
        return VLLMEngine(model_path, params, spec, cfg.runtime.streams, cfg.model.dtype, cfg.constraint.whitespace_flexible, options, d.seed)
    loaded = load_model(model_path, cfg.model.device, cfg.model.dtype)
    return FucinaEngine(loaded, params=params, spec=spec, streams=cfg.runtime.streams, compile=cfg.engine.compile)


class ShardWorker:
    def __init__(self, cfg: dict[str, Any], constraint: JobConstraint | None, model_path: str, base: str, out: RunDir, run_id: str, replica: int):
        self.cfg = JobConfig.model_validate(cfg)
        self.base = Path(base)
        self.replica = replica
        _log_to_file(out.log_path(replica))
        self.writer = ShardWriter(self.cfg, constraint, self.base, out, run_id)
        self.engine = build_engine(self.cfg, model_path)
        self.job_constraint = constraint
        self.constraint, self.relaxations = constraint.compile(self.engine, self.cfg.constraint) if constraint else (None, [])
        self.schema = constraint.schema if constraint else None  # grounded rows build their grammar from it
        self.grounded = bool(grounded_fields(self.schema))  # read once: rows without a schema of their own share it
        self.system = read_text_option(self.cfg.prompt.system, self.base) or None
        self.template = read_text_option(self.cfg.prompt.template, self.base)
        self._row_constraints: dict[str, tuple[Any, list[str]]] = {}
        self.chunker = self._chunker(model_path) if self.cfg.dataset.chunking.enabled else None
        self.loop = DecodeLoop(self.engine, self.cfg.runtime.streams)
        log.info("replica %d ready: %s with the %s engine", replica, model_path, self.cfg.engine.name)

    def ping(self) -> int:
        return self.replica

    def run(self, shard: int, key: str, piece: Slice) -> ShardSummary:
        """Read, decode, validate, write and commit one shard."""
        start = time.perf_counter()
        rows = read_slice(self.cfg.dataset, piece)
        refused, prompts, relaxed, grammar_s = [], [], {}, 0.0
        chunks: dict[str, tuple[str, Chunk]] = {}  # a chunk's prompt id -> its row's id and the chunk
        for row in (r for r in rows if r.problem is None):  # the writer rejects the others with their problem
            row_prompts, problem, relaxed[row.id], seconds = self._prompts(row, chunks)
            grammar_s += seconds
            if problem:
                refused.append({"row_id": row.id, "text": "", "finish_reason": "error", "error": problem})
            else:
                prompts += row_prompts
        completions, occupancy = self.loop.decode(prompts)  # a long row's chunks are streams of the batch like any row
        kind = self.cfg.constraint.kind
        pattern = self.job_constraint.pattern if self.job_constraint else None  # a regex's named groups carry confidence
        decoded = gather([_as_dict(c, output_values(c.text, kind, pattern) if c.token_probs else None, self._hint(c))
                          | {"relaxations": relaxed[chunks[c.id][0] if c.id in chunks else c.id]} for c in completions], chunks)
        stats = shard_stats(completions, time.perf_counter() - start)
        stats["relaxed_rows"] = sum(bool(d["relaxations"]) for d in decoded)
        stats["grounded_grammar_s"] = grammar_s  # building and compiling per-row grounded grammars
        stats["occupancy"] = occupancy  # mean live streams per step over runtime.streams, while the shard was held
        summary = self.writer.write(key, shard, self.replica, rows, refused + decoded, stats)
        log.info("replica %d committed shard %d: %d rows in %.1fs", self.replica, shard, len(rows), time.perf_counter() - start)
        return summary

    def _prompts(self, row: Row, chunks: dict[str, tuple[str, Chunk]]) -> tuple[list[Prompt], str | None, list[str], float]:
        """The row's prompt (one per chunk when ``dataset.chunking`` cuts its text, each registered in ``chunks``), or the problem
        that keeps it from being decoded; its schema's relaxations; grammar seconds."""
        try:
            self.template.format_map(row.fields)
            cut = self.chunker.chunks(row.fields) if self.chunker else []
        except KeyError as err:
            return [], f"row {row.id!r}: prompt.template uses field {err} that the row does not have", [], 0.0
        except ChunkingError as err:
            return [], f"row {row.id!r}: {err}", [], 0.0
        name = self.cfg.dataset.text_field
        source = str(row.fields.get(name, ""))
        pieces = [(row.id, source, None)] if len(cut) < 2 else [(chunk_id(row.id, c.index), source[c.start:c.end], c) for c in cut]
        d = self.cfg.decoding
        prompts, relaxations, seconds = [], [], 0.0
        for prompt_id, text, chunk in pieces:
            start = time.perf_counter()
            try:
                constraint, relaxations, grounded = self._constraint(row, text)  # grounded in the chunk's own text
            except (GrammarError, GroundingError, json.JSONDecodeError) as err:
                return [], f"row {row.id!r}: its schema does not compile: {err}", [], 0.0
            seconds += time.perf_counter() - start if grounded else 0.0
            fields = row.fields if chunk is None else {**row.fields, name: text}
            prompts.append(Prompt(prompt_id, self.template.format_map(fields), self.system, constraint, record_seed(d.seed, prompt_id), d.max_tokens))
        chunks.update((p.id, (row.id, chunk)) for p, (_, _, chunk) in zip(prompts, pieces) if chunk is not None)
        return prompts, None, relaxations, seconds

    def _chunker(self, model_path: str) -> Chunker:
        tokenizer = getattr(self.engine, "tokenizer", None) or load_tokenizer(model_path)  # an engine without a model (null) has none
        return Chunker(self.cfg.dataset.chunking, tokenizer, getattr(self.engine, "context", None), self.system, self.template,
                       self.cfg.dataset.text_field, self.cfg.decoding.max_tokens)

    def _hint(self, c: Completion) -> str | None:
        """The completion's error; a prompt past the context with chunking off also says how to turn it on."""
        context = getattr(self.engine, "context", None)
        if self.chunker is None and c.finish_reason == "error" and context and c.stats.prompt_tokens + self.cfg.decoding.max_tokens > context:
            return f"{c.error}; or cut it into chunks that fit: dataset.chunking.enabled=true"
        return c.error

    def _constraint(self, row: Row, source: str) -> tuple[Any, list[str], bool]:
        """The row's own grounded grammar (over ``source``: its text or its chunk's) where its schema grounds fields, else the
        shared constraint; its relaxations; grounded or not."""
        field_name = self.cfg.dataset.schema_field
        schema = row.fields[field_name] if field_name else self.schema
        schema = json.loads(schema) if isinstance(schema, str) else schema
        if (grounded_fields(schema) if field_name else self.grounded):
            return self.engine.constraint(lark=grounded_lark(schema, source)), [], True
        return *(self._row_constraint(schema) if field_name else (self.constraint, self.relaxations)), False

    def _row_constraint(self, schema: dict[str, Any]) -> tuple[Any, list[str]]:
        # Compile each distinct schema once; every stream still gets its own clone.
        key = json.dumps(schema, sort_keys=True)
        if key not in self._row_constraints:
            self._row_constraints[key] = compile_schema(self.engine, self.cfg.constraint, schema)
        return self._row_constraints[key]


def _as_dict(c: Completion, values: list[Leaf] | None, error: str | None) -> dict[str, Any]:
    return {"row_id": c.id, "text": c.text, "finish_reason": c.finish_reason, "error": error,
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
