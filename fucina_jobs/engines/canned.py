"""An engine that decodes nothing: every prompt gets the same canned output at once.

It exists to measure and test the pipeline alone (reading, sharding, Ray,
validation, writing) at a scale no model could decode on a laptop. It is
never a default; ``engine=canned`` picks it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from .base import BatchSession, Completion, Prompt


class CannedEngine:
    def __init__(self, output: str):
        self.output = output

    @classmethod
    def from_job(cls, cfg: Any, model_path: str) -> "CannedEngine":
        return cls(cfg.engine.output)

    def constraint(self, **kw: Any) -> None:
        """No decoder, so nothing to compile; the driver has already checked the constraint on the tokenizer."""
        return None

    def session(self, on_step: Callable[[], Any] | None = None) -> BatchSession:
        return BatchSession(self.generate)

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]:
        for p in prompts:
            yield Completion(p.id, self.output, [], "stop")
