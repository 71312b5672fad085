"""A Llama layer's element-wise ops, each one pass over its rows, on the CPU.

Once attention ran in one kernel call a layer, the element-wise ops around
the linears (RMSNorm and its residual add, RoPE, SiLU-and-multiply) were much
of what was not a GEMM: about twenty torch calls a layer, each a pass over
the rows and a dispatch. These kernels (``layer_ops.cpp``) do them in four;
docs/history/BENCHMARKS.md (sixth pass) has the figures.

Rows are computed on their own, each in a fixed order, so a row's result does
not depend on the batch. float32 differs from torch's ops in rounding (the
RMS sum's order, the exp); bfloat16 is rounded wherever torch rounds it.
float64, the tests' reference precision, keeps torch's ops: transformers
normalises it in float32, and that rounding is not worth imitating.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from .. import native

_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}
_P, _I, _T = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGS = {
    "rms_norm": [_P, _P, _I, _P, _I, _P, _I, _I, ctypes.c_double, _T],
    "rope": [_P, _I, _P, _P, _I, _I, _I, _T],
    "silu_mul": [_P, _P, _I, _I, _I, _T],
}


def supports(dtype: torch.dtype) -> bool:
    """Whether the kernels can run a model of this dtype, once built."""
    return dtype in _SUFFIX


@functools.cache
def _kernel(op: str, dtype: torch.dtype):
    return native.entry(f"fucina_{op}_{_SUFFIX[dtype]}", _ARGS[op])


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[rows, width]`` over its own memory; its rows may be strided, their elements not."""
    rows = x.view(-1, x.shape[-1]) if x.is_contiguous() else x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1 or rows.data_ptr() != x.data_ptr():
        raise ValueError(f"layer kernels: a tensor of shape {tuple(x.shape)} and strides {x.stride()} is not row-dense")
    return rows


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None) -> torch.Tensor:
    """``weight * x / rms(x)`` over the last axis, as transformers' ``LlamaRMSNorm``.

    With ``residual``, ``x += residual`` first, in place: the layer's residual
    stream, which the caller keeps using.
    """
    rows = _rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    res = _rows(residual) if residual is not None else None
    _kernel("rms_norm", x.dtype)(
        out.data_ptr(),
        rows.data_ptr(),
        rows.stride(0),
        res.data_ptr() if res is not None else None,
        res.stride(0) if res is not None else 0,
        weight.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        eps,
        torch.get_num_threads(),
    )
    return out


def rope_(x: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate the first ``heads`` heads of each row of ``x`` in place (``apply_rotary_pos_emb``'s arithmetic).

    ``x`` is a ``[..., width]`` projection (queries, then keys, then values);
    ``cos`` and ``sin`` are ``[..., head_dim]``, a row for each of its rows.
    """
    rows, cos, sin = _rows(x), cos.contiguous(), sin.contiguous()
    _kernel("rope", x.dtype)(
        rows.data_ptr(), rows.stride(0), cos.data_ptr(), sin.data_ptr(), rows.shape[0], heads, cos.shape[-1], torch.get_num_threads()
    )


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for rows ``[gate | up]``: the Llama MLP between its two linears."""
    rows = _rows(gate_up)
    out = gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)
    _kernel("silu_mul", gate_up.dtype)(out.data_ptr(), rows.data_ptr(), rows.stride(0), rows.shape[0], out.shape[-1], torch.get_num_threads())
    return out
