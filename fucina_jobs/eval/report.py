"""``report.md`` and ``report.html`` from ``scores.json``: tables and matplotlib plots.

The report is a function of the scores alone, so a report can be rebuilt from
any run's ``scores.json``. Both formats come from one document model; the
HTML embeds its PNGs as base64 data URIs so it opens from disk with no server,
and the Markdown links the same PNGs written under ``plots/``. Plots are drawn
on the Agg canvas (no display needed); without matplotlib the reports keep
their tables and say the plots are missing.
"""

from __future__ import annotations

import base64
import html
import io
import logging
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Sequence

log = logging.getLogger(__name__)

#: Schema features a report tables and plots (the most common); scores.json keeps them all.
TOP_FEATURES = 25
#: Causes a report lists per table (the most frequent), each with three examples.
TOP_CAUSES = 15


@dataclass
class Plot:
    name: str
    title: str
    labels: list[str]
    values: list[float]
    _: KW_ONLY
    xlabel: str
    horizontal: bool = False
    limit: float | None = None  # the axis maximum, e.g. 1.0 for rates
    reference: list[float] | None = None  # a value per bar drawn as a line (where a calibrated bar would reach)
    reference_label: str = ""


@dataclass
class Section:
    title: str
    notes: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[Any]]]] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)


def pct(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.1f}%"


def num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


# -- the document ---------------------------------------------------------------------


def build(scores: dict[str, Any]) -> list[Section]:
    sections = [_overview(scores)]
    if "conformance" in scores:
        sections.append(_conformance(scores))
    if "accuracy" in scores:
        sections.append(_accuracy(scores["accuracy"]))
    if "confidence" in scores:
        sections.append(_confidence(scores["confidence"]))
    if "efficiency" in scores:
        sections.append(_efficiency(scores["efficiency"]))
    if "grammar" in scores:
        sections.append(_grammar(scores))
    return sections


def _overview(scores: dict[str, Any]) -> Section:
    rows = [
        ["mode", scores.get("mode")],
        ["run", scores.get("run_dir")],
        ["status", scores.get("status")],
        ["content hash", scores.get("content_hash")],
        ["fingerprint", scores.get("fingerprint")],
    ]
    rows += [[k, v] for k, v in (scores.get("config") or {}).items()]
    return Section(f"Evaluation: {scores.get('name')}", tables=[(["", "value"], rows)])


def _conformance(scores: dict[str, Any]) -> Section:
    c = scores["conformance"]
    section = Section(
        "Conformance",
        tables=[
            (
                ["rows", "parse", "validate", "rejects"],
                [[c["rows"], pct(c["parse_rate"]), pct(c["validate_rate"]), c["rejects"]]],
            )
        ],
    )
    if c["rejects_by_reason"]:
        section.tables.append((["reject reason", "rows"], [[k, v] for k, v in c["rejects_by_reason"].items()]))
    relaxed = c.get("relaxed") or {}
    if relaxed.get("rows"):
        reasons = ", ".join(f"{k} {v}" for k, v in relaxed["rejects_by_reason"].items()) or "none"
        causes = ", ".join(f"{k} {v}" for k, v in relaxed["rows_by_cause"].items())
        section.notes.append(
            f"Rows decoded under a relaxed schema: {relaxed['rows']} ({causes}); {relaxed['records']} validated against the "
            f"original schema; rejects: {reasons}."
        )
    if "schema_coverage" in scores:
        s = scores["schema_coverage"]
        section.notes.append(f"Schemas compiled: {s['compiled']} of {s['schemas']} ({pct(s['coverage'])}).")
    if scores.get("by_feature"):
        table = _top(scores["by_feature"], "rows")
        section.tables.append(
            (
                [f"schema feature (top {len(table)} of {len(scores['by_feature'])})", "rows", "valid", "valid %"],
                [[k, v["rows"], v["valid"], pct(v["valid_rate"])] for k, v in table.items()],
            )
        )
        section.plots.append(
            Plot(
                "conformance_by_feature",
                f"Valid outputs, top {len(table)} schema features",
                list(table),
                [v["valid_rate"] or 0.0 for v in table.values()],
                xlabel="valid",
                horizontal=True,
                limit=1.0,
            )
        )
    return section


