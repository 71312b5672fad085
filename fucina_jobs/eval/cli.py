"""``eval conf=NAME [overrides]`` and ``compare RUN_A RUN_B``: the evaluation commands.

``eval`` goes through the same Hydra composition as ``run`` (``pipeline.cli.hydra_command``);
its stdout is a short score summary, logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def eval_command(argv: list[str]) -> int:
    from ..pipeline import hydra_command

    return hydra_command("eval", argv, _eval_task)


def _eval_task(cfg: Any, resolved: dict[str, Any]) -> int:
    from .evaluate import evaluate

    result = evaluate(cfg, Path.cwd(), resolved)
    sys.stdout.write(summary(result.scores, cfg.eval.report) + "\n")
    return 0 if result.ok else 1


def summary(scores: dict[str, Any], reports: bool = True) -> str:
    """A few lines for the terminal; the full story is in scores.json and (``reports``) report.html."""
    from .report import num, pct

    run = scores["run_dir"]
    lines = [f"{scores['name']} ({scores['mode']}): {run}", f"content hash {scores['content_hash']}"]
    if "conformance" in scores:
        c = scores["conformance"]
        reasons = ", ".join(f"{k} {v}" for k, v in c["rejects_by_reason"].items()) or "none"
        relaxed = c.get("relaxed") or {}
        lines.append(
            f"conformance: {c['rows']} rows, parse {pct(c['parse_rate'])}, validate {pct(c['validate_rate'])}; rejects: {reasons}"
            + (f"; relaxed schema: {relaxed['rows']} rows, {relaxed['records']} valid" if relaxed.get("rows") else "")
        )
    if "schema_coverage" in scores:
        lines.append(f"schemas compiled: {pct(scores['schema_coverage']['coverage'])}")
    if "accuracy" in scores:
        a = scores["accuracy"]
        fields = ", ".join(
            f"{k} {pct(v['rate'])}" + (f" (items F1 {num(v['item_f1'])})" if v.get("item_f1") is not None else "") for k, v in a["fields"].items()
        )
        mean = a.get("mean") or {}
        lines.append(
            f"accuracy: all fields correct {pct(a['all_fields_correct']['rate'])} of {a['rows_scored']}; {fields}; "
            f"mean {pct(mean.get('rate'))} (spacing-insensitive {pct(mean.get('spacing_rate'))}, token F1 {num(mean.get('f1'))}, "
            f"field score {pct(mean.get('score'))})"
        )
    if "confidence" in scores:
        c = scores["confidence"]
        agreement = f" (samples' agreement: {num(c['auroc_of_agreement'])})" if c.get("auroc_of_agreement") is not None else ""
        lines.append(
            f"confidence: AUROC {num(c['auroc'])}{agreement} for field correctness over {c['fields_scored']} fields, "
            f"calibration error {num(c['expected_calibration_error'])}"
        )
    if "spans" in scores:
        s = scores["spans"]
        lines.append(
            f"spans: {s['values']} grounded values, {s['located']} at their span, {s['allowed_unwritten']} allowed values the text "
            f"does not write, {s['mismatched']} whose text[start:end] does not write the value"
        )
    if "efficiency" in scores and scores["efficiency"]["shards"]:
        e = scores["efficiency"]
        lines.append(
            f"efficiency: {num(e['tokens_per_record'], 1)} tokens/record, {num(e['tokens_per_forward'])} tokens/forward, "
            f"acceptance {pct(e['acceptance']['all']['rate'])}, {num(e['tok_s'], 1)} tok/s, mask p50/p99 "
            f"{num(e['mask_us_p50'], 1)}/{num(e['mask_us_p99'], 1)} µs"
        )
    if "grammar" in scores:
        g, t = scores["grammar"], scores["timing"]
        stages = g["stages"]
        lines.append(
            f"grammar: {g['files']} schemas, {g['compiled']} compiled ({pct(g['coverage'])}), {g['relaxed']} relaxed; "
            f"{g['instances']} instances, wrong verdicts: grammar {stages['grammar']['wrong']}, final {stages['final']['wrong']} "
            f"({stages['final']['invalid_accepted']} invalid accepted)"
        )
        lines.append(f"compile errors by cause: {_counts(g['compile_errors'])}")
        lines.append(f"wrong final verdicts by cause: {_counts(g['wrong_verdicts']['final'])}; unexplained: {_first(g['unexplained'])}")
        if "regressions" in scores:
            lines.append(
                f"regressions against {scores['config']['baseline']}: {scores['regressions']['count']} ({_counts(scores['regressions']['by_cause'])})"
            )
        lines.append(
            f"timing: compile p50/p99 {num(t['compile_ms']['p50'])}/{num(t['compile_ms']['p99'])} ms, "
            f"mask p50/p99 {num(t['mask_us']['p50'], 1)}/{num(t['mask_us']['p99'], 1)} µs"
        )
    outputs = ["scores.json"] + (["report.md", "report.html"] if reports else [])
    lines.append("wrote " + ", ".join(f"{run}/{p}" for p in outputs))
    return "\n".join(lines)


def _counts(groups: dict[str, dict[str, Any]], top: int = 3) -> str:
    """``cause N, cause N, +k more`` for the most frequent causes; the full list is in the report."""
    if not groups:
        return "none"
    shown = [f"{k} {v['count']}" for k, v in list(groups.items())[:top]]
    return ", ".join(shown) + (f", +{len(groups) - top} more" if len(groups) > top else "")


def _first(items: list[str], top: int = 3) -> str:
    if not items:
        return "none"
    return ", ".join(items[:top]) + (f", +{len(items) - top} more" if len(items) > top else "")


def compare_command(argv: list[str]) -> int:
    from .arguments import ArgumentParser, positive_int
    from ..config import ConfigError
    from .compare import compare, format_comparison

    parser = ArgumentParser(
        prog="python -m fucina_jobs compare",
        description="Tell whether two runs output the same (content hash); show differing scores and records. "
        "Exit 0 identical, 1 different, 2 usage error. A run is a local folder or a URI (s3://...).",
    )
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--limit", type=positive_int, default=20, help="show at most this many differing scores and records")
    args = parser.parse_args(argv)
    try:
        result = compare(args.run_a, args.run_b)
    except (ConfigError, OSError) as err:  # no run there, a file, a store out of reach, a damaged shard
        sys.stderr.write(f"compare: {err}\n")
        return 2
    sys.stdout.write(format_comparison(result, args.run_a, args.run_b, args.limit))
    return 0 if result.identical else 1
