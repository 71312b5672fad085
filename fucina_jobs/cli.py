"""``python -m fucina_jobs COMMAND ...``: subcommand dispatch.

``run`` hands its remaining arguments to Hydra (``conf=NAME`` plus ordinary
overrides); ``bench`` takes argparse flags.
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m fucina_jobs COMMAND [ARGS]

commands:
  run conf=NAME [key=value ...]   run the batch job conf/NAME.yaml (Hydra overrides; --help, --cfg job)
  bench decode|streams [--json]   benchmark the decoder on the shipped invoice job

examples:
  python -m fucina_jobs run conf=extract_invoices
  python -m fucina_jobs run conf=extract_invoices runtime.replicas=2 dataset.limit=4
  python -m fucina_jobs bench decode --json
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from .pipeline.cli import run

        return run(rest)
    if command == "bench":
        from .bench import main as bench

        return bench(rest)
    sys.stderr.write(f"unknown command {command!r}\n\n{USAGE}")
    return 2
