"""``python -m fucina_jobs bench occupancy``: how busy a replica keeps its streams, one shard held at a time or more.

It runs the shipped invoice job (conf/extract_invoices: 4 streams, shards of 8
rows, so a shard is twice the streams) once per ``runtime.shards_in_flight``
value, in one process, on the same rows. With one shard held, a replica's
decoder drains at each shard's end, as every replica did before issue 13; with
two, the next shard's rows take the streams the last one frees. Per arm it
reports each shard's occupancy (mean live streams per step over
``runtime.streams``), their mean, wall time, and the records' content hash,
which must not depend on the arm.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .inputs import DEFAULT_JOB
from .tables import format_table


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "occupancy", help="stream occupancy per shard, one shard held per replica vs two", description=__doc__.split("\n\n")[1].replace("\n", " ")
    )
    p.add_argument("--rows", type=int, default=24, help="rows: the 24 shipped invoices, cycled under new ids past 24 (default 24)")
    p.add_argument("--held", default="1,2", help="runtime.shards_in_flight values, one arm each (default 1,2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def run_occupancy(args: argparse.Namespace) -> dict[str, Any]:
    from ..eval.runs import content_hash, read_run

    work = Path(tempfile.mkdtemp(prefix="fucina-bench-occupancy-"))
    try:
        data = work / "inputs.jsonl"
        _rows(data, args.rows)
        arms = []
        for held in (int(v) for v in args.held.split(",")):
            out = work / f"held-{held}"
            start = time.perf_counter()
            summary = _job(data, out, held).run()
            wall = time.perf_counter() - start
            shards = _occupancies(out)
            arms.append(
                {
                    "held": held,
                    "shards": len(shards),
                    "occupancy_mean": sum(shards) / len(shards),
                    "occupancy_min": min(shards),
                    "occupancy_per_shard": shards,
                    "wall_s": wall,
                    "records": summary.records,
                    "rejects": summary.rejects,
                    "content_hash": content_hash(read_run(out))[:12],
                }
            )
        return {"rows": args.rows, "arms": arms}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rows(path: Path, n: int) -> None:
    docs = [json.loads(line) for line in (DEFAULT_JOB / "inputs.jsonl").read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            doc = docs[i % len(docs)]
            f.write(json.dumps(doc | {"id": doc["id"] if i < len(docs) else f"{doc['id']}#{i // len(docs)}"}) + "\n")


def _job(data: Path, out: Path, held: int) -> Any:
    from ..config import validate
    from ..pipeline import Job, compose

    raw = compose("extract_invoices", [f"dataset.path={data}", f"output.dir={out}", f"runtime.shards_in_flight={held}"])
    return Job(validate(raw), Path.cwd(), raw)


def _occupancies(out: Path) -> list[float]:
    from ..data import RunDir

    table = RunDir.open(out).read("stats", columns=["shard", "occupancy"])
    return [o for _, o in sorted(zip(table.column("shard").to_pylist(), table.column("occupancy").to_pylist()))]


def format_occupancy(result: dict[str, Any]) -> str:
    header = ["shards held", "shards", "occupancy mean", "min", "per shard", "wall s", "records", "rejects", "content hash"]
    rows = [
        [
            a["held"],
            a["shards"],
            f"{a['occupancy_mean']:.3f}",
            f"{a['occupancy_min']:.3f}",
            " ".join(f"{o:.2f}" for o in a["occupancy_per_shard"]),
            f"{a['wall_s']:.1f}",
            a["records"],
            a["rejects"],
            a["content_hash"],
        ]
        for a in result["arms"]
    ]
    return f"bench occupancy: the invoice job, {result['rows']} rows, 4 streams, shards of 8\n\n" + format_table(header, rows)


def main(args: argparse.Namespace) -> int:
    result = run_occupancy(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_occupancy(result))
    return 0
