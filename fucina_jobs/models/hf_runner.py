"""``ModelRunner`` over a transformers causal LM: packed ragged batches over a slotted cache.

Every sequence owns a slot of one persistent key/value store. A batched
forward packs all sequences' new tokens into a single row with explicit
positions, so the linear layers, most of a step's cost, compute real tokens
only, never padding. A custom attention function registered with transformers
writes each layer's new keys and values into their slots, then attends in one
of three ways, all over views of the store, so no cache is ever copied:

- the CPU kernel (``decode_attention``), float32, float64 and bfloat16: one
  call per layer for every sequence of the step, prompt chunks included, each
  row's result independent of the batch. The CPU default where it builds:
  SDPA's calls per sequence took a fifth of a decode step. With it, in
  float32 and bfloat16, a Llama or Gemma layer's element-wise ops run fused too
  (``layer_ops``: RMSNorm with its residual add, RoPE, the MLP's activation and
  multiply);
- per sequence: one SDPA call per sequence over its own slot. Exact (no
  padding). In bfloat16 and float16, the query heads that share a kv head are
  folded into the query axis of a decode step's short sequences: CPU SDPA runs
  those precisions one head at a time, slowly;
- batched: one SDPA call per layer for the whole batch, its queries scattered
  into a ``[slots, queries]`` grid over the range of slots the batch uses and
  masked to each sequence's own keys. A GPU needs it: a loop over 128 streams
  is 128 kernel launches per layer. A sequence with many new tokens (a prompt
  chunk) attends on its own, so the grid is never padded to its length.

Each way honours what transformers' attention interface passes a layer: its
scaling, its sliding window and Gemma 2's logit soft-cap (``_Shape``). An
argument it does not know is refused, at load, not dropped; which families
that proves right is ``families``'.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import weakref
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2DecoderLayer, Gemma2MLP
from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3DecoderLayer, Gemma3MLP
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, apply_rotary_pos_emb

from .. import native
from ..cache import cache_dir
from ..private_apis import onednn_bf16_supported, onednn_linear, onednn_linear_available, onednn_pack
from . import decode_attention, families, layer_ops

_ATTENTION = "fucina_slots"
#: The profiler's name for the slotted attention's calls.
ATTENTION_LABEL = "fucina.attention"
#: SDPA's CUDA backends but cuDNN's, which builds a new execution plan for every new shape, and the
#: slotted store's key length grows every step, so it plans at every call (docs/history/BENCHMARKS.md, "GPU").
_CUDA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
#: Sequences with more new tokens (prompt chunks, long drafts) attend on their own in batched mode:
#: every sequence in the grid is padded to the longest one's queries.
_GRID_QUERIES = 16
#: A new store's slots: a few streams, the prefix cache's entries and a scratch fork, without a growth.
_FIRST_SLOTS = 16
#: The most new tokens one forward writes to a slot. Why 2048: the decoder's prompt chunk (``BatchDecoder``'s
#: ``prefill_tokens``); a sliding layer's ring holds its window and this many more, and a runner with rings
#: splits a forward that carries more for one sequence.
STEP_TOKENS = 2048


@dataclass(eq=False)
class SlotState:
    """One sequence's cache: positions ``[0, length)`` of a slot in its runner's store.

    ``high``: one past the furthest position ever written to the slot's rings (rejected drafts and, for a fork,
    its source's included): what a ring has overwritten, so what it still holds, follows from it (``HFRunner``).
    """

    slot: int
    length: int = 0
    high: int = 0


def held(capacity: int, ring: int | None) -> int:
    """The rows a slot of a layer has: ``capacity`` positions, or on a ring, no more than its period."""
    return capacity if ring is None else min(capacity, ring)


def ring_positions(ends: torch.Tensor | int, rows: int, period: int, device: torch.device) -> torch.Tensor:
    """The position each of a slot's first ``rows`` rows holds once positions ``[0, end)`` are written, at row
    ``position % period``: the latest of its residue before ``end``; negative where none was written yet.
    With ``period >= end``, row i holds position i."""
    last = ends - 1
    return last - (last - torch.arange(rows, device=device)) % period


class KVStore:
    """Keys and values of every live sequence: per layer, ``[slots, kv_heads, rows, head_dim]`` each.

    A layer attending to all keys holds ``capacity`` positions a slot. A
    sliding layer given a ring (``rings[layer]``, R) holds at most R, position
    p at row p % R: once a slot has grown past R, its oldest positions are
    overwritten, and what it holds beyond the window is what speculation may
    yet reject (``HFRunner``: "Why R").

    Slots and capacity grow by reallocation, doubling, so growth is rare and
    its copies amortise; slots come back to ``free`` when their state dies.
    ``zeroed``: a new store is zeros, not garbage, for the batched attention,
    which reads (masked) positions past a slot's length, where a NaN would
    survive its zero weight. The other attentions read written positions only,
    and a store left unwritten costs nothing until used: on CPU, zeroing a
    store of a few GiB takes seconds of page faults.
    """

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        zeroed: bool,
        rings: Sequence[int | None] | None = None,
    ):
        self.rings = list(rings) if rings is not None else [None] * layers
        self.kv_heads, self.head_dim = kv_heads, head_dim
        empty = torch.empty((0, kv_heads, 0, head_dim), dtype=dtype, device=device)
        self.keys, self.values = [empty] * layers, [empty] * layers
        self.slots = self.capacity = 0
        self.zeroed = zeroed
        self.free: list[int] = []

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.keys, *self.values))

    def slot_bytes(self, length: int, *, rings: bool = True) -> int:
        """Key and value bytes one slot holds at ``length`` positions; ``rings=False``: were every layer to keep them all."""
        rows = sum(held(length, ring if rings else None) for ring in self.rings)
        return 2 * rows * self.kv_heads * self.head_dim * self.keys[0].element_size()

    def take(self) -> int:
        if not self.free:
            self._grow(max(_FIRST_SLOTS, 2 * self.slots), self.capacity)
        return self.free.pop()

    def reserve(self, length: int) -> None:
        """Make room for ``length`` positions in every slot, and as many again for what follows (answers,
        drafts, longer prompts): each growth copies the whole store."""
        if length > self.capacity:
            self._grow(self.slots, 2 * max(length, self.capacity))

    def _grow(self, slots: int, capacity: int) -> None:
        old_slots = self.slots
        self.slots, self.capacity = slots, capacity
        for tensors in (self.keys, self.values):
            for layer, old in enumerate(tensors):
                shape = (slots, self.kv_heads, held(capacity, self.rings[layer]), self.head_dim)
                if shape == old.shape:  # a ring at its full period
                    continue
                new = old.new_zeros(shape) if self.zeroed else old.new_empty(shape)
                new[:old_slots, :, : old.shape[2]] = old  # a ring grows only while below its period: row i holds position i
                tensors[layer] = new
        self.free += range(slots - 1, old_slots - 1, -1)  # pop() hands out low slots first


@dataclass(kw_only=True)
class _Span:
    """Where one sequence's new tokens sit in the packed row and in its slot."""

    slot: int
    start: int  # first new token in the packed row
    count: int  # new tokens
    end: int  # the sequence's length once they are written
    mask: torch.Tensor | None  # bool ``[count, end]`` (``[group * count, end]`` folded); None when plain causal or a single token
    folded: bool  # the query heads that share a kv head are folded into the query axis
    positions: torch.Tensor  # the new tokens' positions

    def windowed(self, window: int, group: int, ring: int | None) -> torch.Tensor:
        """What each query sees within a sliding window: a query at position p, the keys at positions (p - window, p],
        each key at its row of the slot (on a ring, ``ring_positions``), ``[count, rows]`` (folded, ``[group * count, rows]``)."""
        period = self.end if ring is None else ring
        keys = ring_positions(self.end, held(self.end, ring), period, self.positions.device)
        query = self.positions[:, None]
        seen = (keys <= query) & (keys > query - window)
        return seen.repeat(group, 1) if self.folded else seen


