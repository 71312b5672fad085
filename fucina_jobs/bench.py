"""``python -m fucina_jobs bench``: decoder benchmarks on the shipped invoice job.

Two subcommands, each printing one aligned text table set (or ``--json``):

``decode``
    Single stream, greedy, over the first ``--docs`` invoice documents. Four
    arms: plain unconstrained, plain constrained, speculative constrained
    without grammar drafting, speculative constrained with grammar drafting.
    Reports forwards, tokens, tokens per forward, per-source acceptance,
    median wall time, the wall ratio against plain constrained and whether the
    output is byte-identical to plain constrained; then where the time goes
    (prefill, decode forwards, logit processor, the rest) and the processor
    time per token (the constraint's mask + apply overhead).

``streams``
    Aggregate throughput for several ``--streams`` values, speculation off and
    on, constrained and greedy, over a request set with at least
    ``max(streams)`` requests (documents are cycled under distinct ids).

Noise control: the machine is assumed to be shared, so every table compares
arms measured side by side in one run. Arms alternate (document by document
for ``decode``, run by run for ``streams``, with the order rotated each time)
and wall times are medians over ``--repeats``.

``OMP_WAIT_POLICY=PASSIVE`` is set below, before torch is imported, unless the
environment already sets it. libgomp reads it once, when torch is first
imported: when this module is imported after torch (from a test or a notebook)
the setting has no effect, so export it in the shell instead.
"""

from __future__ import annotations

import os
import sys

_TORCH_PRELOADED = "torch" in sys.modules
_USER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
if _USER_WAIT_POLICY is None:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Sequence  # noqa: E402

from . import bench_pipeline  # noqa: E402

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JOB = _ROOT / "jobs" / "invoices"
DEFAULT_SCHEMA = _ROOT / "schemas" / "invoice.json"


def wait_policy_note() -> str:
    """How OMP_WAIT_POLICY stands for this process, in words."""
    if _USER_WAIT_POLICY is not None:
        return f"{_USER_WAIT_POLICY} (from the environment)"
    if _TORCH_PRELOADED:
        return "default (torch was imported before fucina_jobs.bench: export OMP_WAIT_POLICY=PASSIVE)"
    return "PASSIVE (set by fucina_jobs.bench)"


# -- inputs ------------------------------------------------------------------


@dataclass
class Doc:
    id: str
    user: str


