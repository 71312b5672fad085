"""``python -m fucina_jobs run conf=NAME [overrides]``: Hydra in front of the driver.

``conf=NAME`` picks ``NAME.yaml`` as the primary config: from ``--config-dir``
(by default ``./conf`` of the working directory, where there is one), else
from the jobs the package ships (``config.SHIPPED``'s ``conf/``, which also holds
``base``); everything else is an ordinary Hydra override. The composed config
is resolved, validated with pydantic and written as JSON into the run's
manifest before any model loads. ``hydra_command`` is shared by every
Hydra-driven subcommand (``run``, ``eval``), so they read configs and
overrides the same way.
"""

from __future__ import annotations

import errno
import logging
import re
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

from ..config import ENGINES, REMOVED, SHIPPED, ConfigError, register_defaults, unknown_engine
from .signals import stop_of, stopping

#: The package's own configs: ``base`` and the shipped jobs, searched after the job folder.
PACKAGE_CONF = SHIPPED / "conf"
log = logging.getLogger("fucina_jobs")

_exit_code = 0


def run_command(argv: list[str]) -> int:
    return hydra_command("run", argv, _task)


def hydra_command(name: str, argv: list[str], task: Callable[[Any, dict[str, Any]], int]) -> int:
    """Compose ``conf=NAME`` plus overrides with Hydra and call ``task(job_config, resolved)``.

    ``task`` returns the exit code. Errors come back as one line, never a traceback: a
    ``ConfigError`` or a config file Hydra cannot read exits 2, a disk error (full,
    read-only) exits 1, Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129; a rerun of the
    same command resumes."""
    import os

    import hydra
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    argv = [f"--config-name={a[len('conf=') :]}" if a.startswith("conf=") else a for a in argv]
    search = config_search(argv)
    argv = search.argv
    if not any(a.startswith(("--config-name", "-cn")) for a in argv) and not {"--help", "-h", "--hydra-help"} & set(argv):
        sys.stderr.write(f"say which job to {name}: conf=NAME, one of {', '.join(job_names(search.folder))}\n")
        return 2
    engine = dict(_override(a) for a in argv).get("engine")
    if engine is not None and engine not in ENGINES:  # Hydra's own error for engine=null is a traceback
        return _fail(unknown_engine(engine), 2)
    sys.argv = [f"python -m fucina_jobs {name}", *argv]
    register_defaults()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing a traceback; the messages below say it in a line
    try:
        with stopping():  # SIGTERM and SIGHUP stop a run as Ctrl-C does
            hydra.main(config_path=search.primary, config_name=None, version_base="1.3")(_validated(task))()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{mark.name} line {mark.line + 1}" if mark else "a config file"
        return _fail(f"{where}: malformed YAML ({getattr(err, 'problem', None) or err})", 2)
    except (HydraException, OmegaConfBaseException) as err:
        ours = _our_error(err)
        return _fail(str(ours) if ours is not None else _hydra_error(err, search.folder), 2)
    except OSError as err:
        return _fail(_disk_error(err), 1)
    except KeyboardInterrupt as err:
        return _fail(*_interrupted(err))
    return _exit_code


class ConfigSearch(NamedTuple):
    primary: str  # Hydra's primary config folder
    argv: list[str]  # without --config-dir, with the package's configs on Hydra's search path
    folder: Path  # the user's job folder: --config-dir, else ./conf


def config_search(argv: list[str]) -> ConfigSearch:
    """Where ``conf=NAME`` (``--config-name=NAME``) is read from: the user's folder where it holds ``NAME.yaml``, else the
    package's jobs. The package's configs stay on the search path, so that a job of one's own lists ``base``."""
    rest, folder, name = [], Path("conf"), None
    args = iter(argv)
    for arg in args:
        if arg in ("--config-dir", "-cd"):
            folder = Path(next(args, ""))
        elif arg.startswith("--config-dir="):
            folder = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
            name = arg.split("=", 1)[1] if arg.startswith("--config-name=") else name
    if (folder / f"{name}.yaml").is_file() or (name is None and folder.is_dir()):
        return ConfigSearch(str(folder.resolve()), _with_override(rest, f"hydra.searchpath=['file://{PACKAGE_CONF}']"), folder)
    return ConfigSearch(str(PACKAGE_CONF), rest, folder)


