"""The fused element-wise kernels against transformers' own ops, and the row independence that the
float32 equivalence proofs rest on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from fucina_jobs import native
from fucina_jobs.models import layer_ops

ROWS, WIDTH, DIM, HEADS, KV_HEADS = 40, 72, 16, 4, 2  # 72: four 16-lane blocks and a tail of eight
#: dtype: (atol, rtol). bfloat16 results may differ by one rounding step where an RMS or an exp lands
#: on a rounding boundary, and a SiLU under 1e-30 may come out as zero.
TOLERANCE = {torch.float32: (1e-6, 1e-5), torch.bfloat16: (1e-6, 1e-2)}


@pytest.fixture(autouse=True)
def built():
    assert native.library() is not None, "the CPU kernels did not build: is g++ installed?"


def rand(*shape, dtype, seed=0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_rms_norm_and_its_residual_add_match_transformers(dtype):
    atol, rtol = TOLERANCE[dtype]
    norm = LlamaRMSNorm(WIDTH, eps=1e-5).to(dtype)
    norm.weight.data = rand(WIDTH, dtype=dtype, seed=1)
    x, residual = rand(1, ROWS, WIDTH, dtype=dtype), rand(1, ROWS, WIDTH, dtype=dtype, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(layer_ops.rms_norm(x, norm.weight, 1e-5), norm(x), atol=atol, rtol=rtol)
        total = residual + x
        out = layer_ops.rms_norm(x, norm.weight, 1e-5, residual=residual)
        assert torch.equal(x, total), "the residual is added into x, in place"
        torch.testing.assert_close(out, norm(total), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_rope_matches_transformers_and_leaves_the_values(dtype):
    atol, rtol = TOLERANCE[dtype]
    qkv = rand(1, ROWS, (HEADS + 2 * KV_HEADS) * DIM, dtype=dtype)
    angles = torch.arange(ROWS)[:, None] * torch.rand(DIM // 2, generator=torch.Generator().manual_seed(3))
    cos, sin = (f(torch.cat([angles, angles], -1))[None].to(dtype) for f in (torch.cos, torch.sin))
    split = [HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM]
    q, k, v = (t.reshape(1, ROWS, -1, DIM).transpose(1, 2) for t in qkv.split(split, -1))
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    values = v.clone()
    layer_ops.rope_(qkv, HEADS + KV_HEADS, cos, sin)
    torch.testing.assert_close(q, expected_q, atol=atol, rtol=rtol)
    torch.testing.assert_close(k, expected_k, atol=atol, rtol=rtol)
    assert torch.equal(v, values)


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_silu_mul_matches_torch(dtype):
    """Large inputs of both signs included: the sigmoid must not overflow."""
    atol, rtol = TOLERANCE[dtype]
    gate_up = rand(ROWS, 2 * WIDTH, dtype=dtype) * 40
    gate, up = gate_up.chunk(2, -1)
    torch.testing.assert_close(layer_ops.silu_mul(gate_up), F.silu(gate) * up, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", TOLERANCE)
@pytest.mark.parametrize("rows", [3, 2000], ids=["one-thread", "parallel"])
def test_a_rows_result_does_not_depend_on_the_batch(dtype, rows):
    """Bit for bit: a row's output alone equals its output among others, on one thread or many."""
    x, residual = rand(rows, WIDTH, dtype=dtype), rand(rows, WIDTH, dtype=dtype, seed=1)
    weight = rand(WIDTH, dtype=dtype, seed=2)
    gate_up = rand(rows, 2 * WIDTH, dtype=dtype, seed=3)
    cos, sin = rand(rows, DIM, dtype=dtype, seed=4), rand(rows, DIM, dtype=dtype, seed=5)

    def ops(a, b, c, d, e):
        a, rotated = a.clone(), c.clone()
        layer_ops.rope_(rotated, 2, d, e)
        return layer_ops.rms_norm(a, weight, 1e-6, residual=b), layer_ops.silu_mul(c), rotated

    qkv = gate_up[:, : 3 * DIM]
    together = ops(x, residual, qkv.contiguous(), cos, sin) + (layer_ops.silu_mul(gate_up),)
    for r in (0, rows // 2, rows - 1):
        alone = ops(x[r : r + 1], residual[r : r + 1], qkv[r : r + 1].contiguous(), cos[r : r + 1], sin[r : r + 1])
        alone += (layer_ops.silu_mul(gate_up[r : r + 1]),)
        for a, t in zip(alone, together):
            assert torch.equal(a[0], t[r])


def test_a_tensor_whose_rows_are_not_dense_is_refused():
    x = rand(8, 2 * WIDTH, dtype=torch.float32)[:, ::2]
    with pytest.raises(ValueError, match="not row-dense"):
        layer_ops.rope_(x, 1, rand(8, DIM, dtype=torch.float32), rand(8, DIM, dtype=torch.float32))


def test_float64_is_left_to_torch():
    assert layer_ops.supports(torch.float32) and layer_ops.supports(torch.bfloat16)
    assert not layer_ops.supports(torch.float64)
