"""The CPU decode kernel against SDPA, and what the equivalence proofs rest on at float32: a query row's
result does not depend on the rows it shares a call with."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fucina_jobs import native
from fucina_jobs.models import decode_attention

HEADS, KV_HEADS, SLOTS, CAPACITY = 6, 2, 6, 80
#: (slot, first token, tokens, length once written): ragged counts, a slot gap (3), a single token, and a
#: prompt chunk of 30 tokens after 45 cached, whose 90 query rows a kv head take two passes.
SPANS = [(0, 0, 4, 37), (2, 4, 1, 60), (4, 5, 9, 71), (1, 14, 2, 9), (5, 16, 30, 75)]


def case(dtype: torch.dtype, dim: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(SLOTS, KV_HEADS, CAPACITY, dim, generator=g).to(dtype) for _ in range(2))
    query = torch.randn(HEADS, sum(s[2] for s in SPANS), dim, generator=g).to(dtype)
    return query, keys, values


def kernel(query, keys, values, spans) -> torch.Tensor:
    """``spans`` as in ``SPANS``."""
    out = torch.full((query.shape[1], HEADS, query.shape[2]), float("nan"), dtype=query.dtype)
    decode_attention.attend(out, query, keys, values, torch.tensor(spans, dtype=torch.long), 0.3)
    return out


def sdpa(query, keys, values, span) -> torch.Tensor:
    slot, start, count, length = span
    mask = torch.arange(length) <= torch.arange(length - count, length)[:, None]
    out = F.scaled_dot_product_attention(
        query[None, :, start : start + count],
        keys[slot : slot + 1, :, :length],
        values[slot : slot + 1, :, :length],
        attn_mask=mask,
        scale=0.3,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)


@pytest.fixture(autouse=True)
def built():
    assert native.library() is not None, "the CPU kernels did not build: is g++ installed?"


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_kernel_matches_sdpa(dtype, atol, dim):
    """bfloat16 is computed in float32 and rounded once: against SDPA in float32 over the same inputs."""
    query, keys, values = case(dtype, dim)
    out = kernel(query, keys, values, SPANS)
    assert out.dtype == dtype
    wide = [t.float() if dtype == torch.bfloat16 else t for t in (query, keys, values)]
    for span in SPANS:
        start, count = span[1], span[2]
        expected = sdpa(*wide, span).to(dtype)
        assert torch.allclose(out[start : start + count].to(wide[0].dtype), expected.to(wide[0].dtype), atol=atol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_result_does_not_depend_on_the_batch(dtype):
    """Bit for bit: a span alone or among others, and a feed's first rows alone (a plain step, or a shorter
    draft) against the longer feed's."""
    query, keys, values = case(dtype, 64, seed=1)
    together = kernel(query, keys, values, SPANS)
    for span in SPANS:
        start, count = span[1], span[2]
        assert torch.equal(kernel(query, keys, values, [span])[start : start + count], together[start : start + count])
    for slot, start, count, length in SPANS[2], SPANS[4]:  # 27 query rows a kv head (two vectors), and 90
        for first in (1, 2, 5, 22):
            if first < count:
                shorter = kernel(query, keys, values, [(slot, start, first, length - count + first)])
                assert torch.equal(shorter[start : start + first], together[start : start + first])


def test_a_head_dim_it_is_not_built_for_is_refused():
    assert not decode_attention.supports(torch.float32, 80) and not decode_attention.supports(torch.float16, 64)
    query, keys, values = case(torch.float32, 80)
    with pytest.raises(ValueError, match="head dim 80"):
        kernel(query, keys, values, SPANS)