@dataclass(kw_only=True)
class _Grid:
    """The batched attention's layout: slots ``[first, first + slots)``, ``queries`` rows each."""

    first: int
    slots: int
    queries: int
    group: int  # query heads a kv head
    keys: int  # longest sequence in the grid
    tokens: torch.Tensor  # the packed rows the grid attends for
    cells: torch.Tensor  # per such row: its cell ``slot * queries + j`` in the grid
    last_key: torch.Tensor  # per cell: the position of its token, the last key it sees
    mask: torch.Tensor  # bool ``[slots, 1, group * queries, keys]``: what each cell sees

    def windowed(self, window: int, ring: int | None) -> torch.Tensor:
        """What each cell sees within a sliding window: the keys at (its position - window, its position], each at
        its row of the slot (on a ring past its period, ``ring_positions`` of the slot's furthest cell)."""
        last = self.last_key.view(self.slots, 1, self.queries, 1)
        if ring is None or self.keys <= ring:
            keys = torch.arange(self.keys, device=last.device)
        else:
            ends = last.amax(2, keepdim=True) + 1
            keys = ring_positions(ends, ring, ring, last.device)
            last = torch.maximum(last, ends - ring)  # a cell no token fills sees the oldest key held, so never none
        seen = (keys >= 0) & (keys <= last) & (keys > last - window)
        rows = seen.shape[-1]
        return seen.expand(self.slots, self.group, self.queries, rows).reshape(self.slots, 1, self.group * self.queries, rows)


@dataclass(kw_only=True)
class _Step:
    """One forward's plan, handed to every layer's attention through the model's kwargs."""

    store: KVStore
    rows: dict[
        int | None, torch.Tensor
    ]  # per ring (None: none), per kv head, then per new token: its row in a layer's store seen as ``[-1, head_dim]``
    spans: list[_Span]  # the sequences that attend on their own
    grid: _Grid | None  # the others, in one call
    kernel: torch.Tensor | None  # or every sequence through the CPU kernel: ``decode_attention.attend``'s spans
    fused: bool = False  # a Llama or Gemma layer's element-wise ops run on the CPU kernels (``layer_ops``)
    windows: dict[int, int | None] | None = None  # where given (the load's probe), each layer's window is noted