def load_docs(job: Path, n: int) -> tuple[str, list[Doc]]:
    """The job's system prompt and its first ``n`` user messages."""
    system = (job / "system.txt").read_text(encoding="utf-8")
    template = (job / "template.txt").read_text(encoding="utf-8")
    docs = []
    with open(job / "inputs.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                docs.append(Doc(row["id"], template.format(text=row["text"])))
    if n > len(docs):
        log.warning("--docs %d asked for, the job has %d documents: using %d", n, len(docs), len(docs))
    return system, docs[:n]


def cycle_docs(docs: Sequence[Doc], n: int) -> list[Doc]:
    """At least ``n`` requests: the documents, cycled, each copy under a distinct id."""
    out = []
    for i in range(max(n, len(docs))):
        doc = docs[i % len(docs)]
        copy = i // len(docs)
        out.append(Doc(doc.id if copy == 0 else f"{doc.id}#{copy}", doc.user))
    return out


# -- instrumentation -----------------------------------------------------------


class ForwardClock:
    """Wraps a runner's ``forward`` to split model time into prefill and decode."""

    def __init__(self, runner: Any):
        self.reset()
        inner = runner.forward

        def forward(batch, *, logits: bool = True):
            start = time.perf_counter()
            try:
                return inner(batch, logits=logits)
            finally:
                elapsed = time.perf_counter() - start
                if logits:
                    self.decode_s += elapsed
                    self.decode_calls += 1
                else:
                    self.prefill_s += elapsed

        runner.forward = forward

    def reset(self) -> None:
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.decode_calls = 0


@dataclass
class Arm:
    key: str
    label: str
    spec: Any  # SpecConfig | None
    constrained: bool
    engine: Any = None
    clock: ForwardClock | None = None
    walls: list[float] = field(default_factory=list)  # one total per repeat
    prefill: list[float] = field(default_factory=list)
    decode: list[float] = field(default_factory=list)
    processor: list[float] = field(default_factory=list)
    completions: list[list[Any]] = field(default_factory=list)  # [repeat][doc or request]
    streams: int = 1
    steps: list[int] = field(default_factory=list)  # batched forwards per repeat


def _setup_torch(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _load(args: argparse.Namespace):
    from .models.loading import load_model

    _setup_torch(args.threads)
    log.info("loading model %s (%s, %s)", args.model, args.device, args.dtype)
    return load_model(args.model, args.device, args.dtype)


def _engine(loaded: Any, spec: Any, streams: int = 1):
    from .decoding.sampler import SamplingParams
    from .engine import FucinaEngine

    engine = FucinaEngine(loaded, params=SamplingParams(), spec=spec, streams=streams)
    return engine, ForwardClock(engine.runner)


def _prompts(docs: Sequence[Doc], system: str, constraint: Any, max_tokens: int):
    from .engine import Prompt

    return [Prompt(d.id, d.user, system, constraint, seed=0, max_tokens=max_tokens) for d in docs]


def _rotate(items: list, k: int) -> list:
    k %= len(items)
    return items[k:] + items[:k]


def _acceptance(completions: Sequence[Any]) -> dict[str, dict[str, float]]:
    drafted: dict[str, int] = {}
    accepted: dict[str, int] = {}
    for c in completions:
        for src, n in c.stats.drafted.items():
            drafted[src] = drafted.get(src, 0) + n
        for src, n in c.stats.accepted.items():
            accepted[src] = accepted.get(src, 0) + n
    return {
        src: {"accepted": accepted.get(src, 0), "drafted": n, "rate": accepted.get(src, 0) / n if n else 0.0}
        for src, n in sorted(drafted.items())
    }


def _mean_acceptance(acc: dict[str, dict[str, float]]) -> float | None:
    drafted = sum(v["drafted"] for v in acc.values())
    return sum(v["accepted"] for v in acc.values()) / drafted if drafted else None


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x.text.encode() == y.text.encode() and x.tokens == y.tokens for x, y in zip(a, b))


def _environment(args: argparse.Namespace, loaded: Any) -> dict[str, Any]:
    import torch

    return {
        "date": args.started,
        "model": loaded.path,
        "device": str(loaded.device),
        "dtype": args.dtype,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "omp_wait_policy": wait_policy_note(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


# -- bench decode ----------------------------------------------------------------


def run_decode(args: argparse.Namespace) -> dict[str, Any]:
    from .decoding.batch import SpecConfig

    system, docs = load_docs(args.job, args.docs)
    loaded = _load(args)
    arms = [
        Arm("plain_unconstrained", "plain unconstrained", None, False),
        Arm("plain_constrained", "plain constrained", None, True),
        Arm("spec_no_grammar_drafting", "spec, no grammar drafting", SpecConfig(grammar_drafting=False), True),
        Arm("spec_grammar_drafting", "spec + grammar drafting", SpecConfig(), True),
    ]
    constraint = None
    for arm in arms:
        arm.engine, arm.clock = _engine(loaded, arm.spec)
        if constraint is None:
            log.info("compiling %s", args.schema)
            constraint = arm.engine.constraint(json_schema=Path(args.schema))
    prompts = {arm.key: _prompts(docs, system, constraint if arm.constrained else None, args.max_tokens) for arm in arms}

    if args.warmup:
        log.info("warm-up: one short generation per arm")
        for arm in arms:
            p = prompts[arm.key][0]
            warm = _prompts([Doc(p.id, p.text)], system, p.constraint, min(8, args.max_tokens))
            list(arm.engine.generate(warm))

    for r in range(args.repeats):
        for arm in arms:
            arm.walls.append(0.0)
            arm.prefill.append(0.0)
            arm.decode.append(0.0)
            arm.processor.append(0.0)
            arm.completions.append([])
        for d in range(len(docs)):
            for arm in _rotate(arms, r + d):
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
            log.info("repeat %d/%d: doc %d/%d done", r + 1, args.repeats, d + 1, len(docs))
        log.info("repeat %d/%d: %s", r + 1, args.repeats, ", ".join(f"{a.label} {a.walls[r]:.1f}s" for a in arms))

    reference = next(a for a in arms if a.key == "plain_constrained")
    ref_wall = statistics.median(reference.walls)
    rows = []
    for arm in arms:
        first = arm.completions[0]
        stable = all(_same(first, later) for later in arm.completions[1:])
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
                "speculative": arm.spec is not None,
                "grammar_drafting": bool(arm.spec and arm.spec.grammar_drafting),
                "docs": len(first),
                "forwards": forwards,
                "tokens": tokens,
                "tokens_per_forward": tokens / forwards if forwards else 0.0,
                "acceptance": _acceptance(first),
                "wall_s": wall,
                "wall_s_repeats": arm.walls,
                "wall_ratio": wall / ref_wall if ref_wall else None,
                "ms_per_token": 1000 * wall / tokens if tokens else None,
                "identical_to_plain_constrained": None if not arm.constrained else all(_same(rep, reference.completions[0]) for rep in arm.completions),
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
                    "p50": 1e6 * _percentile(proc, 50) if proc else None,
                    "p99": 1e6 * _percentile(proc, 99) if proc else None,
                },
            }
        )
    ref_row = next(r for r in rows if r["arm"] == "plain_constrained")
    all_proc = [s for a in arms if a.constrained for rep in a.completions for c in rep for s in c.stats.process_seconds]
    overhead = {
        "processor_us_mean": 1e6 * statistics.fmean(all_proc) if all_proc else None,
        "processor_us_p50": 1e6 * _percentile(all_proc, 50) if all_proc else None,
        "processor_us_p99": 1e6 * _percentile(all_proc, 99) if all_proc else None,
        "processor_calls": len(all_proc),
        "plain_constrained_wall_ms_per_forward": 1000 * ref_row["wall_s"] / ref_row["forwards"] if ref_row["forwards"] else None,
        "plain_constrained_decode_forward_ms": 1000 * sum(reference.decode) / max(1, sum(c.stats.forwards for rep in reference.completions for c in rep)),
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
        "environment": _environment(args, loaded),
        "rows": rows,
        "mask_overhead": overhead,
    }


