"""GFLOPS of one linear layer on this CPU, by rows, float32 and bfloat16, one thread by default.

The decode step and prefill targets are arithmetic: a SmolLM2-135M row costs
269 MFLOP of linears (212 without the LM head). This prints the rate that
arithmetic runs at, for the 576 -> 3072 gate/up shape, on oneDNN's linear
over a plain weight, over the weight packed once (what the runner uses in
float32 and bfloat16), and on ``F.linear``.

    python microbench/linear_gflops.py [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def _seconds(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    onednn = torch.ops.mkldnn._linear_pointwise
    print(f"GFLOPS, {args.threads} thread(s), [rows, 576] x [576, 3072]")
    arms = ("oneDNN", "packed", "F.linear")
    print(f"{'rows':>5}" + "".join(f"  {arm + ' ' + dtype:>13}" for dtype in ("f32", "bf16") for arm in arms))
    for rows in (1, 8, 33, 128, 650):
        flops = 2 * rows * 576 * 3072
        rates = []
        for dtype in (torch.float32, torch.bfloat16):
            x, w = torch.randn(rows, 576, dtype=dtype), torch.randn(3072, 576, dtype=dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, 32)
            for run in (lambda: onednn(x, w, None, "none", [], ""), lambda: onednn(x, packed, None, "none", [], ""), lambda: F.linear(x, w)):
                rates.append(flops / _seconds(run) / 1e9)
        print(f"{rows:>5}" + "".join(f"  {rate:>13.0f}" for rate in rates))


if __name__ == "__main__":
    main()
