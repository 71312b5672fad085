"""The one folder this package writes outside a job's outputs: converted models, built kernels, compiled code."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models, the CPU kernels and torch.compile's code live; ``FUCINA_CACHE`` overrides the default."""
    root = os.environ.get("FUCINA_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fucina_jobs")
    return Path(root)
