"""The fused element-wise kernels against transformers' own ops, and the row independence that the
float32 equivalence proofs rest on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import GELUTanh
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
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
def test_gemma_norm_matches_transformers_on_the_stream_and_on_each_head(dtype):
    """Gemma's (1 + w) norm in float32, rounded once: over the hidden state with its residual add, and over each
    head of a strided slice of a projection, in place (Gemma 3's q/k norms), the columns beside it untouched."""
    atol, rtol = TOLERANCE[dtype]
    norm = Gemma3RMSNorm(WIDTH, eps=1e-6).to(dtype)
    norm.weight.data = rand(WIDTH, dtype=dtype, seed=1)
    x, residual = rand(1, ROWS, WIDTH, dtype=dtype), rand(1, ROWS, WIDTH, dtype=dtype, seed=2)
    head = Gemma3RMSNorm(DIM, eps=1e-6).to(dtype)
    head.weight.data = rand(DIM, dtype=dtype, seed=3)
    qkv = rand(1, ROWS, (HEADS + 2 * KV_HEADS) * DIM, dtype=dtype, seed=4)
    before = qkv.clone()
    with torch.no_grad():
        total = residual + x
        torch.testing.assert_close(layer_ops.rms_norm(x, norm.weight, 1e-6, residual=residual, gemma=True), norm(total), atol=atol, rtol=rtol)
        assert torch.equal(x, total)
        keys = qkv[..., HEADS * DIM : (HEADS + KV_HEADS) * DIM]
        expected = head(before[..., HEADS * DIM : (HEADS + KV_HEADS) * DIM].reshape(1, ROWS, KV_HEADS, DIM)).reshape(keys.shape)
        assert layer_ops.rms_norm(keys, head.weight, 1e-6, gemma=True, out=keys) is keys
    torch.testing.assert_close(keys, expected, atol=atol, rtol=rtol)
    assert torch.equal(qkv[..., : HEADS * DIM], before[..., : HEADS * DIM])
    assert torch.equal(qkv[..., (HEADS + KV_HEADS) * DIM :], before[..., (HEADS + KV_HEADS) * DIM :])


def test_a_row_that_is_not_whole_heads_is_refused():
    x = rand(4, WIDTH, dtype=torch.float32)
    with pytest.raises(ValueError, match="not a whole number of 16-wide heads"):
        layer_ops.rms_norm(x[:, :40], rand(DIM, dtype=torch.float32), 1e-6)


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
@pytest.mark.parametrize("activation, torch_act", [("silu", F.silu), ("gelu_pytorch_tanh", GELUTanh())])
def test_activation_and_multiply_match_torch(dtype, activation, torch_act):
    """Large inputs of both signs included: the sigmoid must not overflow, nor the tanh."""
    atol, rtol = TOLERANCE[dtype]
    if activation == "gelu_pytorch_tanh":  # a large negative gate's 1 + tanh cancels: an ulp of tanh, times |gate * up| ~ 1e3
        atol = 1e-4
    gate_up = rand(ROWS, 2 * WIDTH, dtype=dtype) * 40
    gate, up = gate_up.chunk(2, -1)
    torch.testing.assert_close(layer_ops.act_mul(gate_up, activation), torch_act(gate) * up, atol=atol, rtol=rtol)


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
        normed = layer_ops.rms_norm(a, weight, 1e-6, residual=b)
        return normed, layer_ops.rms_norm(normed, weight[:24], 1e-6, gemma=True), layer_ops.act_mul(c, "silu"), rotated

    qkv = gate_up[:, : 3 * DIM]
    together = ops(x, residual, qkv.contiguous(), cos, sin) + (layer_ops.act_mul(gate_up, "gelu_pytorch_tanh"),)
    for r in (0, rows // 2, rows - 1):
        alone = ops(x[r : r + 1], residual[r : r + 1], qkv[r : r + 1].contiguous(), cos[r : r + 1], sin[r : r + 1])
        alone += (layer_ops.act_mul(gate_up[r : r + 1], "gelu_pytorch_tanh"),)
        for a, t in zip(alone, together):
            assert torch.equal(a[0], t[r])


def test_a_tensor_whose_rows_are_not_dense_is_refused():
    x = rand(8, 2 * WIDTH, dtype=torch.float32)[:, ::2]
    with pytest.raises(ValueError, match="not row-dense"):
        layer_ops.rope_(x, 1, rand(8, DIM, dtype=torch.float32), rand(8, DIM, dtype=torch.float32))


def test_float64_is_left_to_torch():
    assert layer_ops.supports(torch.float32) and layer_ops.supports(torch.bfloat16)
    assert not layer_ops.supports(torch.float64)
