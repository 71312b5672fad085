"""``bench streams``: aggregate throughput of N concurrent streams, speculation off and on."""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from .arms import Arm, acceptance, alternate, environment, job_prompts, load_model_for, mean_acceptance, same, timed_engine
from .inputs import cycle_docs, load_docs
from .tables import format_table, x_ratio, yes_no

log = logging.getLogger(__name__)


def run_streams(args: argparse.Namespace) -> dict[str, Any]:
    from ..config import SpeculativeConfig

    widths = args.streams
    system, docs = load_docs(args.job, args.docs)
    requests = cycle_docs(docs, max(widths))
    loaded = load_model_for(args)
    arms: list[Arm] = []
    constraint = None
    for width in widths:
        for speculative in (SpeculativeConfig(enabled=False), SpeculativeConfig()):
            on = "on" if speculative.enabled else "off"
            arm = Arm(f"streams{width}_spec_{on}", f"{width} streams, spec {on}", speculative, True, streams=width)
            arm.engine, arm.clock = timed_engine(loaded, speculative, width)
            if constraint is None:
                log.info("compiling %s", args.schema)
                constraint = arm.engine.constraint(json_schema=Path(args.schema))
            arms.append(arm)
    constraints = {d.id: constraint for d in requests}
    prompts = job_prompts(requests, system, constraints, args.max_tokens)

    if args.warmup:
        # One short batched generation warms the shared model for every arm.
        warm = max(arms, key=lambda a: (a.streams, a.speculative.enabled))
        log.info("warm-up: one short generation (%s)", warm.label)
        list(warm.engine.generate(job_prompts(requests[: min(2, warm.streams)], system, constraints, min(8, args.max_tokens))))

    for r, arm in alternate(arms, args.repeats):
        steps = [0]

        def on_step(steps=steps) -> None:
            steps[0] += 1

        arm.clock.reset()
        start = time.perf_counter()
        completions = list(arm.engine.generate(prompts, on_step=on_step))
        wall = time.perf_counter() - start
        arm.walls.append(wall)
        arm.prefill.append(arm.clock.prefill_s)
        arm.decode.append(arm.clock.decode_s)
        arm.processor.append(sum(sum(c.stats.process_seconds) for c in completions))
        arm.steps.append(steps[0])
        arm.completions.append(sorted(completions, key=lambda c: c.id))
        for c in completions:
            if c.finish_reason == "error":
                log.warning("%s %s: error: %s", arm.label, c.id, c.error)
        log.info("repeat %d/%d: %s: %.1fs", r + 1, args.repeats, arm.label, wall)

    base = next(a for a in arms if a.streams == widths[0] and not a.speculative.enabled)
    base_tps = None
    rows = []
    for arm in arms:
        first = arm.completions[0]
        tokens = sum(c.stats.committed for c in first)
        stream_forwards = sum(c.stats.forwards for c in first)
        wall = statistics.median(arm.walls)
        tps = tokens / wall if wall else 0.0
        if arm is base:
            base_tps = tps
        acc = acceptance(first)
        rows.append(
            {
                "arm": arm.key,
                "streams": arm.streams,
                "speculative": arm.speculative.enabled,
                "requests": len(first),
                "tokens": tokens,
                "batched_forwards": arm.steps[0],
                "tokens_per_batched_forward": tokens / arm.steps[0] if arm.steps[0] else 0.0,
                "tokens_per_forward": tokens / stream_forwards if stream_forwards else 0.0,
                "acceptance": acc,
                "mean_acceptance": mean_acceptance(acc),
                "wall_s": wall,
                "wall_s_repeats": arm.walls,
                "tokens_per_s": tps,
                "time_split_s": {
                    "prefill": statistics.median(arm.prefill),
                    "decode_forwards": statistics.median(arm.decode),
                    "processor": statistics.median(arm.processor),
                },
                "identical_to_base": all(same(rep, base.completions[0]) for rep in arm.completions),
            }
        )
    for row in rows:
        row["ratio_vs_base"] = row["tokens_per_s"] / base_tps if base_tps else None
    return add_decode_rates(
        {
            "command": "streams",
            "settings": {
                "docs": len(docs),
                "requests": len(requests),
                "streams": widths,
                "repeats": args.repeats,
                "max_tokens": args.max_tokens,
                "sampling": "greedy",
                "constrained": True,
                "schema": str(args.schema),
                "base": base.key,
            },
            "environment": environment(args, loaded),
            "rows": rows,
        }
    )


def add_decode_rates(result: dict[str, Any]) -> dict[str, Any]:
    """Add tok/s without prefill to each streams row (idempotent).

    Prefill is the same work in every arm and barely batches on a CPU, so
    throughput without it shows what streams and speculation do to decoding.
    """
    rows = result["rows"]
    for row in rows:
        row["decode_tokens_per_s"] = _rate(row["tokens"], row["wall_s"] - row["time_split_s"]["prefill"])
    base = next(r for r in rows if r["arm"] == result["settings"]["base"])
    for row in rows:
        row["decode_ratio_vs_base"] = _ratio(row["decode_tokens_per_s"], base["decode_tokens_per_s"])
    return result


def _rate(tokens: int, seconds: float) -> float | None:
    return tokens / seconds if seconds > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def format_streams(result: dict[str, Any]) -> str:
    s, env = result["settings"], result["environment"]
    rows = add_decode_rates(result)["rows"]
    out = [
        f"bench streams: {s['requests']} requests ({s['docs']} docs cycled), {s['repeats']} repeats, max_tokens {s['max_tokens']}, "
        f"greedy, constrained; {env['device']} {env['dtype']}, {env['torch_threads']} threads",
        f"wall = median over repeats; ratios = against {s['streams'][0]} stream(s) without speculation",
        "",
        format_table(
            [
                "streams",
                "spec",
                "tokens",
                "batched fwd",
                "tok/batch fwd",
                "tok/fwd",
                "acceptance",
                "wall s",
                "prefill s",
                "tok/s",
                "ratio",
                "decode tok/s",
                "decode ratio",
                "identical",
            ],
            [
                [
                    r["streams"],
                    "on" if r["speculative"] else "off",
                    r["tokens"],
                    r["batched_forwards"],
                    f"{r['tokens_per_batched_forward']:.2f}",
                    f"{r['tokens_per_forward']:.2f}",
                    "-" if r["mean_acceptance"] is None else f"{100 * r['mean_acceptance']:.0f}%",
                    f"{r['wall_s']:.2f}",
                    f"{r['time_split_s']['prefill']:.2f}",
                    f"{r['tokens_per_s']:.1f}",
                    x_ratio(r["ratio_vs_base"]),
                    "-" if r.get("decode_tokens_per_s") is None else f"{r['decode_tokens_per_s']:.1f}",
                    x_ratio(r.get("decode_ratio_vs_base")),
                    yes_no(r["identical_to_base"]),
                ]
                for r in rows
            ],
        ),
        "",
        "tok/fwd: tokens per stream forward (one request's rows); tok/batch fwd: tokens per batched model call",
        "acceptance: accepted / drafted over all draft sources; identical: same bytes as the base row",
        "tok/s: committed tokens / wall s, prefill included; decode tok/s: tokens / (wall s - prefill s)",
    ]
    return "\n".join(out) + "\n"
