"""This package's C++ kernels for the CPU, built once per machine and loaded with ctypes.

The sources live here, and the Python that calls each says why it exists:
attention over the slotted store (``decode_attention.cpp``, for
``models/decode_attention.py``), a Llama or Gemma layer's element-wise ops fused into
single passes (``layer_ops.cpp``, for ``models/layer_ops.py``; both share
``native.h``), and llguidance's packed token mask applied to a logits row
(``token_mask.cpp``, for ``decoding/constraint.py``).

They are built with the host's C++ compiler (``$CXX``, default ``g++``;
``-O3 -march=native -fopenmp``, a few seconds) into the model cache, keyed by
the sources, the compiler, the flags and the CPU, and loaded with ctypes: no
torch headers, no pybind. Without a compiler the runner keeps torch's own ops
and the mask numpy's unpack, and ``library`` logs why.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from ..cache import cache_dir

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
SOURCES = [_HERE / "decode_attention.cpp", _HERE / "layer_ops.cpp", _HERE / "token_mask.cpp", _HERE / "greedy.cpp"]
_HEADER = _HERE / "native.h"
_FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built kernels, or None (logged once) where they cannot be built here."""
    cxx = os.environ.get("CXX", "g++")
    try:
        return ctypes.CDLL(str(_build(cxx)))
    except (OSError, subprocess.CalledProcessError) as err:
        detail = (getattr(err, "stderr", "") or str(err)).strip()
        log.warning(
            "CPU kernels not built with %s (%s): attention, the layers' element-wise ops and the token "
            "mask run on torch and numpy, slower; install a C++ compiler with OpenMP or set CXX to one",
            cxx,
            detail.splitlines()[-1] if detail else err,
        )
        return None


def entry(name: str, argtypes: list, restype: type | None = None) -> Callable:
    """The kernel ``name`` of the built library, typed; call only once ``library()`` is not None."""
    fn = getattr(library(), name)
    fn.argtypes, fn.restype = argtypes, restype
    return fn


def _build(cxx: str) -> Path:
    """Compile the kernels unless this machine's build is cached."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    texts = [p.read_text() for p in (*SOURCES, _HEADER)]
    key = hashlib.sha256("\0".join([*texts, cxx, version, *_FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    path = cache_dir() / "kernels" / f"fucina_kernels-{key}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:  # replicas may build at once: rename is atomic
            built = Path(tmp) / path.name
            subprocess.run([cxx, *_FLAGS, *map(str, SOURCES), "-o", str(built)], capture_output=True, text=True, check=True)
            built.replace(path)
        log.info("built the CPU kernels: %s", path)
    return path


def _cpu_flags() -> str:
    """The CPU's feature flags: ``-march=native`` code must not run on another CPU sharing the cache."""
    try:
        return next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return ""