def _accuracy(a: dict[str, Any]) -> Section:
    fields = a["fields"]
    all_ok = a["all_fields_correct"]
    section = Section(
        "Accuracy against gold",
        notes=[
            f"All fields correct: {all_ok['correct']} of {all_ok['total']} records ({pct(all_ok['rate'])}); "
            f"numbers match within {a['numeric_tolerance']}; rejects count as wrong on every field.",
            f"Gold rows not in the run: {a['gold_not_in_run']}; run rows without gold: {a['run_rows_without_gold']}.",
        ],
    )
    mean = a.get("mean") or {}
    section.notes.append(
        f"Mean over the fields: exact match {pct(mean.get('rate'))}, spacing-insensitive {pct(mean.get('spacing_rate'))}, "
        f"token F1 of the text fields {num(mean.get('f1'))}. Spacing-insensitive strings also match with a space "
        "more or less beside a punctuation mark (`NO.3,` and `NO. 3,`); token F1 counts words and punctuation marks."
    )
    section.tables.append(
        (
            ["field", "correct", "total", "exact match", "spacing-insensitive", "token F1"],
            [[k, v["correct"], v["total"], pct(v["rate"]), pct(v.get("spacing_rate")), num(v.get("f1"))] for k, v in fields.items()],
        )
    )
    if a["wrong_fields"]:
        section.tables.append((["row", "wrong fields"], [[k, ", ".join(v)] for k, v in sorted(a["wrong_fields"].items())]))
    section.plots.append(
        Plot(
            "accuracy_per_field",
            "Exact match per field",
            list(fields),
            [v["rate"] or 0.0 for v in fields.values()],
            xlabel="exact match",
            horizontal=True,
            limit=1.0,
        )
    )
    return section


def _confidence(c: dict[str, Any]) -> Section:
    section = Section(
        "Confidence calibration",
        notes=[
            f"A field's confidence is the mean probability of its value's tokens. Over {c['fields_scored']} gold fields of records: "
            f"AUROC for field correctness {num(c['auroc'])} (0.5 is chance; the lowest token probability gives {num(c['auroc_of_min'])}), "
            f"expected calibration error {num(c['expected_calibration_error'])}. Rejects have no confidence and are left out."
            + (
                f" The share of samples that agreed on the value (decoding.samples) gives AUROC {num(c['auroc_of_agreement'])}."
                if c.get("auroc_of_agreement") is not None
                else ""
            ),
        ],
    )
    bins = [b for b in c["bins"] if b["fields"]]
    labels = [f"{b['low']:.1f}-{b['high']:.1f}" for b in bins]
    section.tables.append(
        (
            ["confidence", "fields", "mean confidence", "accuracy"],
            [[label, b["fields"], num(b["mean_confidence"]), pct(b["accuracy"])] for label, b in zip(labels, bins)],
        )
    )
    section.tables.append(
        (
            ["field", "fields", "mean confidence", "accuracy"],
            [[k, v["fields"], num(v["mean_confidence"]), pct(v["accuracy"])] for k, v in c["per_field"].items()],
        )
    )
    section.plots.append(
        Plot(
            "calibration",
            "Accuracy by confidence bin",
            labels,
            [b["accuracy"] for b in bins],
            xlabel="field confidence",
            limit=1.0,
            reference=[b["mean_confidence"] for b in bins],
            reference_label="mean confidence (calibrated: bar reaches it)",
        )
    )
    return section


def _efficiency(e: dict[str, Any]) -> Section:
    acc = e["acceptance"]
    section = Section("Efficiency")
    section.tables.append(
        (
            ["generated tokens", "tokens / record", "tokens / forward", "tok/s", "mask µs p50", "mask µs p99", "wall s"],
            [
                [
                    e["generated_tokens"],
                    num(e["tokens_per_record"], 1),
                    num(e["tokens_per_forward"]),
                    num(e["tok_s"], 1),
                    num(e["mask_us_p50"], 1),
                    num(e["mask_us_p99"], 1),
                    num(e["wall_s"], 1),
                ]
            ],
        )
    )
    section.tables.append(
        (["draft source", "drafted", "accepted", "acceptance"], [[k, v["drafted"], v["accepted"], pct(v["rate"])] for k, v in acc.items()])
    )
    shards = e["per_shard"]
    section.tables.append(
        (
            ["shard", "replica", "rows", "acceptance", "tok/s", "tokens / forward", "mask µs p50", "mask µs p99", "wall s"],
            [
                [
                    s["shard"],
                    s["replica"],
                    s["rows"],
                    pct(s["acceptance"]),
                    num(s["tok_s"], 1),
                    num(s["tokens_per_forward"]),
                    num(s["mask_us_p50"], 1),
                    num(s["mask_us_p99"], 1),
                    num(s["wall_s"], 1),
                ]
                for s in shards
            ],
        )
    )
    labels = [str(s["shard"]) for s in shards]
    section.plots += [
        Plot("acceptance_per_shard", "Draft acceptance per shard", labels, [s["acceptance"] or 0.0 for s in shards], xlabel="shard", limit=1.0),
        Plot("tok_s_per_shard", "Tokens per second per shard", labels, [s["tok_s"] or 0.0 for s in shards], xlabel="shard"),
    ]
    section.notes.append(
        "tok/s is per replica (tokens over the shard's own wall time); the run's mask µs p50 is the median "
        "of the shards' p50s and its p99 the worst shard's p99."
    )
    return section


