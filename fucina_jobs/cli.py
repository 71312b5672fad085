"""``fucina-jobs COMMAND ...`` (or ``python -m fucina_jobs COMMAND ...``, the same): subcommand dispatch.

``run``, ``eval`` and ``learn`` hand their remaining arguments to Hydra (``conf=NAME`` plus
ordinary overrides); ``init``, ``compare``, ``review``, ``export``, ``import`` and ``bench`` take argparse arguments.
"""

from __future__ import annotations

import sys

USAGE = """usage: fucina-jobs COMMAND [ARGS]     (or: python -m fucina_jobs COMMAND [ARGS])

commands:
  run conf=NAME [key=value ...]        run the batch job conf/NAME.yaml: ./conf first, then the shipped jobs (--help, --cfg job)
  eval conf=NAME [key=value ...]       run the job (or read eval.run_dir=DIR) and score it: scores.json, report.md/html
  learn conf=NAME gold=FILE [out=FILE] learn the job's x-grounded cues from gold rows into a reviewed file (--help)
  init DIR                             write a starter job into DIR: conf/invoices.yaml, its schema, prompts and five rows
  compare RUN_A RUN_B                  are two runs' outputs identical (content hash)? exit 0 yes, 1 no
  review RUN_DIR [--limit N]           list a run's least certain values first (per-field confidence)
  review RUN_DIR --html OUT.html       a page to check every row by eye: its text with the values highlighted
  export labelstudio RUN_DIR OUT.json  Label Studio tasks, the run's values as predictions, and labelstudio.xml
  import labelstudio EXPORT GOLD.jsonl Label Studio annotations as gold labels for eval.gold
  bench decode|streams|engines|pipeline|occupancy|reports|job [--json]   benchmark the decoder, the engines, the data path, a job

examples:
  fucina-jobs run conf=extract_invoices                         # a shipped job, from any folder
  fucina-jobs run conf=extract_invoices runtime.replicas=2 dataset.limit=4
  fucina-jobs init myproject && cd myproject && fucina-jobs run conf=invoices
  fucina-jobs eval conf=eval_invoices dataset.limit=4
  fucina-jobs learn conf=extract_receipts gold=gold.jsonl dataset.path=inputs.jsonl
  fucina-jobs eval conf=conformance
  fucina-jobs compare outputs/run_a outputs/run_b
  fucina-jobs review outputs/extract_invoices --limit 10
  fucina-jobs review outputs/extract_invoices --html review.html
  fucina-jobs export labelstudio outputs/extract_invoices tasks.json
  fucina-jobs import labelstudio project-export.json gold.jsonl
  fucina-jobs bench decode --json
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from .pipeline import run_command

        return run_command(rest)
    if command == "learn":
        from .learn_command import learn_command

        return learn_command(rest)
    if command == "init":
        from .starter import init_command

        return init_command(rest)
    if command == "eval":
        from .eval.cli import eval_command

        return eval_command(rest)
    if command == "compare":
        from .eval.cli import compare_command

        return compare_command(rest)
    if command == "review":
        from .review.cli import review_command

        return review_command(rest)
    if command in ("export", "import"):
        return _labelstudio(command, rest)
    if command == "bench":
        from .bench.cli import main as bench

        return bench(rest)
    sys.stderr.write(f"unknown command {command!r}\n\n{USAGE}")
    return 2


def _labelstudio(command: str, rest: list[str]) -> int:
    if not rest or rest[0] != "labelstudio":
        sys.stderr.write(f"usage: python -m fucina_jobs {command} labelstudio ...: labelstudio is the one tool {command} knows\n")
        return 2
    from .review.labelstudio import export_command, import_command

    return (export_command if command == "export" else import_command)(rest[1:])
