"""What the decode and streams subcommands share: arms, their clocks, the one alternation loop, summaries."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Iterator, Mapping, Sequence, TypeVar

from .inputs import Doc

log = logging.getLogger(__name__)
A = TypeVar("A")


def alternate(arms: Sequence[A], rounds: int) -> Iterator[tuple[int, A]]:
    """Every arm once per round, the order rotated each round: ``(round, arm)``.

    The machine is assumed to be shared: alternating spreads a slow spell
    over all arms alike, so their ratios stay meaningful. Every timed loop of
    every subcommand goes through here.
    """
    for r in range(rounds):
        k = r % len(arms)
        for arm in [*arms[k:], *arms[:k]]:
            yield r, arm


class ForwardClock:
    """Wraps a runner's ``forward`` to split model time into prefill and decode."""

    def __init__(self, runner: Any):
        self.reset()
        inner = runner.forward

        def forward(batch, *, logits=True):
            start = time.perf_counter()
            try:
                return inner(batch, logits=logits)
            finally:
                elapsed = time.perf_counter() - start
                if logits is True or (logits is not False and any(logits)):  # prompt chunks inside a decode step count as decode
                    self.decode_s += elapsed
                    self.decode_calls += 1
                else:
                    self.prefill_s += elapsed

        runner.forward = forward

    def reset(self) -> None:
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.decode_calls = 0


@dataclass
class Arm:
    key: str
    label: str
    speculative: Any  # a SpeculativeConfig
    constrained: bool
    _: KW_ONLY
    engine: Any = None
    clock: ForwardClock | None = None
    walls: list[float] = field(default_factory=list)  # one total per repeat
    prefill: list[float] = field(default_factory=list)
    decode: list[float] = field(default_factory=list)
    processor: list[float] = field(default_factory=list)
    completions: list[list[Any]] = field(default_factory=list)  # [repeat][doc or request]
    streams: int = 1
    steps: list[int] = field(default_factory=list)  # batched forwards per repeat


def setup_torch(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def load_model_for(args: argparse.Namespace):
    from ..models.loading import load_model

    setup_torch(args.threads)
    log.info("loading model %s (%s, %s)", args.model, args.device, args.dtype)
    return load_model(args.model, args.device, args.dtype)


def timed_engine(loaded: Any, speculative: Any, streams: int = 1):
    """Our engine with the job's default decoding but ``speculative`` (a ``SpeculativeConfig``), its forwards timed."""
    from ..engines import FucinaEngine
    from ..config import DecodingConfig, RuntimeConfig

    engine = FucinaEngine(loaded, DecodingConfig(speculative=speculative), RuntimeConfig(streams=streams))
    return engine, ForwardClock(engine.runner)


def job_prompts(docs: Sequence[Doc], system: str, constraints: Mapping[str, Any], max_tokens: int):
    """The documents' prompts, each with its constraint (``constraints`` by document id; none where it has none)."""
    from ..engines import Prompt

    return [Prompt(d.id, d.user, system, constraints.get(d.id), seed=0, max_tokens=max_tokens) for d in docs]


def acceptance(completions: Sequence[Any]) -> dict[str, dict[str, float]]:
    drafted: dict[str, int] = {}
    accepted: dict[str, int] = {}
    for c in completions:
        for src, n in c.stats.drafted.items():
            drafted[src] = drafted.get(src, 0) + n
        for src, n in c.stats.accepted.items():
            accepted[src] = accepted.get(src, 0) + n
    return {
        src: {"accepted": accepted.get(src, 0), "drafted": n, "rate": accepted.get(src, 0) / n if n else 0.0} for src, n in sorted(drafted.items())
    }


def mean_acceptance(acc: dict[str, dict[str, float]]) -> float | None:
    drafted = sum(v["drafted"] for v in acc.values())
    return sum(v["accepted"] for v in acc.values()) / drafted if drafted else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x.text.encode() == y.text.encode() and x.tokens == y.tokens for x, y in zip(a, b))


def environment(args: argparse.Namespace, loaded: Any) -> dict[str, Any]:
    import torch

    return {
        "date": args.started,
        "model": loaded.path,
        "device": str(loaded.device),
        "dtype": args.dtype,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
