"""The review page at scale: its size, and how long headless Chromium takes to open and filter it.

    python microbench/review_page.py                       # 10,000 records, 3 opens
    python microbench/review_page.py --records 1000,10000 --opens 5

Builds a run of N records from the shipped invoices (their texts under new
row ids, their gold labels as the records, spans found as the job finds them,
seeded confidences, every 50th row a reject), writes its page with
``review_page``, and opens it in a fresh headless Chromium each time. "open"
is the page's own clock from navigation start to its first page of cards
drawn (file read, HTML parsed, data inflated and parsed, cards rendered);
"data parsed" is the same clock when the data is ready; "filter" is one change of the
confidence threshold, re-filtering every row and rendering a page. Figures
are in docs/REVIEW.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fucina_jobs.bench.tables import format_table  # noqa: E402
from fucina_jobs.review.browser import Chromium  # noqa: E402
from fucina_jobs.review.page import READY, write_page  # noqa: E402
from fucina_jobs.eval.runs import read_run  # noqa: E402
from fucina_jobs.eval.sources import read_sources  # noqa: E402
from fucina_jobs.grounding.declaration import grounded_fields  # noqa: E402
from fucina_jobs.config import SHIPPED  # noqa: E402
from fucina_jobs.grounding.spans import value_spans  # noqa: E402
from fucina_jobs.data.sink import META_FIELDS, REJECT_SCHEMA  # noqa: E402
from fucina_jobs.data.storage import write_json, write_table  # noqa: E402

FILTER = """(() => { const el = document.getElementById('below'); const t0 = performance.now();
  el.value = '0.8'; el.dispatchEvent(new Event('input', {bubbles: true})); return performance.now() - t0; })()"""


def build_run(folder: Path, n: int) -> Path:
    """A run directory of ``n`` rows (records and a few rejects) with its dataset and manifest."""
    import pyarrow as pa

    docs = [json.loads(line) for line in (SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines()]
    gold = {g["id"]: g["label"] for g in map(json.loads, (SHIPPED / "jobs/invoices/gold.jsonl").read_text().splitlines())}
    fields = grounded_fields(json.loads((SHIPPED / "schemas/invoice.json").read_text()))
    rng = random.Random(0)
    rows, records, rejects = [], [], []
    for i in range(n):
        doc = docs[i % len(docs)]
        row_id = f"{doc['id']}-{i:06d}"
        rows.append({"id": row_id, "text": doc["text"]})
        label = gold[doc["id"]]
        if i % 50 == 49:
            rejects.append(
                {
                    "record_id": f"r{i}",
                    "row_id": row_id,
                    "reason": "ungrounded",
                    "error": "not found in text: total=1608",
                    "text": json.dumps({**label, "total": 1608}),
                    "relaxations": [],
                }
            )
            continue
        confidence = {k: round(rng.betavariate(8, 1), 4) for k in label}
        records.append(
            {
                "record_id": f"r{i}",
                "row_id": row_id,
                "text": json.dumps(label, separators=(",", ":")),
                "finish_reason": "stop",
                "prompt_tokens": 400,
                "generated_tokens": 90,
                "flags": [],
                "relaxations": [],
                "record_confidence": min(confidence.values()),
                "field_confidence_min": confidence,
                "field_confidence_mean": confidence,
                "field_spans": {p: list(s) for p, s in value_spans(label, fields, doc["text"]).items()},
            }
        )
    (folder / "inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = folder / "run"
    write_table(run / "records" / "shard-00000.parquet", pa.Table.from_pylist(records, schema=pa.schema(META_FIELDS)))
    write_table(run / "rejects" / "shard-00000.parquet", pa.Table.from_pylist(rejects, schema=REJECT_SCHEMA))
    config = {
        "name": "bench_review",
        "constraint": {"json_schema": str(SHIPPED / "schemas/invoice.json")},
        "dataset": {"path": str(folder / "inputs.jsonl")},
        "output": {"dir": str(run)},
    }
    write_json(run / "manifest.json", {"name": "bench_review", "status": "complete", "version": "bench", "config": config})
    return run


def measure(n: int, opens: int) -> list:
    with tempfile.TemporaryDirectory(prefix="fucina-review-bench-") as tmp:
        folder = Path(tmp)
        run = read_run(build_run(folder, n))
        page = folder / "page.html"
        size = write_page(run, read_sources(run, folder), page)
        open_ms, parse_ms, filter_ms, heap = [], [], [], []
        for _ in range(opens):
            with Chromium() as browser:
                browser.open(page.as_uri(), READY)
                open_ms.append(browser.evaluate("performance.getEntriesByName('review:rendered')[0].startTime"))
                parse_ms.append(browser.evaluate("performance.getEntriesByName('review:data-parsed')[0].startTime"))
                filter_ms.append(browser.evaluate(FILTER))
                heap.append(browser.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null"))
                cards = browser.evaluate("document.querySelectorAll('.card').length")
                assert cards == min(20, n), cards
        return [
            f"{n:,}",
            f"{size / 1e6:.2f}",
            f"{statistics.median(open_ms) / 1000:.2f}",
            f"{max(open_ms) / 1000:.2f}",
            f"{statistics.median(parse_ms) / 1000:.2f}",
            f"{statistics.median(filter_ms):.0f}",
            f"{statistics.median(heap) / 1e6:.0f}" if heap[0] else "-",
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="10000", help="comma-separated row counts (default 10000)")
    parser.add_argument("--opens", type=int, default=3, help="fresh browsers per count; the median and the slowest are shown")
    args = parser.parse_args()
    rows = [measure(int(n), args.opens) for n in args.records.split(",")]
    print(format_table(["rows", "page MB", "open s (median)", "open s (slowest)", "data parsed s", "filter ms", "JS heap MB"], rows))


if __name__ == "__main__":
    main()
