"""``python -m fucina_jobs run conf=NAME [overrides]``: Hydra in front of the driver.

``conf=NAME`` picks ``conf/NAME.yaml`` as the primary config; everything else
is an ordinary Hydra override. The composed config is resolved, validated
with pydantic and written as JSON into the run's manifest before any model
loads.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
log = logging.getLogger("fucina_jobs")

_exit_code = 0


def run(argv: list[str]) -> int:
    import hydra

    global _exit_code
    argv = [f"--config-name={a[len('conf='):]}" if a.startswith("conf=") else a for a in argv]
    if not any(a.startswith(("--config-name", "-cn")) for a in argv) and not {"--help", "-h", "--hydra-help"} & set(argv):
        jobs = sorted(p.stem for p in CONF_DIR.glob("*.yaml") if p.stem != "base")
        sys.stderr.write(f"say which job to run: conf=NAME, one of {', '.join(jobs)}\n")
        return 2
    sys.argv = ["python -m fucina_jobs run", *argv]
    hydra.main(config_path=str(CONF_DIR), config_name=None, version_base="1.3")(_task)()
    return _exit_code


def _task(cfg) -> None:
    from omegaconf import OmegaConf

    from .config import ConfigError, validate
    from .driver import Job
    from .progress import summary_table

    global _exit_code
    resolved = OmegaConf.to_container(cfg, resolve=True)
    try:
        job_cfg = validate(resolved)
        job = Job(job_cfg, Path.cwd(), resolved)
        summary = job.run()
    except ConfigError as err:
        log.error("%s", err)
        _exit_code = 2
        return
    sys.stdout.write(summary_table(summary, str(job.out)) + "\n")
    _exit_code = 0 if summary.ok else 1
