"""``learn ... curve=0,10,20,50 held_out=N``: field accuracy against the number of gold rows learned from.

The last ``held_out`` gold rows (in the gold file's order) are never learned from: each point of the
curve learns its cues from the first n of the others and scores the job on the held-out rows with
``eval``, each in its own process, as a user would run them. The table says, per field, the share
right (per-item F1 for lists), the mean, the rejects and the share of values copied from the prompt.

With ``adapter=true`` each point runs ``learn ... adapter=true`` on its first n rows (cues and a LoRA adapter) and
scores three arms: the cues alone, the adapter alone and both; the table adds the minutes the adapter trained.
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
    adapter: bool = False,
) -> str:
    """The curve's markdown table; ``rows`` are the dataset's rows by id (their fields), ``gold`` their labels;
    ``adapter``: each point also trains an adapter and scores it alone and with the cues."""
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
        taught = pool[:n]
        learned, adapter_dir, minutes = "null", None, None
        if taught and adapter:
            learned, adapter_dir, minutes = _learn_with_adapter(name, [(i, gold[i]) for i in taught], overrides, out)
        elif taught:
            learned = str(out / f"learned-{n}.json")
            write(
                Path(learned),
                entries(learn(schema, [(str(rows[i].get(text_field, "")), gold[i]) for i in taught])),
                len(taught),
                f"the first {len(taught)} gold rows",
            )
        arms = {"cues": (learned, None)} if taught else {"none": ("null", None)}
        if adapter_dir is not None:
            arms |= {"adapter": ("null", adapter_dir), "both": (learned, adapter_dir)}
        for arm, (cues, weights) in arms.items():
            run = out / (f"run-{n}" if not adapter else f"run-{n}-{arm}")
            ours = [
                f"dataset.path={inputs}",
                "dataset.format=jsonl",
                f"eval.gold={labels}",
                f"constraint.learned={cues}",
                f"model.adapter={weights or 'null'}",
                f"output.dir={run}",
                "output.fresh=true",
            ]
            _subcommand("eval", name, overrides, ours)
            lines.append((min(n, len(pool)), arm if adapter else None, minutes, _point(run)))
    return _table(lines, held_out)


def _learn_with_adapter(name: str, taught: list[tuple[str, Any]], overrides: Sequence[str], out: Path) -> tuple[str, str, float]:
    """``learn ... adapter=true`` on the ``taught`` gold rows: the cues file, the adapter folder and its minutes."""
    from .adapter import adapter_path

    gold = out / f"gold-{len(taught)}.jsonl"
    _write_jsonl(gold, [{"id": i, "label": label} for i, label in taught])
    learned = out / f"learned-{len(taught)}.json"
    _subcommand("learn", name, overrides, [f"gold={gold}", f"out={learned}", "adapter=true"])
    folder = adapter_path(learned)
    evidence = json.loads((folder / "evidence.json").read_text(encoding="utf-8"))
    return str(learned), str(folder), evidence["seconds"] / 60


def _subcommand(command: str, name: str, overrides: Sequence[str], ours: list[str]) -> None:
    """``python -m fucina_jobs COMMAND conf=NAME`` with the user's ``overrides``, ``ours`` winning, in its own process."""
    keys = {o.partition("=")[0] for o in ours}
    argv = [sys.executable, "-m", "fucina_jobs", command, f"conf={name}", *(o for o in overrides if o.partition("=")[0] not in keys), *ours]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


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


def _table(points: list[tuple[int, str | None, float | None, dict[str, Any]]], held_out: int) -> str:
    """The points (gold rows, arm or None, minutes of adapter training or None, scores) as a markdown table."""
    names = list(points[0][3]["fields"]) if points else []
    arms = any(arm for _, arm, _, _ in points)
    head = "| gold rows learned from |" + (" arm |" if arms else "") + f" {' | '.join(names)} | mean | rejects | prompt copies |"
    head += " training min |" if arms else ""
    lines = [f"scored on {held_out} held-out gold rows", "", head, "|" + "---|" * (len(names) + 4 + 2 * arms)]
    for n, arm, minutes, p in points:
        rejects = ", ".join(f"{r} {c}" for r, c in sorted(p["rejects"].items())) or "0"
        cells = " | ".join(_score(p["fields"][f], ".2f") for f in names)
        line = f"| {n} |" + (f" {arm} |" if arms else "") + f" {cells} | {_score(p['mean'], '.3f')} | {rejects} | {_score(p['copies'], '.1%')} |"
        lines.append(line + (f" {minutes:.1f} |" if minutes is not None else " |" if arms else ""))
    return "\n".join(lines)


def _score(value: float | None, spec: str) -> str:
    """A score or share in the table; ``-`` where there is none (every held-out row a reject)."""
    return "-" if value is None else format(value, spec)


def _write_jsonl(path: Path, items: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
