"""A decoder layer's element-wise ops, each one pass over its rows, on the CPU.

Once attention ran in one kernel call a layer, the element-wise ops around
the linears (RMSNorm and its residual add, RoPE, the MLP's activation and
multiply) were much of what was not a GEMM: about twenty torch calls a Llama
layer, each a pass over the rows and a dispatch. These kernels
(``layer_ops.cpp``) do them in four; docs/history/BENCHMARKS.md (sixth pass)
has the figures. Gemma's layers take the same kernels with a parameter: its
norm scales by ``1 + w`` in float32 (four norms a layer, and one per query and
key head in Gemma 3), its activation is GELU-tanh.

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
    "rms_norm": [_P, _I, _P, _I, _P, _I, _P, _I, _I, _I, ctypes.c_double, _T, _T],
    "rope": [_P, _I, _P, _P, _I, _I, _I, _T],
    "act_mul": [_P, _P, _I, _I, _I, _T, _T],
}
#: The MLP activations ``act_mul`` does, by transformers' names, as ``layer_ops.cpp`` numbers them.
ACTIVATIONS = {"silu": 0, "gelu_pytorch_tanh": 1}


def supports(dtype: torch.dtype) -> bool:
    """Whether the kernels can run a model of this dtype, once built."""
    return dtype in _SUFFIX


@functools.cache
def _kernel(op: str, dtype: torch.dtype):
    return native.entry(f"fucina_{op}_{_SUFFIX[dtype]}", _ARGS[op], ctypes.c_int if op == "act_mul" else None)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[rows, width]`` over its own memory; its rows may be strided, their elements not."""
    rows = x.view(-1, x.shape[-1]) if x.is_contiguous() else x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1 or rows.data_ptr() != x.data_ptr():
        raise ValueError(f"layer kernels: a tensor of shape {tuple(x.shape)} and strides {x.stride()} is not row-dense")
    return rows


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    *,
    gemma: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``weight * x / rms(x)`` over each ``weight``-wide segment of the last axis, as transformers' ``LlamaRMSNorm``;
    ``gemma``: ``(1 + weight) * x / rms(x)`` computed in float32, as ``Gemma3RMSNorm`` (and Gemma 2's).

    A last axis wider than ``weight`` is that many heads, each normed on its own
    (Gemma 3's q/k norms). With ``residual``, ``x += residual`` first, in place:
    the layer's residual stream, which the caller keeps using. ``out`` may be
    ``x`` itself; by default a new tensor.
    """
    rows, n = _rows(x), weight.shape[-1]
    if rows.shape[1] % n:
        raise ValueError(f"layer kernels: a row of {rows.shape[1]} is not a whole number of {n}-wide heads")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    dest, res = _rows(out), _rows(residual) if residual is not None else None
    _kernel("rms_norm", x.dtype)(
        dest.data_ptr(),
        dest.stride(0),
        rows.data_ptr(),
        rows.stride(0),
        res.data_ptr() if res is not None else None,
        res.stride(0) if res is not None else 0,
        weight.data_ptr(),
        rows.shape[0],
        rows.shape[1] // n,
        n,
        eps,
        gemma,
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


def act_mul(gate_up: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(gate) * up`` for rows ``[gate | up]``: the MLP between its two linears; ``activation`` is one of
    ``ACTIVATIONS`` (transformers' ``hidden_act``)."""
    rows = _rows(gate_up)
    out = gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)
    status = _kernel("act_mul", gate_up.dtype)(
        out.data_ptr(), rows.data_ptr(), rows.stride(0), rows.shape[0], out.shape[-1], ACTIVATIONS[activation], torch.get_num_threads()
    )
    if status:
        raise ValueError(f"layer kernels: no activation {activation!r}")
    return out
