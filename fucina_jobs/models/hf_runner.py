"""``ModelRunner`` over a transformers causal LM, with ragged batches.

Each sequence keeps its own key/value tensors. A batched forward left-pads
the caches to a common length into a buffer with room for the new tokens,
which are right-padded, with an attention mask and explicit position ids, so
sequences of any length and any number of new tokens share one forward. A
single sequence needs no mask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class SequenceKV:
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # [H, L, D] each
    length: int = 0


class HFRunner:
    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu"):
        self.model = model
        self.device = torch.device(device)
        self.vocab_size = model.config.vocab_size
        if self.device.type == "cpu":
            # Let CPU attention read grouped KV heads in place even with a padding
            # mask; otherwise transformers copies every layer's keys and values
            # out to all query heads, which costs 40% of an 8-stream step.
            # (On CUDA a mask plus GQA falls back to a slow kernel, so not there.)
            os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")

    def new_state(self) -> SequenceKV:
        return SequenceKV()

    def trim(self, state: SequenceKV, length: int) -> None:
        state.layers = [(k[:, :length], v[:, :length]) for k, v in state.layers]
        state.length = min(state.length, length)

    def fork(self, state: SequenceKV, length: int) -> SequenceKV:
        # Views are safe to share: a forward never writes into existing tensors, it builds new ones.
        twin = SequenceKV(list(state.layers), state.length)
        self.trim(twin, length)
        return twin

    @torch.no_grad()
    def forward(self, batch: Sequence[tuple[SequenceKV, Sequence[int]]], *, logits: bool = True) -> list[torch.Tensor]:
        states = [s for s, _ in batch]
        lengths = [len(t) for _, t in batch]
        past = max(s.length for s in states)
        width = max(lengths)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        for b, (_, tokens) in enumerate(batch):
            ids[b, : len(tokens)] = torch.as_tensor(tokens, dtype=torch.long)
        positions = torch.stack([s.length + torch.arange(width) for s in states])
        kwargs = {}
        if len(batch) > 1:
            kwargs["attention_mask"] = self._padding_mask(states, lengths, past, width)
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions.to(self.device),
            cache=self._padded_cache(states, past, width),
            use_cache=True,
            logits_to_keep=width if logits else 1,
            **kwargs,
        )
        self._keep_new(states, lengths, out.cache, past)
        if not logits:
            return []
        rows = out.logits.float().cpu()
        return [rows[b, :n] for b, n in enumerate(lengths)]

    def _padding_mask(self, states: list[SequenceKV], lengths: list[int], past: int, width: int) -> torch.Tensor:
        mask = torch.zeros((len(states), past + width), dtype=torch.long)
        for b, (state, n) in enumerate(zip(states, lengths)):
            mask[b, past - state.length : past + n] = 1
        return mask.to(self.device)

    def _padded_cache(self, states: list[SequenceKV], past: int, width: int) -> DynamicCache:
        cache = DynamicCache()
        if past == 0:
            return cache
        n_layers = len(next(s for s in states if s.layers).layers)
        cache.layers = [
            _BufferedLayer(*(self._left_pad([s.layers[i][j] if s.layers else None for s in states], past, width) for j in (0, 1)), past)
            for i in range(n_layers)
        ]
        return cache

    def _left_pad(self, tensors: list[torch.Tensor | None], past: int, width: int) -> torch.Tensor:
        """``[B, H, past + width, D]``: each sequence right-aligned at ``past``, room for the new tokens."""
        ref = next(t for t in tensors if t is not None)
        buffer = ref.new_zeros((len(tensors), ref.shape[0], past + width, ref.shape[2]))
        for b, t in enumerate(tensors):
            filled = t.shape[1] if t is not None else 0
            buffer[b, :, : past - filled] = 0  # masked, but must be finite: 0 * NaN is NaN
            if filled:
                buffer[b, :, past - filled : past] = t
        return buffer

    def _keep_new(self, states: list[SequenceKV], lengths: list[int], cache: DynamicCache, past: int) -> None:
        for b, (state, n) in enumerate(zip(states, lengths)):
            start = past - state.length
            state.layers = [(layer.keys[b, :, start : past + n], layer.values[b, :, start : past + n]) for layer in cache.layers]
            state.length += n


class _BufferedLayer(DynamicLayer):
    """A cache layer whose buffer already has room for this forward's tokens.

    Writing the new keys and values in place saves the copy of the whole
    cache that concatenation would make in every layer of every step.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, past: int):
        super().__init__()
        self.keys, self.values, self.past = keys, values, past
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.past + key_states.shape[-2]
        self.keys[:, :, self.past : end] = key_states
        self.values[:, :, self.past : end] = value_states
        self.past = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.past
