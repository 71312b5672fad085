"""``compare RUN_A RUN_B``: are two runs' outputs identical, and if not, where do they differ?

Identity is the content hash (``runs.content_hash``): outputs only, never
timings. The differing scores and records are shown to explain a difference;
speed, timing and location keys are left out of the score diff because they
differ between any two runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runs import Run, content_hash, content_rows, read_run

#: Score keys that vary between identical runs (speed, where the run lives, the last digits of
#: token probabilities from differently batched forwards) or restate the hash.
VOLATILE = ("efficiency", "timing", "run_dir", "content_hash", "confidence")


@dataclass
class Comparison:
    hash_a: str
    hash_b: str
    scores: list[tuple[str, Any, Any]] = field(default_factory=list)  # key, value in A, value in B
    records: list[tuple[str, dict | None, dict | None]] = field(default_factory=list)  # row id, A's output, B's

    @property
    def identical(self) -> bool:
        return self.hash_a == self.hash_b


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: value}


def score_diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[tuple[str, Any, Any]]:
    if a is None or b is None:
        return []
    strip = lambda s: {k: v for k, v in s.items() if k not in VOLATILE}  # noqa: E731
    fa, fb = flatten(strip(a)), flatten(strip(b))
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def record_diff(a: Run, b: Run) -> list[tuple[str, dict | None, dict | None]]:
    rows_a = {r["row_id"]: r for r in content_rows(a)}
    rows_b = {r["row_id"]: r for r in content_rows(b)}
    diff = [(k, rows_a.get(k), rows_b.get(k)) for k in sorted(set(rows_a) | set(rows_b)) if rows_a.get(k) != rows_b.get(k)]
    verdicts_a = {(v["file"], v["instance"]): v for v in a.verdicts}
    verdicts_b = {(v["file"], v["instance"]): v for v in b.verdicts}
    diff += [
        (f"{k[0]}#{k[1]}", verdicts_a.get(k), verdicts_b.get(k))
        for k in sorted(set(verdicts_a) | set(verdicts_b))
        if verdicts_a.get(k) != verdicts_b.get(k)
    ]
    return diff


def compare(path_a: str | Path, path_b: str | Path) -> Comparison:
    a, b = read_run(path_a), read_run(path_b)
    for run in (a, b):
        if not run.exists:
            raise FileNotFoundError(f"{run.path} holds no run (no records/, rejects/, verdicts/ or manifest.json)")
    result = Comparison(content_hash(a), content_hash(b))
    result.scores = score_diff(a.scores, b.scores)
    if not result.identical:
        result.records = record_diff(a, b)
    return result


def _short(row: dict | None, width: int = 100) -> str:
    if row is None:
        return "(absent)"
    if "text" in row:
        text = row["text"] if len(row["text"] or "") <= width else row["text"][: width - 1] + "…"
        return f"{row['reason'] or 'record'}: {text!r}"
    return f"expected={row['expected']} accepted={row['accepted']} final={row.get('final')} compile_error={row['compile_error']!r}"


def format_comparison(c: Comparison, a: str | Path, b: str | Path, limit: int = 20) -> str:
    lines = [
        f"A: {a}",
        f"B: {b}",
        f"content hash A {c.hash_a}",
        f"content hash B {c.hash_b}",
        "identical outputs" if c.identical else f"DIFFERENT outputs: {len(c.records)} output(s) differ (records, rejects or verdicts)",
    ]
    if c.scores:
        lines.append(f"scores that differ ({len(c.scores)}):")
        lines += [f"  {k}: {va!r} -> {vb!r}" for k, va, vb in c.scores[:limit]]
        if len(c.scores) > limit:
            lines.append(f"  ... and {len(c.scores) - limit} more")
    if c.records:
        lines.append("outputs that differ:")
        for row_id, ra, rb in c.records[:limit]:
            lines += [f"  {row_id}", f"    A {_short(ra)}", f"    B {_short(rb)}"]
        if len(c.records) > limit:
            lines.append(f"  ... and {len(c.records) - limit} more")
    return "\n".join(lines) + "\n"