def _grammar(scores: dict[str, Any]) -> Section:
    g, timing = scores["grammar"], scores.get("timing", {})
    section = Section(
        "Grammar-only conformance (MaskBench protocol)",
        notes=[
            f"{g['files']} schemas, {g['compiled']} compiled ({pct(g['coverage'])}), {g['relaxed']} of them relaxed; {g['instances']} instances "
            f"judged ({g['valid']} valid, {g['invalid']} invalid), {g['skipped']} skipped with their schema.",
            "Grammar verdict: the mask walk alone. Final verdict: the grammar accepts the instance and it validates against the original "
            "schema, as every record of a job must.",
            f"Unexplained causes: {len(g['unexplained'])}"
            + (f" ({', '.join(g['unexplained'][:TOP_CAUSES])}{', …' if len(g['unexplained']) > TOP_CAUSES else ''})" if g["unexplained"] else "")
            + ". Per-instance detail: verdicts/verdicts.parquet.",
        ],
    )
    section.tables.append(
        (
            ["stage", "wrong verdicts", "valid rejected", "invalid accepted"],
            [[name, s["wrong"], s["valid_rejected"], s["invalid_accepted"]] for name, s in g["stages"].items()],
        )
    )
    section.tables.append(
        (
            ["", "p50", "p99"],
            [
                ["compile ms", num((timing.get("compile_ms") or {}).get("p50")), num((timing.get("compile_ms") or {}).get("p99"))],
                ["mask µs", num((timing.get("mask_us") or {}).get("p50"), 1), num((timing.get("mask_us") or {}).get("p99"), 1)],
            ],
        )
    )
    if g["compile_errors"]:
        section.tables.append(
            (
                ["compile error cause", "schemas", "known limitation", "examples"],
                [[k, v["count"], v["known"] or "no", _examples(v)] for k, v in _causes(g["compile_errors"])],
            )
        )
    if g["relaxations"]:
        section.tables.append((["relaxation", "schemas", "examples"], [[k, v["count"], _examples(v)] for k, v in _causes(g["relaxations"])]))
    wrong = [
        [stage, k, v["count"], v.get("known") or ("–" if stage == "grammar" else "no"), _examples(v)]
        for stage, groups in g["wrong_verdicts"].items()
        for k, v in _causes(groups)
    ]
    if wrong:
        section.tables.append((["stage", "wrong verdict cause", "instances", "known limitation", "examples"], wrong))
    if "regressions" in scores:
        r = scores["regressions"]
        section.notes.append(f"Regressions against the baseline: {r['count']}.")
        if r["by_cause"]:
            section.tables.append((["regression", "count", "examples"], [[k, v["count"], _examples(v)] for k, v in _causes(r["by_cause"])]))
    features = _top(g["by_feature"], "files")
    section.tables.append(
        (
            [
                f"schema feature (top {len(features)} of {len(g['by_feature'])})",
                "schemas",
                "compile errors",
                "relaxed",
                "instances",
                "final correct %",
            ],
            [[k, v["files"], v["compile_errors"], v["relaxed"], v["instances"], pct(v["correct_rate"])] for k, v in features.items()],
        )
    )
    section.plots.append(
        Plot(
            "conformance_by_feature",
            f"Correct final verdicts, top {len(features)} schema features",
            list(features),
            [v["correct_rate"] if v["correct_rate"] is not None else 0.0 for v in features.values()],
            xlabel="correct final verdicts",
            horizontal=True,
            limit=1.0,
        )
    )
    return section


