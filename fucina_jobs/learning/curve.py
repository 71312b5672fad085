"""``learn ... curve=0,10,20,50 held_out=N``: field accuracy against the number of gold rows learned from.

The last ``held_out`` gold rows (in the gold file's order) are never learned from: each point of the
curve learns its cues from the first n of the others and scores the job on the held-out rows with
``eval``, each in its own process, as a user would run them. The table says, per field, the share
right (per-item F1 for lists), the mean, the rejects and the share of values copied from the prompt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pyarrow.parquet as pq

from ..grounding import alarm
from ..grounding.learned_file import write
from .learned import entries, learn


def learning_curve(
    name: str,
    schema: dict[str, Any],
    rows: dict[str, dict[str, Any]],
    gold: dict[str, Any],
    *,
    text_field: str,
    sizes: Sequence[int],
    held_out: int,
    overrides: Sequence[str],
    out: Path,
) -> str:
    """The curve's markdown table; ``rows`` are the dataset's rows by id (their fields), ``gold`` their labels."""
    ids = [i for i in gold if i in rows]
    if held_out < 1 or len(ids) <= held_out:
        raise ValueError(f"learn: held_out={held_out} leaves no gold row to learn from ({len(ids)} gold rows have a row)")
    tested, pool = ids[-held_out:], ids[:-held_out]
    out.mkdir(parents=True, exist_ok=True)
    inputs, labels = out / "held_out_inputs.jsonl", out / "held_out_gold.jsonl"
    _write_jsonl(inputs, [rows[i] for i in tested])
    _write_jsonl(labels, [{"id": i, "label": gold[i]} for i in tested])
    lines = []
    for n in sizes:
        learned = "null"
        if n:
            taught = pool[:n]
            learned = str(out / f"learned-{n}.json")
            write(
                Path(learned),
                entries(learn(schema, [(str(rows[i].get(text_field, "")), gold[i]) for i in taught])),
                len(taught),
                f"the first {len(taught)} gold rows",
            )
        run = out / f"run-{n}"
        ours = [
            f"dataset.path={inputs}",
            "dataset.format=jsonl",
            f"eval.gold={labels}",
            f"constraint.learned={learned}",
            f"output.dir={run}",
            "output.fresh=true",
        ]
        keys = {o.partition("=")[0] for o in ours}
        command = [sys.executable, "-m", "fucina_jobs", "eval", f"conf={name}", *(o for o in overrides if o.partition("=")[0] not in keys), *ours]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        lines.append((min(n, len(pool)), _point(run)))
    return _table(lines, held_out)


def _point(run: Path) -> dict[str, Any]:
    """A scored run's per-field scores, mean, rejects by reason and prompt-copy share."""
    version = next(run.glob("version=*"))
    scores = json.loads((version / "scores.json").read_text(encoding="utf-8"))
    fields = {f: s["item_f1"] if s.get("item_f1") is not None else s["rate"] for f, s in scores["accuracy"]["fields"].items()}
    stats = pq.read_table(version / "stats", columns=["alarm_counts"])
    copies = alarm.combine([json.loads(c) for c in stats.column("alarm_counts").to_pylist()], []).as_dict()
    return {
        "fields": fields,
        "mean": scores["accuracy"]["mean"]["score"],
        "rejects": scores["conformance"]["rejects_by_reason"],
        "copies": copies["shares"]["prompt_copies"],
    }


def _table(points: list[tuple[int, dict[str, Any]]], held_out: int) -> str:
    names = list(points[0][1]["fields"]) if points else []
    head = f"| gold rows learned from | {' | '.join(names)} | mean | rejects | prompt copies |"
    lines = [f"scored on {held_out} held-out gold rows", "", head, "|" + "---|" * (len(names) + 4)]
    for n, p in points:
        rejects = ", ".join(f"{r} {c}" for r, c in sorted(p["rejects"].items())) or "0"
        cells = " | ".join(f"{p['fields'][f]:.2f}" for f in names)
        lines.append(f"| {n} | {cells} | {p['mean']:.3f} | {rejects} | {p['copies']:.1%} |")
    return "\n".join(lines)


def _write_jsonl(path: Path, items: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
