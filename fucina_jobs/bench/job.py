"""``python -m fucina_jobs bench job``: what a job's settings cost, each arm a whole run of the job.

Each arm is the job (``conf=NAME`` and the shared overrides) with overrides of
its own. Every round runs every arm once, in an order rotated each round
(``arms.alternate``), each run a real one (Ray replicas, shards, Parquet) into
a fresh output directory, on one Ray the command starts once. A run's clock
starts when its first shard is sent to a replica, after the model has loaded,
and stops when the run has ended: the wall per row a user waits for, without
the model load. Per arm: the wall per row of every round, their median and its
ratio to the first arm's, tokens per forward, records, rejects and rule
repairs, whether every round wrote the same records, and, when the job names
``eval.gold``, the mean field accuracy and the records with every field right.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from .arms import alternate
from .tables import format_table, x_ratio, yes_no

log = logging.getLogger("fucina_jobs.bench")
_NAME = re.compile(r"[\w.+-]+")

EPILOG = """\
example: the shipped invoice eval as it is, against the same with worked examples
  python -m fucina_jobs bench job conf=eval_invoices --arm shipped: \\
      --arm 'examples:prompt.examples=jobs/invoices/examples.jsonl'
"""


@dataclass
class JobArm:
    name: str
    overrides: list[str]
    _: KW_ONLY
    walls: list[float] = field(default_factory=list)  # seconds per row, one per round
    hashes: list[str] = field(default_factory=list)  # the run's content hash, one per round
    rows: int = 0
    records: int = 0
    rejects: int = 0
    repairs: int = 0
    scores: dict[str, Any] = field(default_factory=dict)  # the last round's, as ``eval`` scores a run


def arm_spec(text: str) -> tuple[str, list[str]]:
    """``NAME:OVERRIDES`` as ``(NAME, [override, ...])``; the overrides split as a shell would."""
    name, sep, overrides = text.partition(":")
    if not sep or not _NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAME:OVERRIDES, NAME of letters, digits, '.', '+', '-' or '_', not {text!r}")
    return name, shlex.split(overrides)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "job",
        help="arms of one job config side by side, each a whole run: wall per row, accuracy with eval.gold",
        description=textwrap.fill(__doc__.split("\n\n")[1].replace("\n", " "), 78),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", nargs="+", metavar="JOB", help="conf=NAME, then key=value overrides every arm shares")
    p.add_argument(
        "--arm",
        dest="arms",
        type=arm_spec,
        action="append",
        metavar="NAME:OVERRIDES",
        help="an arm: its name and its own overrides, space-separated (repeat; the first is the one the others are compared with)",
    )
    p.add_argument("--rounds", type=int, default=3, help="runs of each arm, alternated (default 3)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep the runs in DIR/ARM/round-N (default: a temporary directory, deleted after)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--save", type=Path, metavar="FILE", help="also write the JSON object to FILE")


def _conf(job: list[str]) -> tuple[str, list[str]]:
    names = [a.split("=", 1)[1] for a in job if a.startswith("conf=")]
    if len(names) != 1:
        raise SystemExit("bench job: name the job once, as conf=NAME (for example conf=eval_invoices)")
    return names[0], [a for a in job if not a.startswith("conf=")]


def _job(conf: str, overrides: list[str], arm: str, out: Path) -> Any:
    """The arm's job into ``out``, its config composed and validated as ``run`` does it; any error names the arm."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ..config import ConfigError, validate
    from ..pipeline import Job, compose

    if any(o.lstrip("+~").startswith("output.") for o in overrides):
        raise ConfigError(f"arm {arm}: output.* is the benchmark's to set (--keep DIR keeps the runs)")
    try:
        raw = compose(conf, [*overrides, f"output.dir={out}", "output.fresh=true"])  # a --keep DIR used before is decoded anew
        return Job(validate(raw), Path.cwd(), raw)
    except (HydraException, OmegaConfBaseException, ConfigError) as err:
        raise ConfigError(f"arm {arm}: {' '.join(str(err).split())}") from None


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    conf, shared = _conf(args.job)
    arms = [JobArm(name, overrides) for name, overrides in (args.arms or [("job", [])])]
    if len({a.name for a in arms}) < len(arms):
        raise SystemExit("bench job: give each --arm a name of its own")
    work = args.keep or Path(tempfile.mkdtemp(prefix="fucina-bench-job-"))
    try:
        _rounds(conf, shared, arms, args.rounds, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return _result(conf, shared, args.rounds, arms)


def _rounds(conf: str, shared: list[str], arms: list[JobArm], rounds: int, work: Path) -> None:
    """Every arm's run of every round, alternated, on one Ray (started here unless one is up), into ``work/ARM/round-N``."""
    import ray

    from ..pipeline import connect

    def jobs(r: int) -> dict[str, Any]:
        return {a.name: _job(conf, [*shared, *a.overrides], a.name, work / a.name / f"round-{r}") for a in arms}

    first = jobs(0)  # every arm's config, dataset and examples checked before any model loads
    started = connect(next(iter(first.values())).cfg, max(job.cfg.runtime.replicas for job in first.values()))
    try:
        for r, arm in alternate(arms, rounds):
            _round(arm, first.pop(arm.name) if r == 0 else jobs(r)[arm.name])
            log.info("round %d, %s: %.3f s a row", r, arm.name, arm.walls[-1])
    finally:
        if started:
            ray.shutdown()


def _round(arm: JobArm, job: Any) -> None:
    """One run of ``arm``'s ``job``: its wall per row, counts, content hash and scores."""
    from ..eval.evaluate import generate_scores
    from ..eval.runs import content_hash, read_run

    sent: list[float] = []
    summary = job.run(on_dispatch=lambda shard, replica: sent or sent.append(time.perf_counter()))
    ended = time.perf_counter()
    if not summary.ok or not sent:
        raise RuntimeError(f"arm {arm.name}: the run did not complete ({summary.shards_failed} shards failed); see {job.dir.name}/logs")
    run = read_run(job.dir.name, job.base)
    arm.walls.append((ended - sent[0]) / summary.rows)
    arm.hashes.append(content_hash(run))
    arm.rows, arm.records, arm.rejects = summary.rows, summary.records, summary.rejects
    arm.repairs = sum(s.get("repair_attempts") or 0 for s in run.stats)
    arm.scores = generate_scores(run, job.cfg, job.base)


def _result(conf: str, shared: list[str], rounds: int, arms: list[JobArm]) -> dict[str, Any]:
    base = statistics.median(arms[0].walls)
    out = []
    for a in arms:
        accuracy = a.scores.get("accuracy") or {}
        median = statistics.median(a.walls)
        out.append(
            {
                "name": a.name,
                "overrides": a.overrides,
                "wall_per_row_s": a.walls,
                "median_s": median,
                "ratio": median / base,
                "rows": a.rows,
                "records": a.records,
                "rejects": a.rejects,
                "repair_attempts": a.repairs,
                "tokens_per_forward": a.scores["efficiency"]["tokens_per_forward"],
                "same_output_every_round": len(set(a.hashes)) == 1,
                "accuracy_mean": (accuracy.get("mean") or {}).get("rate"),
                "all_fields_correct": (accuracy.get("all_fields_correct") or {}).get("correct"),
            }
        )
    return {"conf": conf, "overrides": shared, "rounds": rounds, "arms": out}


def format_job(result: dict[str, Any]) -> str:
    header = [
        "arm",
        "wall per row, each round",
        "median",
        "x first",
        "tok/fwd",
        "records",
        "rejects",
        "repairs",
        "same output",
        "mean acc",
        "all right",
    ]
    rows = [
        [
            a["name"],
            " ".join(f"{w:.3f}" for w in a["wall_per_row_s"]),
            f"{a['median_s']:.3f} s",
            x_ratio(a["ratio"]),
            f"{a['tokens_per_forward']:.2f}" if a["tokens_per_forward"] else "-",
            a["records"],
            a["rejects"],
            a["repair_attempts"],
            yes_no(a["same_output_every_round"]),
            "-" if a["accuracy_mean"] is None else f"{a['accuracy_mean']:.1%}",
            "-" if a["all_fields_correct"] is None else f"{a['all_fields_correct']} of {a['rows']}",
        ]
        for a in result["arms"]
    ]
    shared = " ".join([f"conf={result['conf']}", *result["overrides"]])
    legend = "\n".join(f"  {a['name']}: {' '.join(a['overrides']) or '(as configured)'}" for a in result["arms"])
    return (
        f"bench job: {shared}, {result['rounds']} rounds, arms alternated; wall per row from the first shard sent "
        f"(model loaded) to the run's end\n\n{format_table(header, rows)}\n\narms:\n{legend}\n"
    )


def main(args: argparse.Namespace) -> int:
    from ..config import ConfigError

    if args.rounds < 1:
        raise SystemExit("bench job: --rounds must be 1 or more")
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    try:
        result = run_job(args)
    except ConfigError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    if args.save:
        args.save.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_job(result))
    return 0
