"""``bench decode``'s forward profile: one decode step's milliseconds at a given context, and where they go.

A step at 500 tokens of context and one at 2,000 show what grows with the
context (attention) against what does not (the output layer, the rest of the
layers). The attention's share is read off a profiled step (the runner labels
its calls, ``hf_runner.ATTENTION_LABEL``) and applied to the unprofiled
median, since a profiler slows what it watches; the output layer is timed on
its own, one row, as a step computes it.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any, Sequence

import torch

from ..models.hf_runner import ATTENTION_LABEL
from .arms import alternate

#: Contexts a step is timed at: a typical invoice prompt, and a long document's chunk.
CONTEXTS = (500, 2000)
#: Timed steps per context; the median is kept.
STEPS = 7
#: The context a slot's key-value bytes are given at: a long document's chunk, where sliding layers' rings pay.
KV_CONTEXT = 8192


#: The output layer's arm among the contexts' steps.
_OUTPUT = "output layer"


def forward_profile(runner: Any, contexts: Sequence[int] = CONTEXTS, steps: int = STEPS) -> dict[str, Any]:
    """Per context: the median ms of a one-token step, and its split into attention, output layer and the rest.

    The contexts' steps alternate (``arms.alternate``), so a slow spell of a shared machine falls on all alike."""
    g = torch.Generator().manual_seed(0)
    step = {}
    for context in contexts:
        ids = torch.randint(100, runner.vocab_size, (context,), generator=g).tolist()
        state = runner.new_state()
        runner.forward([(state, ids[:-1])], logits=False)
        step[context] = functools.partial(_step, runner, state, ids[-1], context - 1)
        step[context]()  # warm
    step[_OUTPUT] = functools.partial(_output_layer, runner)  # timed among the steps, so a slow spell falls on it too
    times: dict[Any, list[float]] = {arm: [] for arm in step}
    for _, arm in alternate(list(step), steps):
        times[arm].append(_timed(step[arm]))
    output_ms = 1000 * statistics.median(times.pop(_OUTPUT))
    rows = []
    for context in contexts:
        ms = 1000 * statistics.median(times[context])
        attention_ms = _attention_share(step[context]) * ms
        rows.append(
            {
                "context": context,
                "ms_per_forward": ms,
                "attention_ms": attention_ms,
                "output_layer_ms": output_ms,
                "rest_ms": max(0.0, ms - attention_ms - output_ms),
            }
        )
    store = runner.store
    kv = {"context": KV_CONTEXT, "mib": store.slot_bytes(KV_CONTEXT) / 2**20, "mib_without_rings": store.slot_bytes(KV_CONTEXT, rings=False) / 2**20}
    return {"attention_path": runner.attention, "rows": rows, "kv_a_slot": kv}


def _step(runner: Any, state: Any, token: int, cached: int) -> None:
    """One decode step after ``cached`` positions, then back to them: every timed step sees the same context."""
    runner.forward([(state, [token])])
    runner.trim(state, cached)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _attention_share(step) -> float:
    """The labelled attention's share of a profiled step's wall time (CPU events; on CUDA, its launches)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        step()
        wall_us = 1e6 * (time.perf_counter() - start)
    attention_us = sum(e.cpu_time_total for e in prof.key_averages() if e.key == ATTENTION_LABEL)
    return min(1.0, attention_us / wall_us) if wall_us else 0.0


@torch.no_grad()
def _output_layer(runner: Any) -> None:
    head = runner.model.get_output_embeddings()
    head(torch.zeros(1, 1, head.in_features, dtype=runner.model.dtype, device=runner.device))


def format_profile(profile: dict[str, Any]) -> list[str]:
    from .tables import format_table

    kv = profile["kv_a_slot"]
    return [
        f"one decode step (1 token) by context; attention path: {profile['attention_path']}",
        f"keys and values a slot holds at {kv['context']:,} tokens: {kv['mib']:.0f} MiB ({kv['mib_without_rings']:.0f} were every layer to keep every position)",
        format_table(
            ["context", "ms/forward", "attention ms", "output layer ms", "rest ms"],
            [
                [r["context"], f"{r['ms_per_forward']:.1f}", f"{r['attention_ms']:.1f}", f"{r['output_layer_ms']:.1f}", f"{r['rest_ms']:.1f}"]
                for r in profile["rows"]
            ],
        ),
    ]
