"""What the decode loop needs from a model: a batched forward and a cache trim.

Keeping this interface small keeps the decoder independent of transformers:
the loop only ever says "extend each of these sequences by these tokens and
give me their logits" and "forget everything past this length".
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch


class ModelRunner(Protocol):
    #: Width of a logits row (the model vocab, which may exceed the tokenizer's).
    vocab_size: int

    def new_state(self) -> Any:
        """An empty per-sequence cache."""

    def spare(self) -> int:
        """How many more states ``new_state`` and ``fork`` hand out from the memory they hold now, before they must grow it."""

    def forward(
        self,
        batch: Sequence[tuple[Any, Sequence[int]]],
        *,
        logits: bool | Sequence[bool | Sequence[bool]] = True,
    ) -> list[torch.Tensor]:
        """Extend each state by its tokens in one forward.

        ``logits`` is one flag for all, or one per sequence: a bool for all its
        tokens, or a flag per token. Returns float32 CPU logits, ``[rows,
        vocab]``, for each sequence whose flag is not False, in batch order:
        the rows of its flagged tokens (all of them for True). The other
        tokens are only cached (prefill of a prompt's known tokens, a token a
        processor named).
        """

    def trim(self, state: Any, length: int) -> None:
        """Drop cached positions at and beyond ``length``."""

    def fork(self, state: Any, length: int) -> Any | None:
        """A new state holding ``state``'s first ``length`` positions; later changes to either stay apart. None
        where the runner no longer holds what one needs (a sliding layer's ring has moved past it)."""
