"""A CPU attention kernel: every sequence of a step, prompt chunks included, in one call per layer.

torch's CPU SDPA runs a decode step's few query rows at a fraction of the
arithmetic rate, about 200 us a call, and a step makes one call per sequence and
layer: a fifth of an 8-stream step (docs/BENCHMARKS.md). This kernel
(``decode_attention.cpp``) reads each sequence's keys and values in its slot once
per kv head, for all the query heads that share it, and runs every sequence of
the step in one parallel loop. It also takes prompt chunks: 10-15% off a
forward of seven prompt tails, against SDPA's masked calls.

Each query row's sums run in a fixed order whatever else the step holds, so a
row comes out the same bit for bit alone or batched, in a plain step or a
speculative one. Its float32 rows differ from SDPA's in rounding (about 1e-6);
bfloat16 is computed in float32 and rounded once, at the output.

It is built once per machine with the host's C++ compiler (``$CXX``, default
``g++``; ``-O3 -march=native -fopenmp``, about two seconds) into the model cache
and loaded with ctypes. Without a compiler the runner keeps SDPA and logs why.
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

import torch

from .loading import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_suffix(".cpp")
_FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]
_HEAD_DIMS = (16, 32, 64, 128)
_ENTRY = {torch.float32: "fucina_decode_attention_f32", torch.float64: "fucina_decode_attention_f64",
          torch.bfloat16: "fucina_decode_attention_bf16"}


def supports(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether the kernel can run a model of this dtype and head dim, once built."""
    return dtype in _ENTRY and head_dim in _HEAD_DIMS


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built kernel, or None (logged once) where it cannot be built here."""
    cxx = os.environ.get("CXX", "g++")
    try:
        path = _build(cxx)
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or str(err)
        log.warning("decode attention kernel not built with %s (%s): attention runs on torch's SDPA, slower; "
                    "install a C++ compiler with OpenMP or set CXX to one", cxx, detail.strip().splitlines()[-1] if detail.strip() else err)
        return None
    lib = ctypes.CDLL(str(path))
    for name in _ENTRY.values():
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int]
    return lib


def _build(cxx: str) -> Path:
    """Compile the kernel unless this machine's build is cached; keyed by source, compiler, flags and CPU."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), cxx, version, *_FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    path = cache_dir() / "kernels" / f"decode_attention-{key}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:  # replicas may build at once: rename is atomic
            built = Path(tmp) / path.name
            subprocess.run([cxx, *_FLAGS, str(SOURCE), "-o", str(built)], capture_output=True, text=True, check=True)
            built.replace(path)
        log.info("built the decode attention kernel: %s", path)
    return path


def _cpu_flags() -> str:
    """The CPU's feature flags: ``-march=native`` code must not run on another CPU sharing the cache."""
    try:
        return next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return ""


def attend(out: torch.Tensor, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, spans: torch.Tensor, scale: float) -> None:
    """Write ``out[t]`` (``[tokens, heads, dim]``) for every token of ``spans``, from ``query`` (``[heads, tokens, dim]``).

    ``keys``/``values`` are one layer's store, ``[slots, kv_heads, capacity, dim]``;
    ``spans`` rows are (slot, first token, tokens, length once written), int64:
    token ``j`` of a span sees its slot's keys up to position ``length - tokens + j``.
    """
    heads, _, dim = query.shape
    if not (keys.is_contiguous() and values.is_contiguous() and out.stride(-1) == 1):
        raise ValueError("decode attention kernel: the store must be contiguous and the output's rows dense")
    if query.stride(-1) != 1:
        query = query.contiguous()
    status = getattr(library(), _ENTRY[query.dtype])(
        out.data_ptr(), out.stride(0), out.stride(1), query.data_ptr(), query.stride(1), query.stride(0),
        keys.data_ptr(), values.data_ptr(), heads, keys.shape[1], keys.shape[2], dim,
        spans.data_ptr(), len(spans), scale, torch.get_num_threads(),
    )
    if status:
        raise ValueError(f"decode attention kernel: head dim {dim} is not one of {_HEAD_DIMS}")