#: What transformers' attention interface passes that the slotted attention honours, beside the query, keys,
#: values, mask and scaling: a sliding window (Mistral, Phi-3, Qwen2/3, Gemma 2/3) and logit soft-capping (Gemma 2).
_HONOURED = ("sliding_window", "softcap")
#: What it passes that changes nothing here: positions are in the keys already, dropout is 0 at inference.
_INERT = frozenset({"position_ids", "cache_position", "dropout", "output_attentions", "use_cache", "is_causal"})


class UnsupportedAttention(ValueError):
    """A model's attention asks for something no path of the runner does: refused, never decoded wrong."""


def _slotted_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: None,  # transformers builds no mask for this implementation
    scaling: float,
    dropout: float = 0.0,
    *,
    slot_step: _Step,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Store the packed row's keys and values (``[1, heads, tokens, dim]``), then attend (on CUDA, without cuDNN).

    An argument it does not know, set (not None or False), is refused, not dropped: a model whose attention needs it (attention sinks,
    say) would decode wrong in silence (``HFRunner`` probes this at load)."""
    unknown = sorted(name for name, v in kwargs.items() if v is not None and v is not False and name not in _INERT)
    if unknown:
        raise UnsupportedAttention(
            f"{type(module).__name__} asks the attention for {', '.join(unknown)}, which the fucina engine does not "
            f"implement (it honours {', '.join(_HONOURED)}); run this model with engine=vllm"
        )
    shape = _Shape(scaling, sliding_window or None, softcap or None)
    if slot_step.windows is not None:
        slot_step.windows[module.layer_idx] = shape.window
    # The label costs nothing unless a profiler runs: ``bench decode`` reads the attention's share of a forward off it.
    with sdpa_kernel(_CUDA_BACKENDS) if query.is_cuda else contextlib.nullcontext(), torch.profiler.record_function(ATTENTION_LABEL):
        return _attend_in_slots(module, query, key, value, shape, slot_step)


@dataclass(frozen=True)
class _Shape:
    """One layer's attention beyond its query, keys and values: what transformers' attention interface passes."""

    scaling: float
    window: int | None  # a query at position p sees keys at (p - window, p]
    softcap: float | None  # scaled scores become softcap * tanh(score / softcap), before the mask


def _attend_in_slots(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, shape: _Shape, slot_step: _Step
) -> tuple[torch.Tensor, None]:
    """One ``index_copy_`` per tensor writes every sequence's new entries (CPU advanced-index assignment takes
    eight times longer); then each span attends on its own and the grid in one call."""
    store = slot_step.store
    keys, values, ring = store.keys[module.layer_idx], store.values[module.layer_idx], store.rings[module.layer_idx]
    dim = key.shape[-1]
    keys.view(-1, dim).index_copy_(0, slot_step.rows[ring], key[0].reshape(-1, dim))
    values.view(-1, dim).index_copy_(0, slot_step.rows[ring], value[0].reshape(-1, dim))
    heads = query.shape[1]
    out = query.new_empty(query.shape[2], heads, dim)  # [tokens, heads, dim]
    for s in slot_step.spans:
        q = query[:, :, s.start : s.start + s.count]
        if s.folded:
            q = q.reshape(1, keys.shape[1], -1, dim)
        mask = s.mask if shape.window is None else s.windowed(shape.window, heads // keys.shape[1], ring)
        rows = held(s.end, ring)
        out[s.start : s.start + s.count] = (
            _sdpa(
                q,
                keys[s.slot : s.slot + 1, :, :rows],
                values[s.slot : s.slot + 1, :, :rows],
                mask,
                shape,
                causal=mask is None and s.count > 1,
                gqa=not s.folded,
            )
            .view(heads, s.count, dim)
            .transpose(0, 1)
        )
    if slot_step.grid is not None:
        out.index_copy_(0, slot_step.grid.tokens, _grid_attention(query, keys, values, shape, slot_step.grid, ring))
    if slot_step.kernel is not None:
        decode_attention.attend(out, query[0], keys, values, slot_step.kernel, shape.scaling, window=shape.window, ring=ring, softcap=shape.softcap)
    return out[None], None


def _sdpa(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, shape: _Shape, *, causal: bool, gqa: bool
) -> torch.Tensor:
    """SDPA, or with soft-capping (which no SDPA kernel does) its arithmetic spelled out, as transformers' eager does."""
    if shape.softcap is None:
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=causal, scale=shape.scaling, enable_gqa=gqa)
    if gqa:
        group = query.shape[1] // keys.shape[1]
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    scores = torch.tanh(query @ keys.transpose(-1, -2) * (shape.scaling / shape.softcap)) * shape.softcap
    if causal:  # a fresh sequence: keys and queries are the same positions
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril(scores.shape[-1] - scores.shape[-2])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1, dtype=torch.float32).to(query.dtype) @ values


