"""``bench decode``: one stream, four arms per document, and where the time goes."""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from ..decoding.drafting import DRAFT_SOURCES
from .forward import format_profile, forward_profile
from .arms import Arm, acceptance, alternate, environment, job_prompts, load_model_for, percentile, same, timed_engine
from .inputs import Doc, constraint_source, load_docs
from .tables import format_table, yes_no

log = logging.getLogger(__name__)


def run_decode(args: argparse.Namespace) -> dict[str, Any]:
    from ..config import SpeculativeConfig

    system, docs = load_docs(args.job, args.docs)
    loaded = load_model_for(args)
    arms = [
        Arm("plain_unconstrained", "plain unconstrained", SpeculativeConfig(enabled=False), False),
        Arm("plain_constrained", "plain constrained", SpeculativeConfig(enabled=False), True),
        Arm("spec_no_grammar_drafting", "spec, no grammar drafting", SpeculativeConfig(grammar_drafting=False), True),
        Arm("spec_grammar_drafting", "spec + grammar drafting", SpeculativeConfig(), True),
    ]
    for arm in arms:
        arm.engine, arm.clock = timed_engine(loaded, arm.speculative)
    log.info("compiling %s for each document, as the job does", args.schema)
    constraints = {d.id: arms[0].engine.constraint(**constraint_source(Path(args.schema), d.text)) for d in docs}
    prompts = {arm.key: job_prompts(docs, system, constraints if arm.constrained else {}, args.max_tokens) for arm in arms}

    if args.warmup:
        log.info("warm-up: one short generation per arm")
        for arm in arms:
            list(arm.engine.generate(job_prompts(docs[:1], system, constraints if arm.constrained else {}, min(8, args.max_tokens))))

    for arm in arms:
        for field_ in (arm.walls, arm.prefill, arm.decode, arm.processor):
            field_.extend([0.0] * args.repeats)
        arm.completions.extend([] for _ in range(args.repeats))
    for step, arm in alternate(arms, args.repeats * len(docs)):  # one round per repeat and document
        r, d = divmod(step, len(docs))
        arm.clock.reset()
        start = time.perf_counter()
        completion = next(arm.engine.generate([prompts[arm.key][d]]))
        arm.walls[r] += time.perf_counter() - start
        arm.prefill[r] += arm.clock.prefill_s
        arm.decode[r] += arm.clock.decode_s
        arm.processor[r] += sum(completion.stats.process_seconds)
        arm.completions[r].append(completion)
        if completion.finish_reason == "error":
            log.warning("%s %s: error: %s", arm.label, completion.id, completion.error)
        if arm is arms[-1]:
            log.info("repeat %d/%d: doc %d/%d", r + 1, args.repeats, d + 1, len(docs))

    reference = next(a for a in arms if a.key == "plain_constrained")
    ref_wall = statistics.median(reference.walls)
    rows = []
    for arm in arms:
        first = arm.completions[0]
        stable = all(same(first, later) for later in arm.completions[1:])
        if not stable:
            log.warning("%s: outputs differ between repeats (nondeterministic decode?)", arm.label)
        forwards = sum(c.stats.forwards for c in first)
        tokens = sum(c.stats.committed for c in first)
        wall = statistics.median(arm.walls)
        finish: dict[str, int] = {}
        for c in first:
            finish[c.finish_reason] = finish.get(c.finish_reason, 0) + 1
        proc = [s for rep in arm.completions for c in rep for s in c.stats.process_seconds]
        rows.append(
            {
                "arm": arm.key,
                "label": arm.label,
                "constrained": arm.constrained,
                "speculative": arm.speculative.enabled,
                "grammar_drafting": arm.speculative.enabled and arm.speculative.grammar_drafting,
                "docs": len(first),
                "forwards": forwards,
                "tokens": tokens,
                "tokens_per_forward": tokens / forwards if forwards else 0.0,
                "acceptance": acceptance(first),
                "wall_s": wall,
                "wall_s_repeats": arm.walls,
                "wall_ratio": wall / ref_wall if ref_wall else None,
                "ms_per_token": 1000 * wall / tokens if tokens else None,
                "identical_to_plain_constrained": None
                if not arm.constrained
                else all(same(rep, reference.completions[0]) for rep in arm.completions),
                "stable_across_repeats": stable,
                "finish_reasons": finish,
                "time_split_s": {
                    "prefill": statistics.median(arm.prefill),
                    "decode_forwards": statistics.median(arm.decode),
                    "processor": statistics.median(arm.processor),
                    "other": statistics.median(w - p - f - q for w, p, f, q in zip(arm.walls, arm.prefill, arm.decode, arm.processor)),
                },
                "processor_us_per_token": {
                    "calls": len(proc),
                    "mean": 1e6 * statistics.fmean(proc) if proc else None,
                    "p50": 1e6 * percentile(proc, 50) if proc else None,
                    "p99": 1e6 * percentile(proc, 99) if proc else None,
                },
            }
        )
    ref_row = next(r for r in rows if r["arm"] == "plain_constrained")
    all_proc = [s for a in arms if a.constrained for rep in a.completions for c in rep for s in c.stats.process_seconds]
    overhead = {
        "processor_us_mean": 1e6 * statistics.fmean(all_proc) if all_proc else None,
        "processor_us_p50": 1e6 * percentile(all_proc, 50) if all_proc else None,
        "processor_us_p99": 1e6 * percentile(all_proc, 99) if all_proc else None,
        "processor_calls": len(all_proc),
        "plain_constrained_wall_ms_per_forward": 1000 * ref_row["wall_s"] / ref_row["forwards"] if ref_row["forwards"] else None,
        "plain_constrained_decode_forward_ms": 1000
        * sum(reference.decode)
        / max(1, sum(c.stats.forwards for rep in reference.completions for c in rep)),
        "plain_constrained_overhead_pct": 100 * sum(reference.processor) / sum(reference.walls) if sum(reference.walls) else None,
    }
    return {
        "command": "decode",
        "settings": {
            "docs": len(docs),
            "repeats": args.repeats,
            "max_tokens": args.max_tokens,
            "streams": 1,
            "sampling": "greedy",
            "schema": str(args.schema),
        },
        "environment": environment(args, loaded),
        "rows": rows,
        "mask_overhead": overhead,
        "grounded_compile": _grounded_compile(reference.engine, Path(args.schema), args.job, docs, ref_row["wall_s"]),
        "forward_profile": forward_profile(reference.engine.runner),
    }


