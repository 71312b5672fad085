"""``python -m fucina_jobs bench pipeline``: the data path alone, at scale, with the null engine.

It generates ``--rows`` jsonl rows (about 600 bytes each: an invoice text under
a new id), runs the invoice job over them with ``engine=null`` (every row gets
a canned, schema-valid record at once), and reports what the pipeline costs:
rows/s over the run, the driver's peak RSS, the files written per kind, and
whether every row ended exactly once. The job runs in this process, so this
process's peak RSS is the driver's.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
_JOB = _ROOT / "jobs" / "invoices"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pipeline", help="the data path alone (null engine): rows/s, driver RSS, files per kind",
                       description=__doc__.split("\n\n")[1].replace("\n", " "), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000, help="generated jsonl rows (default 100,000)")
    p.add_argument("--replicas", type=int, default=2, help="runtime.replicas (default 2)")
    p.add_argument("--shard-size", type=int, default=None, help="runtime.shard_size (default: the job's default)")
    p.add_argument("--dir", type=Path, default=None, help="where the input and the run go (default: a temporary directory, deleted after)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def generate(path: Path, rows: int) -> None:
    """``rows`` jsonl rows of about 600 bytes, the shipped invoices cycled under new ids."""
    texts = [json.loads(line)["text"] for line in (_JOB / "inputs.jsonl").read_text().splitlines()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"r{i:08d}", "text": f"Ref r{i:08d}. " + texts[i % len(texts)][:540]}) + "\n")


def job_config(data: Path, out: Path, replicas: int, shard_size: int | None) -> dict[str, Any]:
    record = json.loads((_JOB / "gold.jsonl").read_text().splitlines()[0])["label"]
    runtime = {"replicas": replicas} | ({"shard_size": shard_size} if shard_size else {})
    return {
        "name": "bench_pipeline",
        "engine": {"name": "null", "output": json.dumps(record, separators=(",", ":"))},
        "constraint": {"json_schema": "schemas/invoice.json"},
        "dataset": {"path": str(data)},
        "prompt": {"system": "@jobs/invoices/system.txt", "template": "@jobs/invoices/template.txt"},
        "runtime": runtime,
        "output": {"dir": str(out)},
    }


def run_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    from ..pipeline.config import validate
    from ..pipeline.driver import Job
    from ..pipeline.rundir import RunDir

    work = Path(tempfile.mkdtemp(prefix="fucina-bench-pipeline-")) if args.dir is None else args.dir
    try:
        work.mkdir(parents=True, exist_ok=True)
        data, out = work / "in.jsonl", work / "out"
        generate(data, args.rows)
        cfg = validate(job_config(data, out, args.replicas, args.shard_size))
        start = time.perf_counter()
        summary = Job(cfg, _ROOT).run()
        wall = time.perf_counter() - start
        run_dir = RunDir.open(out)
        files = {kind: len(run_dir.shard_files(kind)) for kind in ("records", "rejects", "stats")}
        ids = [run_dir.read(kind, ["row_id"]).column("row_id") for kind in ("records", "rejects")]
        seen = sum(len(c) for c in ids)
        distinct = len(set().union(*(c.to_pylist() for c in ids)))
        return {
            "rows": args.rows, "replicas": args.replicas, "shard_size": cfg.runtime.shard_size,
            "wall_s": round(wall, 1), "rows_per_s": round(args.rows / wall, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "files": files, "records": summary.records, "rejects": summary.rejects,
            "exactly_once": seen == distinct == args.rows,
        }
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def format_pipeline(result: dict[str, Any]) -> str:
    return "".join(f"{key:<20}{value}\n" for key, value in result.items())


def main(args: argparse.Namespace) -> int:
    result = run_pipeline(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_pipeline(result))
    return 0 if result["exactly_once"] else 1