def _grid_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, shape: _Shape, grid: _Grid, ring: int | None) -> torch.Tensor:
    """One SDPA call for the grid's sequences; returns ``[grid tokens, heads, dim]``.

    The query heads that share a kv head are folded into the query axis, so
    the kernel sees plain multi-head attention: no kernel's GQA support is
    needed, and each kv head is read once for its whole group.
    """
    heads, kv_heads, dim = query.shape[1], keys.shape[1], query.shape[-1]
    group = heads // kv_heads
    cells = query.new_zeros(grid.slots * grid.queries, heads, dim)
    cells.index_copy_(0, grid.cells, query[0].transpose(0, 1).index_select(0, grid.tokens))
    folded = cells.view(grid.slots, grid.queries, kv_heads, group, dim).permute(0, 2, 3, 1, 4)
    window, rows = slice(grid.first, grid.first + grid.slots), held(grid.keys, ring)
    out = _sdpa(
        folded.reshape(grid.slots, kv_heads, group * grid.queries, dim),
        keys[window, :, :rows],
        values[window, :, :rows],
        grid.mask if shape.window is None else grid.windowed(shape.window, ring),
        shape,
        causal=False,
        gqa=False,
    )
    out = out.view(grid.slots, kv_heads, group, grid.queries, dim).permute(0, 3, 1, 2, 4)
    return out.reshape(grid.slots * grid.queries, heads, dim).index_select(0, grid.cells)


# torch.compile leaves it out of its graphs: it plans over Python lists of spans, and SDPA is one kernel already.
_attend = torch.compiler.disable(_slotted_attention)
# Not registered with AttentionMaskInterface on purpose: transformers then builds no mask at all.
AttentionInterface.register(_ATTENTION, _attend)


def _fused_linear(parts: list[torch.nn.Linear]) -> torch.nn.Linear:
    """One ``Linear`` computing ``parts`` side by side; each part's weight becomes a view of it.

    One GEMM rather than two or three: at a decode step's few dozen rows each
    call has a fixed cost (and, with two threads, a parallel region to wake),
    and oneDNN's rows come out bit for bit the same as the parts' rows.
    """
    first = parts[0]
    fused = torch.nn.Linear(first.in_features, sum(p.out_features for p in parts), bias=first.bias is not None, device="meta")
    fused.weight = torch.nn.Parameter(torch.cat([p.weight for p in parts]), requires_grad=False)
    if first.bias is not None:
        fused.bias = torch.nn.Parameter(torch.cat([p.bias for p in parts]), requires_grad=False)
    start = 0
    for p in parts:  # the model keeps one copy of its weights
        p.weight = torch.nn.Parameter(fused.weight[start : start + p.out_features], requires_grad=False)
        if p.bias is not None:
            p.bias = torch.nn.Parameter(fused.bias[start : start + p.out_features], requires_grad=False)
        start += p.out_features
    return fused


class _FusedAttention:
    """Attention with q, k and v in one linear, in the runner's forwards; mixed into Llama's, Gemma 2's and
    Gemma 3's own classes (``_FUSED``), whose forward it is anywhere else (the model called on its own), over
    the same weights.

    With the element-wise kernels, Gemma 3's per-head q/k norms run in place on
    the projection, then queries and keys rotate in one pass.
    """

    qkv_proj: torch.nn.Linear

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        if "slot_step" not in kwargs:
            return super().forward(hidden_states, position_embeddings, attention_mask, **kwargs)
        step: _Step = kwargs["slot_step"]
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        sizes = [self.q_proj.out_features, self.k_proj.out_features, self.v_proj.out_features]
        qkv = self.qkv_proj(hidden_states)
        head_norms = getattr(self, "q_norm", None), getattr(self, "k_norm", None)  # Gemma 3's
        if step.fused:
            if head_norms[0] is not None:
                for part, norm in zip(qkv.split(sizes, -1), head_norms):
                    layer_ops.rms_norm(part, norm.weight, norm.eps, gemma=True, out=part)
            layer_ops.rope_(qkv, (sizes[0] + sizes[1]) // self.head_dim, *position_embeddings)
        query, key, value = (t.view(shape).transpose(1, 2) for t in qkv.split(sizes, -1))
        if not step.fused:
            if head_norms[0] is not None:
                query, key = head_norms[0](query), head_norms[1](key)
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        out, _ = _attend(self, query, key, value, None, self.scaling, slot_step=step, **self._shape())
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1)), None

    def _shape(self) -> dict:
        """What transformers' forward of this class passes its attention function beside the scaling."""
        return {}


class _FusedMLP:
    """An MLP with gate and up in one linear; ``activation`` is transformers' name for its ``act_fn``."""

    gate_up_proj: torch.nn.Linear
    activation: str

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, -1)
        return self.down_proj(self.act_fn(gate) * up)

    def fused(self, x: torch.Tensor) -> torch.Tensor:
        """``forward`` with the activation and multiply in one kernel pass."""
        return self.down_proj(layer_ops.act_mul(self.gate_up_proj(x), self.activation))


