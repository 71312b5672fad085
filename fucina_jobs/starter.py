"""``fucina-jobs init DIR``: a starter job in a folder of one's own, copied from the shipped invoice job.

It writes ``conf/invoices.yaml`` (listing ``base``, which the package ships),
the schema, the cues ``learn`` found for it, the two prompt files and the first five invoices, so that
``fucina-jobs run conf=invoices`` run in ``DIR`` decodes them, and every file
the job reads is the user's to edit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import SHIPPED

ROWS = 5
CONFIG = """\
# A starter job, copied from the package's invoice job: edit the schema, the prompts and the rows.
#   fucina-jobs run conf=invoices                  # from this folder
#   fucina-jobs run conf=invoices --cfg job        # the composed config, every default included
defaults:
  - base
  - _self_

name: invoices
constraint:
  json_schema: schemas/invoice.json
  learned: schemas/invoice.learned.json  # fucina-jobs learn conf=invoices gold=YOUR_GOLD.jsonl out=schemas/invoice.learned.json
dataset:
  path: data/invoices.jsonl
prompt:
  system: "@prompts/system.txt"
  template: "@prompts/template.txt"
decoding:
  max_tokens: 200
"""


def starter_files() -> dict[str, str]:
    """Each file of the starter job by its path in the folder."""
    job = SHIPPED / "jobs" / "invoices"
    rows = (job / "inputs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:ROWS]
    return {
        "conf/invoices.yaml": CONFIG,
        "schemas/invoice.json": (SHIPPED / "schemas" / "invoice.json").read_text(encoding="utf-8"),
        "schemas/invoice.learned.json": (job / "learned.json").read_text(encoding="utf-8"),
        "prompts/system.txt": (job / "system.txt").read_text(encoding="utf-8"),
        "prompts/template.txt": (job / "template.txt").read_text(encoding="utf-8"),
        "data/invoices.jsonl": "".join(rows),
    }


def init_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fucina-jobs init", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the folder to write the job into (made if missing)")
    folder = parser.parse_args(argv).dir
    files = starter_files()
    taken = [name for name in files if (folder / name).exists()]
    if taken:
        sys.stderr.write(f"{folder}: {', '.join(taken)} already there; init writes only into a folder without them\n")
        return 2
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {', '.join(files)} into {folder}\nrun it: cd {folder} && fucina-jobs run conf=invoices\n")
    return 0