def _grounded_compile(engine: Any, schema_path: Path, job: Path, docs: list[Doc], decode_wall_s: float) -> dict[str, Any] | None:
    """What a per-row grounded grammar costs to build and compile (the schema's ``x-grounded`` fields, each document's text)."""
    from ..grounding.declaration import grounded_fields
    from ..grounding.grammar import grounded_lark

    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    if not grounded_fields(schema):
        return None
    texts = {row["id"]: row["text"] for row in map(json.loads, (job / "inputs.jsonl").read_text(encoding="utf-8").splitlines()) if row}
    seconds = []
    for d in docs:
        start = time.perf_counter()
        engine.constraint(lark=grounded_lark(schema, texts[d.id]))
        seconds.append(time.perf_counter() - start)
    return {
        "rows": len(seconds),
        "ms_mean": 1000 * statistics.fmean(seconds),
        "ms_max": 1000 * max(seconds),
        "share_of_plain_constrained_wall": sum(seconds) / decode_wall_s if decode_wall_s else None,
    }


def _acc_cell(acc: dict[str, dict[str, float]], source: str) -> str:
    if source not in acc or not acc[source]["drafted"]:
        return "-"
    a = acc[source]
    return f"{a['accepted']}/{a['drafted']} ({100 * a['rate']:.0f}%)"


def format_decode(result: dict[str, Any]) -> str:
    rows = result["rows"]
    s, env = result["settings"], result["environment"]
    out = [
        f"bench decode: {s['docs']} docs, {s['repeats']} repeats, max_tokens {s['max_tokens']}, greedy, 1 stream; "
        f"{env['device']} {env['dtype']}, {env['torch_threads']} threads",
        "wall = median over repeats; vs plain-c = wall ratio against plain constrained; identical = same bytes as plain constrained",
        "",
        format_table(
            ["arm", "forwards", "tokens", "tok/fwd", *(f"{source} acc" for source in DRAFT_SOURCES), "wall s", "vs plain-c", "ms/tok", "identical"],
            [
                [
                    r["label"],
                    r["forwards"],
                    r["tokens"],
                    f"{r['tokens_per_forward']:.2f}",
                    *(_acc_cell(r["acceptance"], source) for source in DRAFT_SOURCES),
                    f"{r['wall_s']:.2f}",
                    f"{r['wall_ratio']:.2f}x",
                    f"{r['ms_per_token']:.1f}" if r["ms_per_token"] else "-",
                    yes_no(r["identical_to_plain_constrained"]),
                ]
                for r in rows
            ],
        ),
        "",
        "where the time goes (seconds, median over repeats; other = sampling, drafting, cache trims, Python)",
        format_table(
            ["arm", "wall", "prefill", "decode fwd", "processor", "other", "processor %"],
            [
                [
                    r["label"],
                    f"{r['wall_s']:.2f}",
                    f"{r['time_split_s']['prefill']:.2f}",
                    f"{r['time_split_s']['decode_forwards']:.2f}",
                    f"{r['time_split_s']['processor']:.3f}",
                    f"{r['time_split_s']['other']:.2f}",
                    f"{100 * r['time_split_s']['processor'] / r['wall_s']:.2f}%" if r["constrained"] else "-",
                ]
                for r in rows
            ],
        ),
        "",
        "processor (mask + apply) time per token, all repeats",
        format_table(
            ["arm", "calls", "mean us", "p50 us", "p99 us"],
            [
                [r["label"], p["calls"], f"{p['mean']:.0f}", f"{p['p50']:.0f}", f"{p['p99']:.0f}"]
                for r in rows
                if (p := r["processor_us_per_token"])["calls"]
            ],
        ),
    ]
    o = result["mask_overhead"]
    if o["processor_calls"]:
        out += [
            "",
            f"mask overhead: {o['processor_us_mean']:.0f} us/token mean (p50 {o['processor_us_p50']:.0f}, p99 {o['processor_us_p99']:.0f}) "
            f"over {o['processor_calls']} constrained tokens; plain constrained wall/forward {o['plain_constrained_wall_ms_per_forward']:.1f} ms "
            f"(decode forward alone {o['plain_constrained_decode_forward_ms']:.1f} ms); "
            f"processor = {o['plain_constrained_overhead_pct']:.2f}% of plain constrained wall",
        ]
    if p := result.get("forward_profile"):
        out += ["", *format_profile(p)]
    if g := result.get("grounded_compile"):
        out += [
            "",
            f"grounded grammar per row (build + compile): {g['ms_mean']:.1f} ms mean, {g['ms_max']:.1f} ms max over {g['rows']} rows; "
            f"{100 * g['share_of_plain_constrained_wall']:.2f}% of plain constrained wall",
        ]
    return "\n".join(out) + "\n"