class _FusedLlamaLayer(LlamaDecoderLayer):
    """A Llama layer whose element-wise ops run on the CPU kernels when its step says so.

    Each norm takes the residual add before it in the same pass. Elsewhere,
    transformers' own layer.
    """

    def forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False, position_embeddings=None, **kwargs):
        step: _Step | None = kwargs.get("slot_step")
        if step is None or not step.fused:
            return super().forward(hidden_states, attention_mask, position_ids, cache, use_cache, position_embeddings, **kwargs)
        first, second = self.input_layernorm, self.post_attention_layernorm
        residual, _ = self.self_attn(layer_ops.rms_norm(hidden_states, first.weight, first.variance_epsilon), position_embeddings, **kwargs)
        normed = layer_ops.rms_norm(residual, second.weight, second.variance_epsilon, residual=hidden_states)
        return residual.add_(self.mlp.fused(normed))


class _FusedGemmaLayer:
    """A Gemma 2 or Gemma 3 layer (mixed into transformers' classes) whose element-wise ops run on the CPU kernels
    when its step says so: its four norms, Gemma's (1 + w), each one pass, the attention's output normed in
    place and the pre-feedforward norm taking the residual add before it. Elsewhere, transformers' own layer."""

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, position_ids=None, cache=None, **kwargs):
        step: _Step | None = kwargs.get("slot_step")
        if step is None or not step.fused:
            return super().forward(hidden_states, position_embeddings, attention_mask, position_ids, cache, **kwargs)
        attended, _ = self.self_attn(_gemma_norm(hidden_states, self.input_layernorm), position_embeddings, **kwargs)
        stream = _gemma_norm(attended, self.post_attention_layernorm, out=attended)
        mlp = self.mlp.fused(_gemma_norm(stream, self.pre_feedforward_layernorm, residual=hidden_states))  # stream += hidden_states
        return stream.add_(_gemma_norm(mlp, self.post_feedforward_layernorm, out=mlp))


def _gemma_norm(x: torch.Tensor, norm: torch.nn.Module, **kwargs) -> torch.Tensor:
    return layer_ops.rms_norm(x, norm.weight, norm.eps, gemma=True, **kwargs)


# Classes at module level, not made by ``type()``: a model holding them still pickles.
class _FusedLlamaAttention(_FusedAttention, LlamaAttention):
    pass


class _FusedGemma2Attention(_FusedAttention, Gemma2Attention):
    def _shape(self) -> dict:
        return {"sliding_window": self.sliding_window, "softcap": self.attn_logit_softcapping}


class _FusedGemma3Attention(_FusedAttention, Gemma3Attention):
    def _shape(self) -> dict:
        return {"sliding_window": self.sliding_window}  # no soft-cap, though its config may name one


class _FusedLlamaMLP(_FusedMLP, LlamaMLP):
    pass


class _FusedGemma2MLP(_FusedMLP, Gemma2MLP):
    pass


class _FusedGemma3MLP(_FusedMLP, Gemma3MLP):
    pass


class _FusedGemma2Layer(_FusedGemmaLayer, Gemma2DecoderLayer):
    pass


class _FusedGemma3Layer(_FusedGemmaLayer, Gemma3DecoderLayer):
    pass


#: transformers' class -> the runner's, for the families whose layers the runner fuses.
_FUSED: dict[type, type] = {
    LlamaDecoderLayer: _FusedLlamaLayer,
    Gemma2DecoderLayer: _FusedGemma2Layer,
    Gemma3DecoderLayer: _FusedGemma3Layer,
    LlamaAttention: _FusedLlamaAttention,
    Gemma2Attention: _FusedGemma2Attention,
    Gemma3Attention: _FusedGemma3Attention,
    LlamaMLP: _FusedLlamaMLP,
    Gemma2MLP: _FusedGemma2MLP,
    Gemma3MLP: _FusedGemma3MLP,
}
_FUSED_LAYERS = (_FusedLlamaLayer, _FusedGemmaLayer)


def _fuse_projections(model: torch.nn.Module) -> None:
    """Fuse each Llama and Gemma layer's q/k/v and gate/up projections, and, where the kernels do its MLP's
    activation, give the layer its fused element-wise path (other architectures stay as they are)."""
    config = model.config
    activation = getattr(config, "hidden_activation", None) or config.hidden_act  # Gemma's name, else Llama's
    for module in list(model.modules()):
        fused = _FUSED.get(type(module))
        if fused is None or (issubclass(fused, _FUSED_LAYERS) and activation not in layer_ops.ACTIVATIONS):
            continue
        if issubclass(fused, _FusedAttention):
            module.qkv_proj = _fused_linear([module.q_proj, module.k_proj, module.v_proj])
        elif issubclass(fused, _FusedMLP):
            module.gate_up_proj = _fused_linear([module.gate_proj, module.up_proj])
            module.activation = activation
        module.__class__ = fused


#: Each linear's weight in oneDNN's blocked layout, packed on its first forward (a ``WeakKeyDictionary``, not a
#: module attribute: oneDNN's tensors cannot be deep-copied, and a copied model packs its own). Keyed to the
#: weight's storage and version, so a weight changed in place is packed again.
_PACKED: weakref.WeakKeyDictionary[torch.nn.Linear, tuple[tuple[int, int], torch.Tensor]] = weakref.WeakKeyDictionary()
#: The rows oneDNN picks its weight layout for: a decode step's few dozen.
_PACK_ROWS = 32


