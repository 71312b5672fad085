"""The progress bar and the closing summary of a job."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

from ..engines import DRAFT_SOURCES


class Progress:
    """Rows done, records/s, acceptance and ETA on one line."""

    def __init__(self, total: int, done: int = 0):
        self.bar = tqdm(total=total, initial=done, unit="row", dynamic_ncols=True, desc="rows")
        self.start = time.perf_counter()
        self.records = 0
        self.drafted = self.accepted = 0

    def update(self, rows: int, records: int, stats: dict[str, Any]) -> None:
        self.records += records
        self.drafted += sum(stats.get(f"drafted_{source}", 0) for source in DRAFT_SOURCES)
        self.accepted += sum(stats.get(f"accepted_{source}", 0) for source in DRAFT_SOURCES)
        elapsed = time.perf_counter() - self.start
        acceptance = self.accepted / self.drafted if self.drafted else 0.0
        self.bar.set_postfix(records_s=f"{self.records / elapsed:.2f}", acceptance=f"{acceptance:.0%}")
        self.bar.update(rows)

    def close(self) -> None:
        self.bar.close()


def summary_table(summary: Any, out: str) -> str:
    lines = [
        f"{'rows':<16}{summary.rows}",
        f"{'records':<16}{summary.records}",
        f"{'rejects':<16}{summary.rejects}"
        + (f"  ({', '.join(f'{k}: {v}' for k, v in sorted(summary.reasons.items()))})" if summary.reasons else ""),
        f"{'shards':<16}{summary.shards} ({summary.shards_resumed} resumed, {summary.shards_redone} redone, {summary.shards_failed} failed, {summary.retries} retries, "
        f"{summary.store_retries} store retries)",
        f"{'output':<16}{out}",
    ]
    chunked = summary.chunking.get("chunked_rows", 0)
    if chunked:
        c = summary.chunking
        lines.insert(
            4,
            f"{'chunked rows':<16}{chunked} ({c['chunks']} chunks, {c['chunks'] / chunked:.1f} per row; "
            f"{c['merge_conflicts']} merge conflicts, {c['overlap_duplicates']} overlap duplicates dropped)",
        )
    shares = summary.alarm.get("shares", {}) if summary.alarm else {}
    if shares:
        lines.append(f"{'alarm shares':<16}" + ", ".join(f"{k.replace('_', ' ')} {'n/a' if v is None else f'{v:.0%}'}" for k, v in shares.items()))
        lines += [f"{'ALARM':<16}{w}" for w in summary.alarm["warnings"]]
    return "\n".join(lines)
