"""``learn conf=NAME gold=FILE [out=FILE] [overrides]``: learn a job's cues from gold rows and write them.

The job is composed as ``run`` composes it (Hydra, the same overrides); its dataset gives the
documents, joined to the gold (``{"id", "label"}`` a line, as ``eval.gold``, the review page and the
Label Studio import write it) by row id. No model loads. The cues go to ``out`` (by default the file
the job's ``constraint.learned`` names, else ``jobs/NAME/learned.json``), learned from the schema's own
options, never from cues learned before.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

USAGE = """usage: python -m fucina_jobs learn conf=NAME [gold=FILE] [out=FILE] [key=value ...]

Learns each field's x-grounded options (labels, day order, span shape, units, ...) from gold rows
joined to the job's dataset by id, and writes them with their evidence to out (default: the job's
constraint.learned, else jobs/NAME/learned.json). gold defaults to the job's eval.gold. A job reads
the file with constraint.learned=FILE; a field's own options in the schema win over learned ones.
"""


def learn_command(argv: list[str]) -> int:
    from ..pipeline.cli import hydra_command

    if {"-h", "--help"} & set(argv):
        sys.stdout.write(USAGE)
        return 0
    ours = {k: v for k, _, v in (a.partition("=") for a in argv) if k in ("gold", "out")}
    rest = [a for a in argv if a.partition("=")[0] not in ("gold", "out")]
    return hydra_command("learn", rest, lambda cfg, resolved: _learn_task(cfg, ours.get("gold"), ours.get("out")))


def _learn_task(cfg: Any, gold_path: str | None, out: str | None) -> int:
    from ..eval.evaluate import load_gold
    from ..pipeline.config import ConfigError, locate
    from ..pipeline.dataset import read_rows
    from ..pipeline.job_constraint import resolve
    from .learned import learn, write

    base = Path.cwd()
    if cfg.constraint.kind != "json_schema":
        raise ConfigError(f"learn: the job {cfg.name} has no constraint.json_schema; cues are learned for a JSON schema's fields")
    gold_path = gold_path or cfg.eval.gold
    if gold_path is None:
        raise ConfigError("learn: say which gold rows to learn from: gold=FILE (a JSONL of {'id': ..., 'label': {...}})")
    constraint = resolve(cfg.constraint.model_copy(update={"learned": None}), base)
    gold = load_gold(locate(gold_path, base))
    texts = {row.id: str(row.fields.get(cfg.dataset.text_field, "")) for row in read_rows(cfg.dataset, base) if row.problem is None}
    pairs = [(texts[i], label) for i, label in gold.items() if i in texts]
    if not pairs:
        raise ConfigError(f"learn: none of the {len(gold)} gold ids of {gold_path} is a row of dataset.path={cfg.dataset.path}")
    if len(pairs) < len(gold):
        log.warning("%d of %d gold rows have no row in %s and are left out", len(gold) - len(pairs), len(gold), cfg.dataset.path)
    cues = learn(constraint.schema, pairs)
    target = Path(out or cfg.constraint.learned or f"jobs/{cfg.name}/learned.json")
    write(base / target, cues, len(pairs), gold_path)
    sys.stdout.write(_summary(cues, len(pairs), target, cfg.constraint.learned is None) + "\n")
    return 0


def _summary(cues: list, rows: int, target: Path, tell: bool) -> str:
    lines = [f"learned from {rows} gold rows -> {target}", "", "| field | written | pick rate | options |", "|---|---|---|---|"]
    for c in cues:
        e = c.evidence
        options = ", ".join(f"{k}={v}" for k, v in {**c.options, **c.array}.items())
        lines.append(f"| {c.name} | {e['written']}/{e['values']} | {e['pick_rate_before']:.3f} -> {e['pick_rate_after']:.3f} | {options} |")
    if not cues:
        lines.append("| (none) | | | the gold rows support no cue |")
    if tell:
        lines += ["", f"run the job with them: constraint.learned={target} (or add it to the job's config)"]
    return "\n".join(lines)
