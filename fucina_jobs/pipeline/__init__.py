"""The run of a job: the Hydra command, the driver, the shards and their replicas on Ray.

``cli`` composes ``conf=NAME`` and its overrides; ``driver.Job`` checks the job before any model
loads, plans its shards and counts their summaries; ``ray_pool`` holds the replicas, each a
``replica.ShardWorker`` that reads its slice, builds the prompts (``examples``, ``chunking``,
``voting``), decodes them through one engine session (``decode_loop``) and writes the shard
(``shard_writer``: judged, merged (``merging``), flagged (``flags``), committed).

The other layers (``eval``, ``review``, the ``learn`` command, ``bench``, the command line) import
the names below from here, never one of the modules (``tests/test_layers.py``). Each loads on first
use: the run's modules bring in torch and Ray, which a config error or ``learn`` should not wait for.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Each public name and the module of this package that defines it.
_PUBLIC = {
    "Chunker": "chunking",
    "Job": "driver",
    "compact_json": "examples",
    "compose": "cli",
    "connect": "ray_pool",
    "hydra_command": "cli",
    "read_constraint": "job_constraint",
    "run_command": "cli",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """``from fucina_jobs.pipeline import Job``: the name, imported from its module the first time it is asked for."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value
