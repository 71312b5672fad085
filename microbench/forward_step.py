"""Time one decode step of 8 streams on the default model, arm against arm.

Eight sequences of 610-700 cached tokens extend by 1-9 tokens each (a
speculative step's ragged batch, 33 rows). Arms alternate every round: the
CPU decode kernel (the CPU default, float32), SDPA per sequence, batched
attention on the grid (one call per layer, the CUDA default), and with
``--compile`` the default forward through ``torch.compile`` (its first call,
the compile, reported apart).
Medians of wall time and of process CPU time, and each arm's largest logit
difference from the first arm. Each arm's prefill of the eight prompts (one
forward each, 5,346 tokens, no prefix shared) gives its prefill tok/s.

``--widths`` prints instead what a step of the CPU default costs by its rows:
one stream or eight, 1 to 16 new tokens each. The difference between widths
is the price of a row; what is left at one row a stream is the step's fixed
cost (the weights streamed from memory, one attention call per sequence and
layer, the eager model's small operators).

    python microbench/forward_step.py [--compile] [--rounds 15] [--threads 2] [--dtype bfloat16]
    python microbench/forward_step.py --widths
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
    ap.add_argument("--widths", action="store_true", help="step time by rows, for the CPU default")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model("default", "cpu", args.dtype).model
    if args.widths:
        return widths(HFRunner(model), args.rounds)
    arms = {"kernel": HFRunner(model), "per sequence": HFRunner(model, batched_attention=False), "batched": HFRunner(model, batched_attention=True)}
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
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(step(name)[:2])
    print(f"8 streams, {sum(COUNTS)} rows, {args.dtype}, {args.threads} threads, median of {args.rounds} rounds")
    for name in arms:
        diff = max((a - b).abs().max().item() for a, b in zip(first[name][2], reference))
        wall = statistics.median(t[0] for t in times[name])
        cpu = statistics.median(t[1] for t in times[name])
        print(
            f"{name:>12}: wall {1e3 * wall:7.1f} ms  cpu {1e3 * cpu:7.1f} ms  first call {first[name][0]:6.1f} s  max |logit diff| {diff:.1e}  prefill {prefill[name]:5.0f} tok/s"
        )


def widths(runner: HFRunner, rounds: int) -> None:
    """Median wall time of a step by its rows, shapes interleaved round by round."""
    generator = torch.Generator().manual_seed(0)
    states = [runner.new_state() for _ in LENGTHS]
    for state, n in zip(states, LENGTHS):
        runner.forward([(state, torch.randint(20, 40000, (n,), generator=generator).tolist())], logits=False)
    shapes = [(1, 1), (1, 4), (1, 9), (8, 1), (8, 4), (8, 8), (8, 16)]  # (streams, new tokens each)
    times: dict[tuple[int, int], list[float]] = {shape: [] for shape in shapes}
    for r in range(rounds + 2):  # two rounds of warm-up
        for streams, n in shapes:
            wall = time.perf_counter()
            runner.forward([(state, [7] * n) for state in states[:streams]])
            if r >= 2:
                times[(streams, n)].append(time.perf_counter() - wall)
            for state in states[:streams]:
                runner.trim(state, state.length - n)
    print(f"step wall time by rows, the CPU default, {torch.get_num_threads()} threads, median of {rounds} rounds")
    print("streams  rows  step ms  ms per row")
    for streams, n in shapes:
        ms = 1e3 * statistics.median(times[(streams, n)])
        print(f"{streams:7d}  {streams * n:4d}  {ms:7.1f}  {ms / (streams * n):9.2f}")


if __name__ == "__main__":
    main()
