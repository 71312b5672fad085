"""Is the records' confidence worth reading? Calibration and AUROC against gold.

A field's confidence (``fucina_jobs.confidence``: the mean token probability
over its value) is useful when wrong fields score lower than right ones. The
AUROC says how well it ranks them (0.5 is chance, 1 is perfect); accuracy by
confidence bin says whether a value of 0.9 means right nine times in ten. Pure
functions of a run's rows and gold labels, like ``scoring``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .scoring import values_match

BINS = 10


def auroc(scores: Sequence[float], correct: Sequence[bool]) -> float | None:
    """Probability that a random correct item scores above a random wrong one (ties count half).

    None when there are no correct or no wrong items: ranking is then undefined."""
    s, y = np.asarray(scores, dtype=float), np.asarray(correct, dtype=bool)
    positives, negatives = int(y.sum()), int((~y).sum())
    if not positives or not negatives:
        return None
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based, ties share their average rank
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def reliability(scores: Sequence[float], correct: Sequence[bool], bins: int = BINS) -> list[dict[str, Any]]:
    """Accuracy per equal-width confidence bin over [0, 1]; the last bin includes 1."""
    s, y = np.asarray(scores, dtype=float), np.asarray(correct, dtype=bool)
    index = np.minimum((s * bins).astype(int), bins - 1)
    table = []
    for b in range(bins):
        inside = index == b
        n = int(inside.sum())
        table.append(
            {
                "low": b / bins,
                "high": (b + 1) / bins,
                "fields": n,
                "mean_confidence": float(s[inside].mean()) if n else None,
                "accuracy": float(y[inside].mean()) if n else None,
            }
        )
    return table


def expected_calibration_error(table: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean |accuracy - confidence| over the bins, weighted by their share of the fields."""
    total = sum(b["fields"] for b in table)
    if not total:
        return None
    return sum(b["fields"] * abs(b["accuracy"] - b["mean_confidence"]) for b in table if b["fields"]) / total


def field_confidence(per_path: Mapping[str, float], name: str) -> float | None:
    """A top-level field's confidence: its value's, or its least certain leaf's for an object or a list."""
    matching = [v for path, v in per_path.items() if path == name or path.startswith((f"{name}.", f"{name}["))]
    return min(matching) if matching else None


def confidence_scores(
    gold: Mapping[str, Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, Mapping[str, Any] | None],
    tolerance: float = 0.01,
) -> dict[str, Any]:
    """AUROC, reliability table and per-field means of field confidence against field correctness.

    Every gold field of a record with a confidence is one item; rejects have
    no confidence and are left out (``accuracy`` already counts them wrong).
    ``auroc_of_min`` ranks by the minimum token probability instead of the mean;
    ``auroc_of_agreement``, where records were voted (``decoding.samples``), by
    the share of samples that agreed, over the same fields."""
    scores: list[float] = []
    correct: list[bool] = []
    lows: list[float] = []
    agreements: list[float | None] = []
    per_field: dict[str, dict[str, Any]] = {}
    for record in records:
        row_id, label = record["row_id"], gold.get(record["row_id"])
        conf_mean, conf_min = dict(record.get("field_confidence_mean") or []), dict(record.get("field_confidence_min") or [])
        agreement = dict(record.get("field_agreement") or [])
        if label is None or not conf_mean:
            continue
        for name, value in label.items():
            mean, low = field_confidence(conf_mean, name), field_confidence(conf_min, name)
            if mean is None:
                continue
            ok = values_match(value, (predictions.get(row_id) or {}).get(name), tolerance)
            scores.append(mean)
            lows.append(low)
            agreements.append(agreement.get(name))
            correct.append(ok)
            entry = per_field.setdefault(name, {"fields": 0, "confidence": 0.0, "correct": 0})
            entry["fields"] += 1
            entry["confidence"] += mean
            entry["correct"] += ok
    for entry in per_field.values():
        entry["mean_confidence"] = entry.pop("confidence") / entry["fields"]
        entry["accuracy"] = entry.pop("correct") / entry["fields"]
    table = reliability(scores, correct)
    return {
        "fields_scored": len(scores),
        "auroc": auroc(scores, correct),
        "auroc_of_min": auroc(lows, correct),
        "auroc_of_agreement": auroc(agreements, correct) if None not in agreements else None,
        "expected_calibration_error": expected_calibration_error(table),
        "bins": table,
        "per_field": dict(sorted(per_field.items())),
    }
