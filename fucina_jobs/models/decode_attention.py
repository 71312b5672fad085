"""A CPU attention kernel: every sequence of a step, prompt chunks included, in one call per layer.

torch's CPU SDPA runs a decode step's few query rows at a fraction of the
arithmetic rate, and a step makes one call per sequence and layer
(docs/history/BENCHMARKS.md, fifth pass). This kernel
(``decode_attention.cpp``) reads each sequence's keys and values in its slot once
per kv head, for all the query heads that share it, and runs every sequence of
the step in one parallel loop. It also takes prompt chunks, in place of SDPA's
masked calls.

Each query row's sums run in a fixed order whatever else the step holds, so a
row comes out the same bit for bit alone or batched, in a plain step or a
speculative one. Its float32 rows differ from SDPA's in rounding (about 1e-6);
bfloat16 is computed in float32 and rounded once, at the output.

It is built with the layer kernels (``fucina_jobs/native``); without a compiler the
runner keeps SDPA.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from .. import native

_HEAD_DIMS = (16, 32, 64, 128, 256)
_SUFFIX = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16"}
_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGS = [_P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I, _P, _I, ctypes.c_double, _I, _I, ctypes.c_double, ctypes.c_int]


def supports(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether the kernel can run a model of this dtype and head dim, once built."""
    return dtype in _SUFFIX and head_dim in _HEAD_DIMS


@functools.cache
def _kernel(dtype: torch.dtype):
    return native.entry(f"fucina_decode_attention_{_SUFFIX[dtype]}", _ARGS, ctypes.c_int)


def attend(
    out: torch.Tensor,
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    spans: torch.Tensor,
    scale: float,
    *,
    window: int | None = None,
    ring: int | None = None,
    softcap: float | None = None,
) -> None:
    """Write ``out[t]`` (``[tokens, heads, dim]``) for every token of ``spans``, from ``query`` (``[heads, tokens, dim]``).

    ``keys``/``values`` are one layer's store, ``[slots, kv_heads, capacity, dim]``;
    ``spans`` rows are (slot, first token, tokens, length once written), int64:
    token ``j`` of a span sees its slot's keys up to position ``length - tokens + j``.
    ``window`` (a sliding window) is how many keys a query sees, its own included, by
    position; ``ring``, where the store is a sliding layer's ring, is its period: position
    ``p`` is at row ``p % ring``; ``softcap`` caps the scaled scores at ``softcap * tanh(score / softcap)``.
    """
    heads, _, dim = query.shape
    if not (keys.is_contiguous() and values.is_contiguous() and out.stride(-1) == 1):
        raise ValueError("decode attention kernel: the store must be contiguous and the output's rows dense")
    if query.stride(-1) != 1:
        query = query.contiguous()
    status = _kernel(query.dtype)(
        out.data_ptr(),
        out.stride(0),
        out.stride(1),
        query.data_ptr(),
        query.stride(1),
        query.stride(0),
        keys.data_ptr(),
        values.data_ptr(),
        heads,
        keys.shape[1],
        keys.shape[2],
        dim,
        spans.data_ptr(),
        len(spans),
        scale,
        window or 0,
        ring or 0,
        softcap or 0.0,
        torch.get_num_threads(),
    )
    if status:
        raise ValueError(f"decode attention kernel: head dim {dim} is not one of {_HEAD_DIMS}")
