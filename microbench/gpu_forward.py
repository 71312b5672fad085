"""Where a GPU decode step's time goes: the runner's forward against the host work around it.

On a CUDA machine, with the random-weight model of ``checks/gpu.py``: the cost
of one kernel launch and of small host-device copies, transformers' own
one-token forward (its launches alone), the runner's decode forward for 1, 8,
32 and 128 streams (one new token each over 100 cached) beside the time of its
plan, then a profiler table of 8-stream forwards sorted by host time.

    PYTHONPATH=. python microbench/gpu_forward.py --tokenizer DIR [--shape realistic]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from checks.gpu import SHAPES, random_model
from fucina_jobs.models.hf_runner import HFRunner
from fucina_jobs.models.loading import load_tokenizer


def per_call_ms(call, repeats: int = 20) -> float:
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default="default", help="a directory with the SmolLM2 tokenizer files")
    ap.add_argument("--shape", choices=[s for s in SHAPES if s != "dry-run"], default="realistic")
    args = ap.parse_args()
    device = torch.device("cuda")
    one = torch.ones(1, device=device)
    print(f"kernel launch: {1e3 * per_call_ms(lambda: one.add_(1), 2000):.1f} us")
    print(f"small host-to-device copy: {1e3 * per_call_ms(lambda: torch.arange(10).to(device), 200):.1f} us")
    model = random_model(args.shape, len(load_tokenizer(args.tokenizer))).to(device, torch.bfloat16)
    ids = torch.randint(0, 1000, (1, 1), device=device)
    with torch.no_grad():
        print(f"transformers' own forward, 1 token: {per_call_ms(lambda: model(input_ids=ids)):.1f} ms")
    runner = HFRunner(model, device, batched_attention=True)
    states = [runner.new_state() for _ in range(128)]
    runner.forward([(s, list(range(100))) for s in states])
    for n in (1, 8, 32, 128):
        batch = [(s, [5]) for s in states[:n]]
        forward = per_call_ms(lambda batch=batch: runner.forward(batch))
        plan = per_call_ms(lambda batch=batch: runner._plan(batch, [1] * len(batch), torch.tensor([s.length for s, _ in batch])))
        print(f"runner forward, {n} streams: {forward:.1f} ms, of which its plan {plan:.2f} ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            runner.forward([(s, [5]) for s in states[:8]])
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=14, max_name_column_width=50))


if __name__ == "__main__":
    main()
