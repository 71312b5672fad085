"""``ModelRunner`` over a transformers causal LM, with ragged batches.

Each sequence keeps its own key/value tensors. A batched forward left-pads
the caches to a common length and right-pads the new tokens, with an
attention mask and explicit position ids, so sequences of any length and any
number of new tokens share one forward. A single sequence skips the padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers import DynamicCache


@dataclass
class SequenceKV:
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # [H, L, D] each
    length: int = 0


class HFRunner:
    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu"):
        self.model = model
        self.device = torch.device(device)
        self.vocab_size = model.config.vocab_size

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
            cache=self._padded_cache(states, past),
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

    def _padded_cache(self, states: list[SequenceKV], past: int) -> DynamicCache | None:
        if past == 0:
            return DynamicCache()
        if len(states) == 1:
            return DynamicCache(ddp_cache_data=[(k[None], v[None]) for k, v in states[0].layers])
        n_layers = len(next(s for s in states if s.layers).layers)
        layers = [
            tuple(self._left_pad([s.layers[i][j] if s.layers else None for s in states], past) for j in (0, 1))
            for i in range(n_layers)
        ]
        return DynamicCache(ddp_cache_data=layers)

    def _left_pad(self, tensors: list[torch.Tensor | None], past: int) -> torch.Tensor:
        ref = next(t for t in tensors if t is not None)
        padded = ref.new_zeros((len(tensors), ref.shape[0], past, ref.shape[2]))
        for b, t in enumerate(tensors):
            if t is not None and t.shape[1]:
                padded[b, :, past - t.shape[1] :] = t
        return padded

    def _keep_new(self, states: list[SequenceKV], lengths: list[int], cache: DynamicCache, past: int) -> None:
        for b, (state, n) in enumerate(zip(states, lengths)):
            start = past - state.length
            state.layers = [(layer.keys[b, :, start : past + n], layer.values[b, :, start : past + n]) for layer in cache.layers]
            state.length += n