def _with_override(args: list[str], override: str) -> list[str]:
    """``args`` with ``override`` just before the user's first one: Hydra reads the overrides as one run of arguments,
    which an option (``--cfg job``) ends, so one put anywhere else would split them."""
    at = next((i for i, a in enumerate(args) if a.startswith("~") or ("=" in a and not a.startswith("-"))), len(args))
    return [*args[:at], override, *args[at:]]


def job_names(folder: Path) -> list[str]:
    """The jobs ``conf=NAME`` can name: the user's folder's and the package's."""
    return sorted({p.stem for f in (folder, PACKAGE_CONF) for p in f.glob("*.yaml")} - {"base"})


def compose(name: str, overrides: list[str]) -> dict[str, Any]:
    """Job ``name`` with ``overrides``, found, composed and resolved as ``run`` does it (for benchmarks and tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    register_defaults()
    search = config_search([f"--config-name={name}", *overrides])
    overrides = [a for a in search.argv if not a.startswith("--config-name=")]
    with initialize_config_dir(search.primary, version_base="1.3"):
        return OmegaConf.to_container(hydra_compose(config_name=name, overrides=overrides), resolve=True)


def _hydra_error(err: Exception, folder: Path) -> str:
    """Hydra's error in one line; a job or an engine that is not there says which ones are."""
    message = " ".join(str(err).split())
    if engine := re.search(r"Could not find 'engine/([^']*)'", message):
        return unknown_engine(engine.group(1))
    if job := re.match(r"Cannot find primary config '([^']*)'", message):
        name = job.group(1)
        return f"conf={name}: no {name}.yaml in {folder.resolve()} or the package's jobs; the jobs are {', '.join(job_names(folder))}"
    if (removed := re.match(r"Could not override '([^']*)'", message)) and removed.group(1) in REMOVED:
        return REMOVED[removed.group(1)]
    where = f"override {err.override!r}: " if getattr(err, "override", None) else ""
    return where + message


def _override(arg: str) -> tuple[str, str]:
    """An override's key and value: ``engine=vllm`` is ``("engine", "vllm")``."""
    key, _, value = arg.partition("=")
    return key.lstrip("+~"), value


def _our_error(err: BaseException) -> ConfigError | None:
    """The ``ConfigError`` one of our resolvers (``config.hydra_dir``) raised, inside OmegaConf's and Hydra's wrapping."""
    while err is not None and not isinstance(err, ConfigError):
        err = err.__cause__ or err.__context__
    return err


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{message}\n")  # not logging: Hydra's own logging config sends it to stdout
    return code


_DISK_HINTS = {
    errno.ENOSPC: "the disk is full: free space, then rerun the same command to resume",
    errno.EROFS: "the file system is read-only: choose another output.dir",
    errno.EACCES: "permission denied: fix the permissions or choose another output.dir",
}


def _disk_error(err: OSError) -> str:
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}; {_DISK_HINTS.get(err.errno, 'rerun the same command to resume once it is fixed')}"


def _interrupted(err: KeyboardInterrupt) -> tuple[str, int]:
    """The line and exit code for a stop: 130 for Ctrl-C, 128 + N for signal N (SIGTERM 143, SIGHUP 129)."""
    stop = stop_of(err)
    if stop.signum != signal.SIGINT:
        return f"interrupted by {stop.name}: rerun the same command to resume", stop.exit_code
    return "interrupted: rerun the same command to resume", 130


def _validated(task: Callable[[Any, dict[str, Any]], int]) -> Callable[[Any], None]:
    def main(cfg) -> None:
        from omegaconf import OmegaConf

        from ..config import validate

        global _exit_code
        resolved = OmegaConf.to_container(cfg, resolve=True)
        try:
            _exit_code = task(validate(resolved), resolved)
        except ConfigError as err:
            log.error("%s", err)
            _exit_code = 2
        except OSError as err:
            log.error("%s", _disk_error(err))
            _exit_code = 1
        except KeyboardInterrupt as err:
            message, _exit_code = _interrupted(err)
            log.error("%s", message)

    return main


def _task(job_cfg, resolved: dict[str, Any]) -> int:
    from .driver import Job
    from .progress import summary_table

    job = Job(job_cfg, Path.cwd(), resolved)
    summary = job.run()
    sys.stdout.write(summary_table(summary, job.dir.name) + "\n")
    return 0 if summary.ok else 1