def _top(table: dict[str, dict[str, Any]], key: str, n: int = TOP_FEATURES) -> dict[str, dict[str, Any]]:
    """The ``n`` most common entries (by ``key``); the full table stays in scores.json."""
    return dict(sorted(table.items(), key=lambda kv: (-kv[1][key], kv[0]))[:n])


def _causes(groups: dict[str, dict[str, Any]], n: int = TOP_CAUSES) -> list[tuple[str, dict[str, Any]]]:
    """The ``n`` most frequent causes, then one row for the rest; scores.json keeps them all."""
    rows = list(groups.items())
    if len(rows) <= n:
        return rows
    rest = rows[n:]
    return rows[:n] + [(f"({len(rest)} other causes: see scores.json)", {"count": sum(v["count"] for _, v in rest), "examples": [], "known": "–"})]


def _examples(group: dict[str, Any], width: int = 90) -> str:
    return "; ".join(e if len(e) <= width else e[: width - 1] + "…" for e in group["examples"])


# -- rendering ------------------------------------------------------------------------


def render_png(plot: Plot) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(1, len(plot.labels))
    fig = Figure(figsize=(7, max(2.5, 0.28 * n + 1.2)) if plot.horizontal else (max(4.5, 0.45 * n + 2), 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if plot.horizontal:
        ax.barh(range(len(plot.values)), plot.values, color="#4c72b0")
        ax.set_yticks(range(len(plot.labels)), plot.labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(plot.xlabel)
        if plot.limit:
            ax.set_xlim(0, plot.limit)
    else:
        ax.bar(range(len(plot.values)), plot.values, color="#4c72b0")
        ax.set_xticks(range(len(plot.labels)), plot.labels, fontsize=8)
        ax.set_xlabel(plot.xlabel)
        if plot.limit:
            ax.set_ylim(0, plot.limit)
        if plot.reference is not None:
            ax.plot(range(len(plot.reference)), plot.reference, "o--", color="#c44e52", label=plot.reference_label)
            ax.legend(fontsize=8, loc="upper left")
    ax.set_title(plot.title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _cell_md(value: Any) -> str:
    return str("–" if value is None else value).replace("|", "\\|").replace("\n", " ")


def to_markdown(sections: Sequence[Section], images: dict[str, str]) -> str:
    lines: list[str] = []
    for i, s in enumerate(sections):
        lines += [("# " if i == 0 else "## ") + s.title, ""]
        for note in s.notes:
            lines += [note, ""]
        for headers, rows in s.tables:
            lines += ["| " + " | ".join(map(_cell_md, headers)) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(map(_cell_md, row)) + " |" for row in rows]
            lines.append("")
        for p in s.plots:
            lines += [f"![{p.title}]({images[p.name]})" if p.name in images else f"*{p.title}: no plot (matplotlib is not installed)*", ""]
    return "\n".join(lines)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.2em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.9em}
th{background:#f3f3f3}img{display:block;margin:.5em 0 1.5em;max-width:100%}code{font-size:.9em}"""


def to_html(sections: Sequence[Section], images: dict[str, bytes]) -> str:
    esc = lambda v: html.escape(str("–" if v is None else v))  # noqa: E731
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>", f"<title>{esc(sections[0].title)}</title><style>{_CSS}</style></head><body>"]
    for i, s in enumerate(sections):
        tag = "h1" if i == 0 else "h2"
        parts.append(f"<{tag}>{esc(s.title)}</{tag}>")
        parts += [f"<p>{esc(n)}</p>" for n in s.notes]
        for headers, rows in s.tables:
            parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows]
            parts.append("</table>")
        for p in s.plots:
            if p.name in images:
                data = base64.b64encode(images[p.name]).decode()
                parts.append(f"<img alt='{esc(p.title)}' src='data:image/png;base64,{data}'>")
            else:
                parts.append(f"<p><em>{esc(p.title)}: no plot (matplotlib is not installed)</em></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def report_files(scores: dict[str, Any]) -> dict[str, bytes]:
    """``report.md``, ``report.html`` and ``plots/*.png``, by name in the run's folder (``runs.Run.write`` writes them)."""
    sections = build(scores)
    pngs: dict[str, bytes] = {}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'fucina_jobs[report]'): the reports have no plots")
    else:
        pngs = {p.name: render_png(p) for s in sections for p in s.plots}
    files = {f"plots/{name}.png": data for name, data in pngs.items()}
    files["report.md"] = to_markdown(sections, {name: f"plots/{name}.png" for name in pngs}).encode()
    files["report.html"] = to_html(sections, pngs).encode()
    return files
