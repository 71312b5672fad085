"""Time one decode step of 8 streams on the default model, arm against arm.

Eight sequences of 610-700 cached tokens extend by 1-9 tokens each (a
speculative step's ragged batch, 33 rows). Arms alternate every round:
attention per sequence (the CPU default), batched attention (one call per
layer, the CUDA default), and with ``--compile`` the per-sequence forward
through ``torch.compile`` (its first call, the compile, reported apart).
Medians of wall time and of process CPU time, and each arm's largest logit
difference from the first arm. Each arm's prefill of the eight prompts (one
forward each, 5,346 tokens, no prefix shared) gives its prefill tok/s.

    python bench/forward_step.py [--compile] [--rounds 15] [--threads 2] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fucina_jobs.models.hf_runner import HFRunner
from fucina_jobs.models.loading import load_model

LENGTHS = [640, 700, 655, 690, 672, 610, 699, 680]
COUNTS = [5, 1, 9, 4, 6, 2, 3, 3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model("default", "cpu", args.dtype).model
    arms = {"per sequence": HFRunner(model), "batched": HFRunner(model, batched_attention=True)}
    if args.compile:
        arms["compiled"] = HFRunner(model, compile=True)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(20, 40000, (n,), generator=generator).tolist() for n in LENGTHS]
    states, prefill = {}, {}
    for name, runner in arms.items():
        states[name] = [runner.new_state() for _ in prompts]
        runner.forward([(runner.new_state(), prompts[0][:64])], logits=False)  # oneDNN builds its kernels
        wall = time.perf_counter()
        for state, prompt in zip(states[name], prompts):
            runner.forward([(state, prompt)], logits=False)
        prefill[name] = sum(LENGTHS) / (time.perf_counter() - wall)

    def step(name: str) -> tuple[float, float, list[torch.Tensor]]:
        runner = arms[name]
        wall, cpu = time.perf_counter(), time.process_time()
        rows = runner.forward([(state, [7] * n) for state, n in zip(states[name], COUNTS)])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for state, n in zip(states[name], COUNTS):
            runner.trim(state, state.length - n)
        return wall, cpu, rows

    first = {name: step(name) for name in arms}  # the compiled arm compiles here
    reference = first["per sequence"][2]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    names = list(arms)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name].append(step(name)[:2])
    print(f"8 streams, {sum(COUNTS)} rows, {args.dtype}, {args.threads} threads, median of {args.rounds} rounds")
    for name in arms:
        diff = max((a - b).abs().max().item() for a, b in zip(first[name][2], reference))
        wall = statistics.median(t[0] for t in times[name])
        cpu = statistics.median(t[1] for t in times[name])
        print(f"{name:>12}: wall {1e3 * wall:7.1f} ms  cpu {1e3 * cpu:7.1f} ms  first call {first[name][0]:6.1f} s  max |logit diff| {diff:.1e}  prefill {prefill[name]:5.0f} tok/s")


if __name__ == "__main__":
    main()
