"""``python -m fucina_jobs run conf=NAME [overrides]``: Hydra in front of the driver.

``conf=NAME`` picks ``conf/NAME.yaml`` as the primary config; everything else
is an ordinary Hydra override. The composed config is resolved, validated
with pydantic and written as JSON into the run's manifest before any model
loads. ``hydra_command`` is shared by every Hydra-driven subcommand (``run``,
``eval``), so they read configs and overrides the same way.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
log = logging.getLogger("fucina_jobs")

_exit_code = 0


def run(argv: list[str]) -> int:
    return hydra_command("run", argv, _task)


def hydra_command(name: str, argv: list[str], task: Callable[[Any, dict[str, Any]], int]) -> int:
    """Compose ``conf=NAME`` plus overrides with Hydra and call ``task(job_config, resolved)``.

    ``task`` returns the exit code; a ``ConfigError`` it raises is logged and exits 2."""
    import hydra

    argv = [f"--config-name={a[len('conf='):]}" if a.startswith("conf=") else a for a in argv]
    if not any(a.startswith(("--config-name", "-cn")) for a in argv) and not {"--help", "-h", "--hydra-help"} & set(argv):
        jobs = sorted(p.stem for p in CONF_DIR.glob("*.yaml") if p.stem != "base")
        sys.stderr.write(f"say which job to {name}: conf=NAME, one of {', '.join(jobs)}\n")
        return 2
    sys.argv = [f"python -m fucina_jobs {name}", *argv]
    hydra.main(config_path=str(CONF_DIR), config_name=None, version_base="1.3")(_validated(task))()
    return _exit_code


def _validated(task: Callable[[Any, dict[str, Any]], int]) -> Callable[[Any], None]:
    def main(cfg) -> None:
        from omegaconf import OmegaConf

        from .config import ConfigError, validate

        global _exit_code
        resolved = OmegaConf.to_container(cfg, resolve=True)
        try:
            _exit_code = task(validate(resolved), resolved)
        except ConfigError as err:
            log.error("%s", err)
            _exit_code = 2

    return main


def _task(job_cfg, resolved: dict[str, Any]) -> int:
    from .driver import Job
    from .progress import summary_table

    job = Job(job_cfg, Path.cwd(), resolved)
    summary = job.run()
    sys.stdout.write(summary_table(summary, str(job.out)) + "\n")
    return 0 if summary.ok else 1