class _OneDNNLinear(torch.nn.Linear):
    """A ``Linear`` whose forward runs on oneDNN, over its weight packed once (a class, not a per-module patch,
    so compiled code is shared)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # oneDNN's op does not trace with dynamic shapes: inductor picks its own GEMM
            return F.linear(x, self.weight, self.bias)
        return onednn_linear(x, self._packed(), self.bias)

    def _packed(self) -> torch.Tensor:
        key = (self.weight.data_ptr(), self.weight._version)
        cached = _PACKED.get(self)
        if cached is None or cached[0] != key:
            cached = _PACKED[self] = key, onednn_pack(self.weight.detach(), _PACK_ROWS)
        return cached[1]


def _use_onednn_linears(model: torch.nn.Module) -> None:
    """Run a CPU model's linear layers, most of a forward, on oneDNN, over weights it packed once.

    In float32, MKL takes its AVX2 code on AMD CPUs, where oneDNN takes
    AVX-512 for a step's few dozen rows. Left plain, a weight is reordered
    into oneDNN's layout on every call; packed once, it is not, in float32
    and in bfloat16 (docs/history/BENCHMARKS.md, sixth pass). Packed rows come out the same bit for bit
    whatever the number of rows, a single one included. The packed weights
    are a second copy: the model keeps its own for transformers' forward.
    """
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = _OneDNNLinear


def _onednn_packs(dtype: torch.dtype) -> bool:
    """oneDNN can pack this CPU's weights of ``dtype``: float32 wherever oneDNN is built in, bfloat16 only
    where the CPU has the instructions its packed path needs (AVX-512 BW/VL/DQ or AVX-NE-CONVERT; without them
    the reorder raises, and the model keeps torch's own linears)."""
    if not onednn_linear_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and onednn_bf16_supported())


