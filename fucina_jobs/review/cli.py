"""``review RUN_DIR [--limit N]``: a run's least certain values first, for a person to check.

Reads the records' confidence columns (``fucina_jobs.confidence``) and needs
no model and no gold labels: the values the model was least sure of are the
ones most worth a look.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..confidence import leaves
from ..eval.runs import read_run
from ..eval.sources import BASE_HELP

_WIDTH = 60  # characters of a value shown


def least_certain(records: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """One row per value (record, field, value, confidence), the least certain first.

    A JSON value is shown as its JSON text, a regex group as its column; a
    record without per-field confidence (a Lark job) is one row for its whole text."""
    rows = []
    for record in records:
        per_field = dict(record.get("field_confidence_mean") or [])
        if per_field:
            values = _values(record)
            rows += [_row(record, path, values.get(path, ""), conf) for path, conf in per_field.items()]
        elif record.get("record_confidence") is not None:
            rows.append(_row(record, "", record["text"], record["record_confidence"]))
    rows.sort(key=lambda r: (r["confidence"], r["row_id"], r["field"]))
    return rows[:limit]


def _values(record: Mapping[str, Any]) -> dict[str, str]:
    text = record["text"]
    try:
        return {leaf.path: text[leaf.start : leaf.end] for leaf in leaves(text)}
    except ValueError:  # a regex job: its named groups are the record's columns
        return {k: str(v) for k, v in record.items() if isinstance(v, str)}


def _row(record: Mapping[str, Any], field: str, value: str, conf: float) -> dict[str, Any]:
    return {"record_id": record["record_id"], "row_id": record["row_id"], "field": field, "value": value, "confidence": conf}


def format_review(rows: Sequence[Mapping[str, Any]]) -> str:
    headers = ["confidence", "record_id", "row_id", "field", "value"]
    cells = [[f"{r['confidence']:.3f}", r["record_id"], str(r["row_id"]), r["field"], _short(r["value"])] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *cells]) + "\n"


def _short(value: str) -> str:
    value = " ".join(value.split())
    return value if len(value) <= _WIDTH else value[: _WIDTH - 1] + "…"


def review_command(argv: list[str]) -> int:
    from ..eval.arguments import ArgumentParser, positive_int
    from ..config import ConfigError

    parser = ArgumentParser(
        prog="python -m fucina_jobs review",
        description="List a run's least certain values first: confidence, record, field, value. "
        "RUN_DIR is a run's output.dir, a local folder or a URI (s3://...).",
    )
    parser.add_argument("run_dir")
    parser.add_argument("--limit", type=positive_int, default=20, help="show at most this many values (default 20)")
    parser.add_argument(
        "--html", type=Path, metavar="OUT.html", help="write the review page instead: every row, its source text with its values highlighted"
    )
    parser.add_argument("--base", type=Path, default=Path.cwd(), help=BASE_HELP)
    args = parser.parse_args(argv)
    try:
        run = read_run(args.run_dir)
    except (ConfigError, OSError) as err:  # a file, a store out of reach, a damaged shard
        sys.stderr.write(f"review: {err}\n")
        return 2
    if not run.dir.shard_files("records"):
        sys.stderr.write(f"review: {args.run_dir} holds no records/; give the output.dir of a run\n")
        return 2
    if args.html:
        from .page import page_command

        return page_command(run, args.base, args.html)
    rows = least_certain(run.records, args.limit)
    if not rows:
        sys.stderr.write(f"review: the records in {args.run_dir} carry no confidence (a run from before confidence was recorded?)\n")
        return 1
    sys.stdout.write(format_review(rows))
    return 0
