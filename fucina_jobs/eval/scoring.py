"""Scores as pure functions of a run's rows, so each rule is testable on hand-made cases.

Nothing here reads files or loads models: ``evaluate`` gathers records,
rejects, stats and gold labels and hands them in.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import unicodedata
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..engines import DRAFT_SOURCES, compile_error_cause

# -- field matching -------------------------------------------------------------

_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%Y.%m.%d", "%d.%m.%Y", "%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y", "%B %d %Y", "%b %d %Y")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def normalize_text(value: str) -> str:
    """Casefold, collapse runs of whitespace, strip: formatting noise is not an extraction error."""
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())


def normalize_spacing(value: str) -> str:
    """``normalize_text``, and no space beside a punctuation mark: ``NO.3,`` and ``NO. 3 ,`` read alike.

    Labels of scanned documents carry their annotators' own spacing around
    punctuation, which no extraction can know; letters and digits still have to match."""
    return re.sub(r"\s*([^\w\s])\s*", r"\1", normalize_text(value))


def text_tokens(value: str) -> list[str]:
    """The words and punctuation marks of ``normalize_text(value)``: what token F1 counts."""
    return re.findall(r"\w+|[^\w\s]", normalize_text(value))


def token_f1(gold: str, pred: Any) -> float:
    """Harmonic mean of token precision and recall (each token counted as often as it occurs); 0 for a missing value."""
    if not isinstance(pred, str):
        return 0.0
    g, p = Counter(text_tokens(gold)), Counter(text_tokens(pred))
    common = sum((g & p).values())
    if not common:
        return float(not g and not p)
    precision, recall = common / sum(p.values()), common / sum(g.values())
    return 2 * precision * recall / (precision + recall)


def parse_date(value: Any) -> dt.date | None:
    """A date from ISO text (a datetime's date part too) or a few unambiguous common formats.

    Day-first and month-first slashed dates (03/04/2025) are ambiguous and not guessed."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str):
        return None
    text = " ".join(value.strip().split())
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}[T ].*", text):
        try:
            return dt.datetime.fromisoformat(text).date()
        except ValueError:
            return None
    for fmt in _DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def parse_number(value: Any) -> float | None:
    """A number from a JSON number or from text like ``"1,428.00"``; None for anything else (bools too)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        if _NUMBER.fullmatch(text):
            return float(text)
    return None


def values_match(gold: Any, pred: Any, tolerance: float = 0.01, spacing: bool = False) -> bool:
    """Does ``pred`` match ``gold``? Dispatch on the gold value's type.

    Numbers match within an absolute ``tolerance``; strings that are dates on
    both sides compare as dates, other strings after ``normalize_text`` (with
    ``spacing``: after ``normalize_spacing``); lists element by element;
    objects key by key (every gold key)."""
    if gold is None:
        return pred is None
    if isinstance(gold, bool):
        return pred is gold
    if isinstance(gold, (int, float)):
        number = parse_number(pred)
        return number is not None and math.isfinite(number) and abs(number - gold) <= tolerance + 1e-9 * max(1.0, abs(gold))
    if isinstance(gold, str):
        if isinstance(pred, (dict, list)) or pred is None or isinstance(pred, bool):
            return False
        gold_date, pred_date = parse_date(gold), parse_date(pred)
        if gold_date is not None and pred_date is not None:
            return gold_date == pred_date
        normalize = normalize_spacing if spacing else normalize_text
        return normalize(gold) == normalize(str(pred))
    if isinstance(gold, list):
        return isinstance(pred, list) and len(pred) == len(gold) and all(values_match(g, p, tolerance, spacing) for g, p in zip(gold, pred))
    if isinstance(gold, dict):
        return isinstance(pred, dict) and all(values_match(v, pred.get(k), tolerance, spacing) for k, v in gold.items())
    return gold == pred


def item_f1(gold: list[Any], pred: Any, tolerance: float = 0.01) -> float:
    """F1 of a list's items as a set (``party``: the names found, in any order): each gold item matches one
    predicted item at most, by ``values_match``; two empty lists agree (1.0), and a missing list finds none."""
    pred = pred if isinstance(pred, list) else []
    if not gold and not pred:
        return 1.0
    left, found = list(pred), 0
    for g in gold:
        hit = next((i for i, p in enumerate(left) if values_match(g, p, tolerance)), None)
        if hit is not None:
            found += 1
            del left[hit]
    return 2 * found / (len(gold) + len(pred)) if found else 0.0


def _rate(n: int, total: int) -> float | None:
    return n / total if total else None


def accuracy(gold: Mapping[str, Mapping[str, Any]], predictions: Mapping[str, Mapping[str, Any] | None], tolerance: float = 0.01) -> dict[str, Any]:
    """Per-field exact match and per-record all-fields-correct over the rows that have gold.

    ``predictions`` maps every row id of the run to its parsed record, or None
    for a reject: a reject gets every field wrong. Gold rows the run does not
    hold (a ``dataset.limit``) and run rows without gold are counted, not scored.
    Beside the exact match, each field has ``spacing_rate`` (strings compared by
    ``normalize_spacing``) and, where gold holds strings that are not dates, ``f1``:
    their mean token F1 (``token_f1``); where gold holds lists, ``item_f1``: their items' F1 as sets (``item_f1``).
    ``mean`` averages each over the fields, and ``score`` the field scores: a list field's item F1, another's exact match."""
    scored = sorted(set(gold) & set(predictions))
    fields: dict[str, dict[str, Any]] = {}
    all_correct = 0
    wrong: dict[str, list[str]] = {}
    for row_id in scored:
        label, pred = gold[row_id], predictions[row_id]
        row_ok = True
        for name, value in label.items():
            got = pred.get(name) if pred is not None else None
            ok = pred is not None and values_match(value, got, tolerance)
            entry = fields.setdefault(name, {"correct": 0, "total": 0, "spacing_correct": 0, "f1_sum": 0.0, "texts": 0, "items_sum": 0.0, "lists": 0})
            entry["correct"] += ok
            entry["spacing_correct"] += pred is not None and values_match(value, got, tolerance, spacing=True)
            entry["total"] += 1
            if isinstance(value, str) and parse_date(value) is None:
                entry["texts"] += 1
                entry["f1_sum"] += token_f1(value, got) if pred is not None else 0.0
            if isinstance(value, list):
                entry["lists"] += 1
                entry["items_sum"] += item_f1(value, got, tolerance) if pred is not None else 0.0
            if not ok:
                row_ok = False
                wrong.setdefault(row_id, []).append(name)
        all_correct += row_ok
    for entry in fields.values():
        f1_sum, texts = entry.pop("f1_sum"), entry.pop("texts")
        entry["rate"] = _rate(entry["correct"], entry["total"])
        entry["spacing_rate"] = _rate(entry["spacing_correct"], entry["total"])
        entry["f1"] = f1_sum / texts if texts else None
        items_sum, lists = entry.pop("items_sum"), entry.pop("lists")
        entry["item_f1"] = items_sum / lists if lists else None
    means = {key: _mean([e[key] for e in fields.values() if e[key] is not None]) for key in ("rate", "spacing_rate", "f1")}
    means["score"] = _mean([e["rate"] if e["item_f1"] is None else e["item_f1"] for e in fields.values() if e["rate"] is not None])
    return {
        "rows_scored": len(scored),
        "gold_not_in_run": len(set(gold) - set(predictions)),
        "run_rows_without_gold": len(set(predictions) - set(gold)),
        "numeric_tolerance": tolerance,
        "fields": dict(sorted(fields.items())),
        "mean": means,
        "all_fields_correct": {"correct": all_correct, "total": len(scored), "rate": _rate(all_correct, len(scored))},
        "wrong_fields": wrong,
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# -- conformance ----------------------------------------------------------------


def parses_as_json(text: str | None) -> bool:
    try:
        json.loads(text or "")
    except (json.JSONDecodeError, TypeError):
        return False
    return True


def conformance(records: Sequence[Mapping[str, Any]], rejects: Sequence[Mapping[str, Any]], json_output: bool = True) -> dict[str, Any]:
    """% of outputs that parse (JSON jobs only), % that validate (became records), rejects by reason,
    and how the rows decoded under a relaxed schema fared (``constraint.relax``)."""
    total = len(records) + len(rejects)
    reasons = Counter(r["reason"] for r in rejects)
    relaxed_rejects = Counter(r["reason"] for r in rejects if r.get("relaxations"))
    relaxed_causes = Counter(c for r in [*records, *rejects] for c in {x.split("=")[0] for x in r.get("relaxations") or []})
    parsed = len(records) + sum(parses_as_json(r.get("text")) for r in rejects) if json_output else None
    return {
        "rows": total,
        "parsed": parsed,
        "parse_rate": _rate(parsed, total) if parsed is not None else None,
        "validated": len(records),
        "validate_rate": _rate(len(records), total),
        "rejects": len(rejects),
        "rejects_by_reason": dict(sorted(reasons.items())),
        "relaxed": {
            "rows": sum(bool(r.get("relaxations")) for r in records) + sum(relaxed_rejects.values()),
            "records": sum(bool(r.get("relaxations")) for r in records),
            "rejects_by_reason": dict(sorted(relaxed_rejects.items())),
            "rows_by_cause": dict(relaxed_causes.most_common()),
        },
    }


#: The replica's message for a per-row schema that does not compile (``replica.py``).
COMPILE_FAILURE = "does not compile"


def schema_coverage(rejects: Iterable[Mapping[str, Any]], rows: int) -> dict[str, Any]:
    """JSONSchemaBench-style compile coverage for per-row schemas: rows whose schema compiled."""
    failed = sorted(r["row_id"] for r in rejects if r["reason"] == "error" and COMPILE_FAILURE in (r.get("error") or ""))
    return {"schemas": rows, "compiled": rows - len(failed), "coverage": _rate(rows - len(failed), rows), "compile_failed": failed}


def by_feature(features: Mapping[str, Sequence[str]], valid_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Generated outputs that validate, split by the schema features of their row."""
    table: dict[str, dict[str, Any]] = {}
    for row_id, names in features.items():
        for name in names or ["(none)"]:
            entry = table.setdefault(name, {"rows": 0, "valid": 0})
            entry["rows"] += 1
            entry["valid"] += row_id in valid_ids
    for entry in table.values():
        entry["valid_rate"] = _rate(entry["valid"], entry["rows"])
    return dict(sorted(table.items()))


