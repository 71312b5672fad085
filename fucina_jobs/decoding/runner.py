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
        parents: Sequence[Sequence[int] | None] | None = None,
    ) -> list[torch.Tensor]:
        """Extend each state by its tokens in one forward.

        ``logits`` is one flag for all, or one per sequence: a bool for all its
        tokens, or a flag per token. Returns float32 CPU logits, ``[rows,
        vocab]``, for each sequence whose flag is not False, in batch order:
        the rows of its flagged tokens (all of them for True). The other
        tokens are only cached (prefill of a prompt's known tokens, a token a
        processor named).

        ``parents``, per sequence, None for a chain, or a parent per token
        (-1: the cached positions; parents before children): its tokens are a
        token tree, as ``tree`` grows one, and a step also scores a
        processor's continuations (``PathsAhead.scoring``). The state's length
        counts every token; a trim drops the branches.
        """

    def trim(self, state: Any, length: int) -> None:
        """Drop cached positions at and beyond ``length``."""

    def fork(self, state: Any, length: int) -> Any:
        """A new state holding ``state``'s first ``length`` positions; later changes to either stay apart."""

    def tree(self, state: Any, length: int, tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """The logits after each node of a token tree grown on ``state``'s first ``length`` positions; ``state`` is unchanged.

        Node ``i`` holds ``tokens[i]`` and continues node ``parents[i]`` (-1: the prefix). Scores several
        continuations of one prefix (``choice``) in one forward, their shared first tokens once."""
