"""What every engine is: the ``Engine`` and ``Session`` protocols, and the prompt and completion they trade.

The job pipeline hands over prompts and constraints and gets completions back;
it never touches the sampler, the drafts or the model runner. An engine is
found by name in this package's registry (``engines/__init__.py``).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from ..decoding.batch import StreamStats
from ..decoding.sampler import SamplingParams


class EngineUnavailable(RuntimeError):
    """An engine needs an optional extra this Python lacks; the message says how to install it."""


@dataclass
class Prompt:
    id: str
    text: str  # the user message: untrusted document text included
    system: str | None = None
    constraint: Any = None  # from the engine's constraint(): fucina clones it per stream
    _: KW_ONLY
    seed: int = 0
    max_tokens: int | None = None  # None: the engine's decoding.max_tokens
    #: Worked examples as (user message, assistant answer) turns before ``text``: every row of a job
    #: writes the same ones, so they sit in the prompt prefix that the prefix cache computes once.
    examples: tuple[tuple[str, str], ...] = ()
    params: SamplingParams | None = None  # this prompt's sampling settings (voting's samples); None: the engine's


@dataclass
class Completion:
    id: str
    text: str
    tokens: list[int]
    finish_reason: str  # stop | length | error
    _: KW_ONLY
    stats: StreamStats = field(default_factory=StreamStats)
    error: str | None = None
    #: Per token: its probability as sampled, and its character span in ``text`` (``completion_text``).
    token_probs: list[float] = field(default_factory=list)
    token_spans: list[tuple[int, int]] = field(default_factory=list)


class Session(Protocol):
    """A running decoder that takes prompts at any time: a replica feeds it shard after shard, so it never drains.

    ``width`` is how many streams the last step decoded (its occupancy), or None
    where the engine cannot say."""

    width: int | None

    def add(self, prompt: Prompt, first: bool = False) -> None:
        """Queue ``prompt``; ``first`` puts it before the prompts already waiting."""

    @property
    def busy(self) -> bool: ...

    def step(self) -> list[Completion]: ...


class Engine(Protocol):
    """What the job pipeline needs from a decoder; ``constraint`` returns an opaque handle for ``Prompt.constraint``."""

    def constraint(self, *, json_schema: Any = None, lark: Any = None, regex: Any = None, whitespace_flexible: bool = False) -> Any: ...

    def session(self, on_step: Callable[[], Any] | None = None) -> Session: ...

    def generate(self, prompts: Iterable[Prompt], on_step: Callable[[], Any] | None = None) -> Iterator[Completion]: ...


def drain(session: Session, prompts: Iterable[Prompt]) -> Iterator[Completion]:
    """Every prompt's completion, in the order they finish: a session fed once and stepped until it is idle."""
    for prompt in prompts:
        session.add(prompt)
    while session.busy:
        yield from session.step()


class BatchSession:
    """A session over an engine that decodes whole batches: each step decodes every prompt added since the last."""

    width = None

    def __init__(self, generate: Callable[[list[Prompt]], Iterable[Completion]]):
        self.generate = generate
        self.pending: list[Prompt] = []

    def add(self, prompt: Prompt, first: bool = False) -> None:
        self.pending.append(prompt)  # every step decodes all that is pending: ``first`` changes nothing

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def step(self) -> list[Completion]:
        batch, self.pending = self.pending, []
        return list(self.generate(batch))