# -- efficiency -----------------------------------------------------------------


def percentiles(values: Iterable[float]) -> dict[str, float | None]:
    array = np.asarray(list(values), dtype=float)
    if not array.size:
        return {"p50": None, "p99": None}
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99))}


def efficiency(stats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over the shards' stats rows, and the per-shard series the report plots.

    Stats keep only per-shard mask percentiles, so the run's ``mask_us_p50`` is
    the median of the shard p50s and ``mask_us_p99`` the worst shard p99. ``tok_s``
    is generated tokens over summed shard wall time: per replica, not per cluster."""
    shards = [s for s in sorted(stats, key=lambda s: s["shard"]) if s.get("forward_passes") is not None]
    total = lambda key: sum(float(s.get(key) or 0) for s in shards)  # noqa: E731
    rows, generated, forwards, wall = total("rows"), total("generated_tokens"), total("forward_passes"), total("wall_s")
    committed = sum(float(s.get("tokens_per_forward") or 0) * float(s.get("forward_passes") or 0) for s in shards)
    acceptance = {}
    for source in DRAFT_SOURCES:
        drafted, accepted = total(f"drafted_{source}"), total(f"accepted_{source}")
        acceptance[source] = {"drafted": int(drafted), "accepted": int(accepted), "rate": accepted / drafted if drafted else None}
    drafted_all = sum(a["drafted"] for a in acceptance.values())
    acceptance["all"] = {
        "drafted": drafted_all,
        "accepted": sum(a["accepted"] for a in acceptance.values()),
        "rate": sum(a["accepted"] for a in acceptance.values()) / drafted_all if drafted_all else None,
    }
    p50s = [s["mask_us_p50"] for s in shards if s.get("mask_us_p50")]
    p99s = [s["mask_us_p99"] for s in shards if s.get("mask_us_p99")]
    return {
        "shards": len(shards),
        "prompt_tokens": int(total("prompt_tokens")),
        "generated_tokens": int(generated),
        "tokens_per_record": generated / rows if rows else None,
        "forward_passes": int(forwards),
        "tokens_per_forward": committed / forwards if forwards else None,
        "acceptance": acceptance,
        "tok_s": generated / wall if wall else None,
        "wall_s": wall,
        "mask_us_p50": float(np.median(p50s)) if p50s else None,
        "mask_us_p99": max(p99s) if p99s else None,
        "per_shard": [
            {k: s.get(k) for k in ("shard", "replica", "rows", "acceptance", "tok_s", "tokens_per_forward", "mask_us_p50", "mask_us_p99", "wall_s")}
            for s in shards
        ],
    }


# -- grammar-only conformance -----------------------------------------------------


def by_cause(items: Iterable[tuple[str, str]], known: Mapping[str, str] | None = None, examples: int = 3) -> dict[str, dict[str, Any]]:
    """Group (cause, example) pairs: count, the first ``examples`` examples and, given ``known``, why it is known.

    Most frequent cause first; this is what keeps a 10,000-schema report short."""
    groups: dict[str, dict[str, Any]] = {}
    for cause, example in items:
        entry = groups.setdefault(cause, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < examples:
            entry["examples"].append(example)
    if known is not None:
        for cause, entry in groups.items():
            entry["known"] = known.get(cause)
    return dict(sorted(groups.items(), key=lambda kv: (-kv[1]["count"], kv[0])))


def grammar_scores(report: Mapping[str, Any], known: Mapping[str, str]) -> dict[str, Any]:
    """Summarise ``maskbench.run_suite`` by cause: compile errors, relaxations, wrong verdicts at both stages.

    The grammar stage is the mask walk; the final stage adds post-validation
    against the original schema, as a job does. ``unexplained`` lists the causes
    of compile errors and wrong final verdicts that ``known`` (cause -> why)
    does not explain; a clean suite has none. Per-instance detail stays in the
    verdicts Parquet."""
    judged = [v for v in report["verdicts"] if v["instance"] >= 0]
    grammar_wrong = [v for v in judged if v["accepted"] != v["expected"]]
    final_wrong = [v for v in judged if v["final"] != v["expected"]]
    compile_errors = by_cause(((compile_error_cause(err), f"{name}: {err}") for name, err in sorted(report["compile_errors"].items())), known)
    relaxations = by_cause((r.split("=")[0], f"{name}: {r}") for name, rs in sorted(report["relaxations"].items()) for r in rs)
    label = lambda v: f"{v['file']}#{v['instance']}"  # noqa: E731
    return {
        "files": report["files"],
        "compiled": report["files"] - len(report["compile_errors"]),
        "coverage": _rate(report["files"] - len(report["compile_errors"]), report["files"]),
        "relaxed": len(report["relaxations"]),
        "instances": report["instances"],
        "valid": report["valid"],
        "invalid": report["invalid"],
        "skipped": report["skipped"],
        "stages": {name: _stage(judged, key) for name, key in (("grammar", "accepted"), ("final", "final"))},
        "compile_errors": compile_errors,
        "relaxations": relaxations,
        "wrong_verdicts": {
            "grammar": by_cause((v["cause"], label(v)) for v in grammar_wrong),
            "final": by_cause(((v["cause"], label(v)) for v in final_wrong), known),
        },
        "by_feature": _grammar_by_feature(report, judged),
        "unexplained": sorted(
            {c for c, e in compile_errors.items() if not e["known"]} | {v["cause"] for v in final_wrong if v["cause"] not in known}
        ),
    }


def regressions(baseline: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What got worse since ``baseline`` (an earlier run's verdicts): schemas that compiled then and
    not now, instances whose final verdict was right then and is wrong now. Files new to the suite are not regressions."""
    before = {(v["file"], v["instance"]): v for v in baseline}
    compiled_before = {v["file"] for v in baseline if v["instance"] >= 0}
    found: list[tuple[str, str]] = []
    for v in verdicts:
        old = before.get((v["file"], v["instance"]))
        if v["instance"] < 0 and v["file"] in compiled_before:
            found.append(("no longer compiles", f"{v['file']}: {v['compile_error']}"))
        elif v["instance"] >= 0 and old is not None and old.get("final", old["accepted"]) == old["expected"] and v["final"] != v["expected"]:
            found.append((f"now wrong: {v['cause']}", f"{v['file']}#{v['instance']}"))
    return {"count": len(found), "by_cause": by_cause(found)}


def _stage(judged: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    valid_rejected = sum(v["expected"] and not v[key] for v in judged)
    invalid_accepted = sum(not v["expected"] and v[key] for v in judged)
    return {"wrong": valid_rejected + invalid_accepted, "valid_rejected": valid_rejected, "invalid_accepted": invalid_accepted}


def _grammar_by_feature(report: Mapping[str, Any], judged: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per schema feature: instances of schemas that did not compile count as not correct."""
    right = Counter(v["file"] for v in judged if v["final"] == v["expected"])
    table: dict[str, dict[str, Any]] = {}
    for name, names in report["features"].items():
        for feature in names or ["(none)"]:
            entry = table.setdefault(feature, {"files": 0, "compile_errors": 0, "relaxed": 0, "instances": 0, "correct": 0})
            entry["files"] += 1
            entry["compile_errors"] += name in report["compile_errors"]
            entry["relaxed"] += name in report["relaxations"]
            entry["instances"] += report["tests"][name]
            entry["correct"] += right[name]
    for entry in table.values():
        entry["correct_rate"] = _rate(entry["correct"], entry["instances"])
    return dict(sorted(table.items()))


def grammar_timing(report: Mapping[str, Any]) -> dict[str, Any]:
    """Compile time per schema (ms) and time per mask (µs), as p50/p99."""
    return {
        "compile_ms": percentiles(s * 1e3 for s in report["compile_s"].values()),
        "mask_us": percentiles(s * 1e6 for s in report["mask_s"]),
        "masks": len(report["mask_s"]),
    }


# -- spans ----------------------------------------------------------------------


def span_exactness(
    records: Sequence[Mapping[str, Any]], texts: Mapping[str, str], fields: list, changed: set[str] = frozenset(), examples: int = 20
) -> dict[str, Any]:
    """Do the records' ``field_spans`` point at their values? ``text[start:end]``, read on its own, must write the value.

    ``fields`` are the job schema's grounded fields; rows whose source changed
    since the run (``changed``) are left out, and counted."""
    from ..grounding.spans import SpanCheck, check_spans

    total = SpanCheck()
    for record in records:
        row_id = str(record["row_id"])
        if row_id in changed or row_id not in texts:
            continue
        check = check_spans(json.loads(record["text"]), fields, texts[row_id], dict(record.get("field_spans") or []))
        check.mismatched = [f"{row_id}: {m}" for m in check.mismatched]
        total.add(check)
    return {
        "values": total.values,
        "located": total.located,
        "allowed_unwritten": total.unwritten,
        "mismatched": len(total.mismatched),
        "rows_changed": len(changed),
        "examples": total.mismatched[:examples],
    }