def _compiled(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` of the model, its generated code cached across runs under the model cache."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
    return torch.compile(model, dynamic=True)


def _rows_to_keep(flags: list[list[bool]]) -> torch.Tensor:
    """transformers' ``logits_to_keep``: the packed rows whose logits are wanted (a flag per row of each sequence).

    The LM head is the widest layer: prefill rows skip it, and so do rows whose
    token a processor named (``decoding.speculative.StepAhead``). Always a tensor:
    transformers also takes an int, but one that is an int on some steps and a
    tensor on others makes ``torch.compile`` recompile until it hits its limit
    (docs/history/BENCHMARKS.md, "GPU").
    """
    return torch.tensor([row for row, flag in enumerate(itertools.chain.from_iterable(flags)) if flag], dtype=torch.long)


class HFRunner:
    """Runs ``model`` for the decoder; on CPU in float32 and bfloat16 its linear layers move to oneDNN for good.

    ``batched_attention`` picks one attention call per layer for the whole
    batch (the grid) rather than one per sequence; ``None`` leaves it to the
    device: the grid on CUDA, the CPU kernels where they build (attention in
    float32, float64 and bfloat16; the fused element-wise ops in float32 and
    bfloat16), else per sequence; ``False`` is SDPA per sequence and torch's
    element-wise ops, whose float32 rows the benchmarks before the kernels
    show. ``compile`` runs the forward
    through ``torch.compile`` with dynamic shapes, so the ragged batches of
    every step share one compiled graph per layer segment; on a CPU the
    compiled graph gives up the oneDNN linears, which do not trace
    (docs/history/BENCHMARKS.md, third pass: it does not pay there). A Llama or Gemma model's
    q/k/v and gate/up projections are fused in place, once; called on its own, the
    model still runs transformers' forward over the same weights.

    A sliding layer's keys and values live on a ring of R = window +
    ``step_tokens`` positions a slot (``KVStore``), found by the load's probe
    forward, which notes each layer's window. Why R: a forward writes at most
    ``step_tokens`` new positions to a slot (longer feeds are split), so after
    it the ring holds the window before each of its queries; and speculation
    trims back at most one forward's tokens, so the positions it drops were
    written after every position the window before the kept length needs:
    nothing a later query sees is lost. A rejected draft's keys stay on the
    ring until overwritten, at rows whose nominal position (``ring_positions``)
    lies at or before the kept length minus the window, so masks drop them. A
    state is sound while ``high - length <= step_tokens`` (``SlotState.high``):
    a fork or a trim that would break that is refused. A model without sliding
    layers keeps its store and its forwards exactly as before.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str = "cpu",
        *,
        batched_attention: bool | None = None,
        compile: bool = False,
        step_tokens: int = STEP_TOKENS,
    ):
        families.check(model.config, getattr(model, "name_or_path", "") or type(model).__name__)
        self.model = model
        self.device = torch.device(device)
        self.batched_attention = self.device.type == "cuda" if batched_attention is None else batched_attention
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self._kernel = (
            batched_attention is None
            and self.device.type == "cpu"
            and decode_attention.supports(model.dtype, head_dim)
            and native.library() is not None
        )
        self._fused = self._kernel and layer_ops.supports(model.dtype)
        # CPU SDPA (without the kernel) runs reduced precisions one query head at a time, slowly; folded, it runs
        # them together (docs/history/BENCHMARKS.md). float32 and float64 keep the unfolded kernel: the float32
        # rows of earlier benchmarks stay bit for bit, and the fold saves them little.
        self._fold_heads = model.dtype in (torch.bfloat16, torch.float16)
        self.vocab_size = model.config.vocab_size
        _fuse_projections(model)
        if self.device.type == "cpu" and _onednn_packs(model.dtype):
            _use_onednn_linears(model)
        self._call = _compiled(model) if compile else model
        self.step_tokens = step_tokens
        self._slack: int | None = None  # positions a state may have written past its length: ``step_tokens`` where rings are
        store = functools.partial(
            KVStore,
            config.num_hidden_layers,
            config.num_key_value_heads,
            head_dim,
            dtype=model.dtype,
            device=self.device,
            zeroed=self.batched_attention,
        )
        self.store, self._windows = store(), {}
        self.forward([(self.new_state(), [0])], logits=False)  # an attention argument it does not know is refused here, at load
        rings = [None if self._windows.get(layer) is None else self._windows[layer] + step_tokens for layer in range(config.num_hidden_layers)]
        self._windows = None
        if any(rings):
            self.store, self._slack = store(rings=rings), step_tokens

    @property
    def attention(self) -> str:
        """Which attention path runs: the CPU kernel, the batched grid, or SDPA per sequence (``bench decode`` says)."""
        head_dim = self.store.head_dim
        if self._kernel:
            fused = self._fused and any(isinstance(m, _FUSED_LAYERS) for m in self.model.modules())
            return f"cpu kernel, head_dim {head_dim}" + (", fused layer ops" if fused else "")
        return f"{'batched grid' if self.batched_attention else 'sdpa per sequence'}, head_dim {head_dim}"

    def new_state(self) -> SlotState:
        state = SlotState(self.store.take())
        # Callers never release states, they drop them (finished streams, evicted prefixes).
        weakref.finalize(state, self.store.free.append, state.slot)
        return state

    def spare(self) -> int:
        return len(self.store.free)

    def trim(self, state: SlotState, length: int) -> None:
        length = min(state.length, length)
        if not self._holds(state, length):
            raise ValueError(
                f"cannot trim a sequence back to {length} of its {state.length} positions: its sliding layers' rings keep "
                f"the window and {self.step_tokens} positions more (trim after each forward)"
            )
        state.length = length

    def fork(self, state: SlotState, length: int) -> SlotState | None:
        """A new state holding ``state``'s first ``length`` positions, or None where a sliding layer's ring has
        overwritten part of the window before ``length`` (the caller starts afresh)."""
        length = min(state.length, length)
        if not self._holds(state, length):
            return None
        twin = self.new_state()
        # Past its period, a ring is copied whole: every row of it was written, so no masked row holds a NaN, and
        # the twin's rows hold what the source's writes left there, as far as ``state.high``.
        wrapped = [ring is not None and state.high > ring for ring in self.store.rings]
        twin.length, twin.high = length, state.high if any(wrapped) else length
        for layer, (ring, whole) in enumerate(zip(self.store.rings, wrapped)):
            rows = ring if whole else length
            for cache in (self.store.keys, self.store.values):
                cache[layer][twin.slot, :, :rows] = cache[layer][state.slot, :, :rows]
        return twin

    def _holds(self, state: SlotState, length: int) -> bool:
        """Whether ``state`` cut to ``length`` positions is sound: every ring still holds the window before
        ``length``, and what was written past it lies where masks drop it (the class's "Why R")."""
        return self._slack is None or state.high - length <= self._slack

    @torch.no_grad()
    def forward(
        self,
        batch: Sequence[tuple[SlotState, Sequence[int]]],
        *,
        logits: bool | Sequence[bool | Sequence[bool]] = True,
    ) -> list[torch.Tensor]:
        counts = [len(tokens) for _, tokens in batch]
        wanted = [logits] * len(batch) if isinstance(logits, bool) else list(logits)
        flags = [[want] * n if isinstance(want, bool) else list(want) for want, n in zip(wanted, counts)]
        if self._slack is not None and max(counts, default=0) > self.step_tokens:
            return self._split(batch, flags, wanted)
        self.store.reserve(max(state.length + n for (state, _), n in zip(batch, counts)))
        ids = torch.tensor([t for _, tokens in batch for t in tokens], dtype=torch.long)
        stored = torch.cat([torch.arange(state.length, state.length + n) for (state, _), n in zip(batch, counts)])
        step = self._plan(batch, counts, stored)
        logits = self._run(ids, stored, step, _rows_to_keep(flags))
        for (state, _), n in zip(batch, counts):
            state.length += n
            state.high = max(state.high, state.length)
        return list(logits.float().cpu().split([sum(f) for want, f in zip(wanted, flags) if want is not False]))

    def _split(self, batch: Sequence[tuple[SlotState, Sequence[int]]], flags: list[list[bool]], wanted: list) -> list[torch.Tensor]:
        """``forward`` of a batch carrying more than ``step_tokens`` for a sequence, as forwards of that many at
        most for each: a ring holds no more than the window and one forward's new tokens."""
        parts: list[list[torch.Tensor]] = [[] for _ in batch]
        step = self.step_tokens
        for start in range(0, max(len(tokens) for _, tokens in batch), step):
            now = [i for i, (_, tokens) in enumerate(batch) if start < len(tokens) or start == 0]
            out = self.forward([(batch[i][0], batch[i][1][start : start + step]) for i in now], logits=[flags[i][start : start + step] for i in now])
            for i, rows in zip(now, out):
                parts[i].append(rows)
        return [torch.cat(p) for p, want in zip(parts, wanted) if want is not False]

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, step: _Step, keep: torch.Tensor) -> torch.Tensor:
        """The model over one packed row, through the slotted attention; the logits of the rows in ``keep``."""
        # The slotted attention is on for this forward only: the model keeps its
        # own everywhere else, so it still works when called directly.
        config = self.model.config
        own = config._attn_implementation
        config._attn_implementation = _ATTENTION
        try:
            out = self._call(
                input_ids=ids[None].to(self.device),
                position_ids=positions[None].to(self.device),
                use_cache=False,
                logits_to_keep=keep.to(self.device),
                slot_step=step,
            )
        finally:
            config._attn_implementation = own
        return out.logits[0]

    def _plan(self, batch: Sequence[tuple[SlotState, Sequence[int]]], counts: list[int], positions: torch.Tensor) -> _Step:
        """Where the new keys go (``positions`` in their slots), and what each sequence's queries see.

        Query ``j`` of a sequence sees its keys up to ``length + j`` (causal,
        bottom-right aligned). A fresh sequence is plain causal, which SDPA
        runs without a mask, faster; a single token needs no mask either.
        """
        store = self.store
        # Per-token lists are built in Python: CPU ``repeat_interleave`` wakes every intra-op thread even for
        # a few hundred elements, slow on a many-core GPU host (docs/history/BENCHMARKS.md, "GPU").
        slots = torch.tensor([state.slot for (state, _), n in zip(batch, counts) for _ in range(n)])
        heads = torch.arange(store.kv_heads)[:, None]
        rows = {
            ring: ((slots * store.kv_heads + heads) * held(store.capacity, ring) + (positions if ring is None else positions % ring)).flatten()
            for ring in set(store.rings)
        }
        starts = list(itertools.accumulate(counts[:-1], initial=0))
        if self._kernel:
            table = [(state.slot, start, n, state.length + n) for (state, _), n, start in zip(batch, counts, starts)]
            kernel = torch.tensor(table, dtype=torch.long)
            return _Step(store=store, rows=rows, spans=[], grid=None, kernel=kernel, fused=self._fused, windows=self._windows)
        spans: list[_Span] = []
        in_grid = [self.batched_attention and n <= _GRID_QUERIES for n in counts]
        group = self.model.config.num_attention_heads // self.model.config.num_key_value_heads
        for (state, _), n, grid, start in zip(batch, counts, in_grid, starts):
            if grid:
                continue
            end = state.length + n
            folded = self._fold_heads and n <= _GRID_QUERIES
            mask = None
            if n > 1 and (state.length or folded):
                keys = torch.arange(end, device=self.device)
                mask = keys <= torch.arange(state.length, end, device=self.device)[:, None]
                if folded:
                    mask = mask.repeat(group, 1)
            own = torch.arange(state.length, end, device=self.device)
            spans.append(_Span(slot=state.slot, start=start, count=n, end=end, mask=mask, folded=folded, positions=own))
        token_in_grid = [g for g, n in zip(in_grid, counts) for _ in range(n)]
        tokens = torch.tensor([i for i, g in enumerate(token_in_grid) if g], dtype=torch.long)
        grid = self._grid(tokens, slots[tokens], [n for n, g in zip(counts, in_grid) if g], positions[tokens]) if len(tokens) else None
        rows = {ring: r.to(self.device) for ring, r in rows.items()}
        return _Step(store=store, rows=rows, spans=spans, grid=grid, kernel=None, windows=self._windows)

    def _grid(self, tokens: torch.Tensor, slots: torch.Tensor, counts: list[int], positions: torch.Tensor) -> _Grid:
        """Cell ``(slot, j)`` holds a sequence's ``j``-th new token and sees its keys up to that token's position.

        Cells no token fills (short sequences, slots in the range that the
        batch does not use) see key 0 only, so that no softmax row is empty;
        their outputs are dropped.
        """
        first = int(slots.min())
        grid_slots, queries = int(slots.max()) - first + 1, max(counts)
        cells = (slots - first) * queries + torch.tensor([j for n in counts for j in range(n)])
        last_key = torch.zeros(grid_slots * queries, dtype=torch.long)
        last_key[cells] = positions
        keys = int(positions.max()) + 1
        mask = torch.arange(keys) <= last_key.view(grid_slots, 1, queries, 1)
        group = self.model.config.num_attention_heads // self.model.config.num_key_value_heads
        mask = mask.expand(grid_slots, group, queries, keys).reshape(grid_slots, 1, group * queries, keys)
        return _Grid(
            first=first,
            slots=grid_slots,
            queries=queries,
            group=group,
            keys=keys,
            tokens=tokens.to(self.device),
            cells=cells.to(self.device),
            last_key=last_key.to(self.device),
            mask=mask.to(self.device),
        )