def _acc_cell(acc: dict[str, dict[str, float]], source: str) -> str:
    if source not in acc or not acc[source]["drafted"]:
        return "-"
    a = acc[source]
    return f"{a['accepted']}/{a['drafted']} ({100 * a['rate']:.0f}%)"


def _yes_no(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def format_decode(result: dict[str, Any]) -> str:
    rows = result["rows"]
    s, env = result["settings"], result["environment"]
    out = [
        f"bench decode: {s['docs']} docs, {s['repeats']} repeats, max_tokens {s['max_tokens']}, greedy, 1 stream; "
        f"{env['device']} {env['dtype']}, {env['torch_threads']} threads",
        "wall = median over repeats; vs plain-c = wall ratio against plain constrained; identical = same bytes as plain constrained",
        "",
        format_table(
            ["arm", "forwards", "tokens", "tok/fwd", "forced acc", "ngram acc", "wall s", "vs plain-c", "ms/tok", "identical"],
            [
                [
                    r["label"],
                    r["forwards"],
                    r["tokens"],
                    f"{r['tokens_per_forward']:.2f}",
                    _acc_cell(r["acceptance"], "forced"),
                    _acc_cell(r["acceptance"], "ngram"),
                    f"{r['wall_s']:.2f}",
                    f"{r['wall_ratio']:.2f}x",
                    f"{r['ms_per_token']:.1f}" if r["ms_per_token"] else "-",
                    _yes_no(r["identical_to_plain_constrained"]),
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
    return "\n".join(out) + "\n"


# -- bench streams -----------------------------------------------------------------


def run_streams(args: argparse.Namespace) -> dict[str, Any]:
    from .decoding.batch import SpecConfig

    widths = args.streams
    system, docs = load_docs(args.job, args.docs)
    requests = cycle_docs(docs, max(widths))
    loaded = _load(args)
    arms: list[Arm] = []
    constraint = None
    for width in widths:
        for spec in (None, SpecConfig()):
            on = "on" if spec else "off"
            arm = Arm(f"streams{width}_spec_{on}", f"{width} streams, spec {on}", spec, True, streams=width)
            arm.engine, arm.clock = _engine(loaded, spec, width)
            if constraint is None:
                log.info("compiling %s", args.schema)
                constraint = arm.engine.constraint(json_schema=Path(args.schema))
            arms.append(arm)
    prompts = _prompts(requests, system, constraint, args.max_tokens)

    if args.warmup:
        # One short batched generation warms the shared model for every arm.
        warm = max(arms, key=lambda a: (a.streams, a.spec is not None))
        log.info("warm-up: one short generation (%s)", warm.label)
        list(warm.engine.generate(_prompts(requests[: min(2, warm.streams)], system, constraint, min(8, args.max_tokens))))

    for r in range(args.repeats):
        for i, arm in enumerate(_rotate(arms, r)):
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
            errors = [c for c in completions if c.finish_reason == "error"]
            for c in errors:
                log.warning("%s %s: error: %s", arm.label, c.id, c.error)
            log.info("repeat %d/%d, arm %d/%d: %s: %.1fs", r + 1, args.repeats, i + 1, len(arms), arm.label, wall)

    base = next(a for a in arms if a.streams == widths[0] and a.spec is None)
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
        acc = _acceptance(first)
        rows.append(
            {
                "arm": arm.key,
                "streams": arm.streams,
                "speculative": arm.spec is not None,
                "requests": len(first),
                "tokens": tokens,
                "batched_forwards": arm.steps[0],
                "tokens_per_batched_forward": tokens / arm.steps[0] if arm.steps[0] else 0.0,
                "tokens_per_forward": tokens / stream_forwards if stream_forwards else 0.0,
                "acceptance": acc,
                "mean_acceptance": _mean_acceptance(acc),
                "wall_s": wall,
                "wall_s_repeats": arm.walls,
                "tokens_per_s": tps,
                "time_split_s": {
                    "prefill": statistics.median(arm.prefill),
                    "decode_forwards": statistics.median(arm.decode),
                    "processor": statistics.median(arm.processor),
                },
                "identical_to_base": all(_same(rep, base.completions[0]) for rep in arm.completions),
            }
        )
    for row in rows:
        row["ratio_vs_base"] = row["tokens_per_s"] / base_tps if base_tps else None
    return add_decode_rates({
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
        "environment": _environment(args, loaded),
        "rows": rows,
    })


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


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_streams(result: dict[str, Any]) -> str:
    s, env = result["settings"], result["environment"]
    rows = add_decode_rates(result)["rows"]
    out = [
        f"bench streams: {s['requests']} requests ({s['docs']} docs cycled), {s['repeats']} repeats, max_tokens {s['max_tokens']}, "
        f"greedy, constrained; {env['device']} {env['dtype']}, {env['torch_threads']} threads",
        f"wall = median over repeats; ratios = against {s['streams'][0]} stream(s) without speculation",
        "",
        format_table(
            ["streams", "spec", "tokens", "batched fwd", "tok/batch fwd", "tok/fwd", "acceptance", "wall s", "prefill s", "tok/s", "ratio", "decode tok/s", "decode ratio", "identical"],
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
                    _x(r["ratio_vs_base"]),
                    "-" if r.get("decode_tokens_per_s") is None else f"{r['decode_tokens_per_s']:.1f}",
                    _x(r.get("decode_ratio_vs_base")),
                    _yes_no(r["identical_to_base"]),
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


# -- shared ----------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned text: first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("stream counts must be positive integers")
    return values


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text}")
    return value


EPILOG = """\
examples:
  python -m fucina_jobs bench decode                     # 8 docs, 3 repeats, 4 arms
  python -m fucina_jobs bench decode --docs 24 --json
  python -m fucina_jobs bench streams --streams 1,2,4,8 --docs 8
  python -m fucina_jobs bench decode --model DIR --dtype float64 --docs 2 --max-tokens 24
  .venv-vllm/bin/python -m fucina_jobs bench engines --streams 8 --docs 8

Tables go to stdout, progress to stderr (-q for warnings only).
OMP_WAIT_POLICY=PASSIVE (no busy-waiting OpenMP threads, which matters on a
shared CPU) is set for this process when the environment leaves it unset.
libgomp reads it when torch is first imported, so this works for
`python -m fucina_jobs bench` but not when bench.main() is called after torch
was imported: export OMP_WAIT_POLICY=PASSIVE in the shell for that case.
"""


def _add_command(sub: Any, common: argparse.ArgumentParser, name: str, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        parents=[common],
        help=help,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(description, 78),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fucina_jobs bench",
        description=textwrap.fill(
            "Benchmark the constrained speculative decoder on the shipped invoice job (jobs/invoices, constrained "
            "by schemas/invoice.json), greedy decoding. Arms are measured side by side in one run, alternating, "
            "and wall times are medians over --repeats, so a table stays comparable on a shared, noisy machine.",
            78,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--max-tokens", type=_positive, default=256, help="generation cap per request (default 256)")
    common.add_argument("--json", action="store_true", help="print one JSON object instead of the text tables")
    common.add_argument("--save", type=Path, metavar="FILE", help="also write the JSON object to FILE")
    common.add_argument("--model", default="default", help="model source: 'default' (SmolLM2-135M-Instruct), a model directory or a hub id")
    common.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"], help="model dtype (default float32)")
    common.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="model device (default auto)")
    common.add_argument("--threads", type=_positive, default=2, help="torch intra-op threads (default 2)")
    common.add_argument("--job", type=Path, default=DEFAULT_JOB, help="job directory with inputs.jsonl, system.txt, template.txt (default: jobs/invoices)")
    common.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="JSON schema that constrains the output (default: schemas/invoice.json)")
    common.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the short untimed generation per arm")
    common.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")

    sub = parser.add_subparsers(dest="command", required=True, metavar="{decode,streams,engines,pipeline}")
    decode = _add_command(
        sub,
        common,
        "decode",
        "one stream: plain vs speculative decoding, constraint overhead",
        "One stream, greedy, four arms per document: plain unconstrained, plain constrained, speculative "
        "constrained without grammar drafting (prompt-lookup n-grams only), speculative constrained with "
        "grammar drafting (forced tokens + n-grams). Reports forwards, tokens, tokens/forward, acceptance "
        "per draft source, median wall, wall ratio vs plain constrained, byte identity with plain constrained, "
        "a time split and the logit processor's time per token.",
    )
    decode.add_argument("--docs", type=_positive, default=8, help="first N invoice documents (default 8 of 24)")
    decode.add_argument("--repeats", type=_positive, default=3, help="timed passes over the documents (default 3)")
    streams = _add_command(
        sub,
        common,
        "streams",
        "aggregate throughput of N concurrent streams, speculation off and on",
        "Constrained, greedy decoding of a request set with several stream counts, speculation off and on. "
        "Documents are cycled under distinct ids until there are at least max(--streams) requests. Reports "
        "aggregate committed tokens/s, tokens per forward, mean acceptance and the tok/s ratio against the "
        "first --streams value without speculation.",
    )
    streams.add_argument("--docs", type=_positive, default=8, help="distinct invoice documents to cycle (default 8)")
    streams.add_argument("--streams", type=_int_list, default=[1, 2, 4, 8, 16], help="comma-separated stream counts (default 1,2,4,8,16)")
    streams.add_argument("--repeats", type=_positive, default=1, help="timed passes per arm (default 1)")
    engines = _add_command(
        sub,
        common,
        "engines",
        "fucina vs vLLM vs transformers generate, side by side",
        "The same model, prompts, schema and stream count through: the fucina engine (plain constrained, "
        "speculative with grammar drafting on 1 and on --streams streams), vLLM (structured outputs, and with "
        "n-gram speculation) and transformers generate with an llguidance logits processor. Each engine runs "
        "in a worker process of its own; arms alternate and the table shows medians. Reports tok/s, tokens "
        "per forward, acceptance, % valid outputs and the ratio against vLLM structured + n-gram. The vLLM "
        "arms need the vLLM extra (run with .venv-vllm/bin/python); without it they are left out.",
    )
    engines.add_argument("--docs", type=_positive, default=8, help="first N invoice documents (default 8)")
    engines.add_argument("--streams", type=_positive, default=8, help="concurrent streams for the batched arms (default 8)")
    engines.add_argument("--repeats", type=_positive, default=3, help="timed passes per arm (default 3)")
    engines.add_argument("--vllm-draft", type=_positive, default=4, help="vLLM n-gram speculative tokens (default 4)")
    bench_pipeline.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pipeline":
        return bench_pipeline.main(args)
    args.started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    if _TORCH_PRELOADED and _USER_WAIT_POLICY is None:
        log.warning("torch was imported before fucina_jobs.bench, so OMP_WAIT_POLICY=PASSIVE cannot take effect: export it")
    if args.command == "engines":
        from .bench_engines import format_engines, run_engines

        result, text = run_engines(args, *load_docs(args.job, args.docs)), format_engines
    else:
        result, text = (run_decode(args), format_decode) if args.command == "decode" else (run_streams(args), format_streams)
    if args.save:
        args.save.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text(result))
    return 0
