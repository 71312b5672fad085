"""Time a step's greedy choices: each logits row's first maximum and its log-probability (``row_stats``).

Arms, side by side on rows as wide as the default model's vocab, for a few
batch sizes (a step of 8 streams verifies about 64 rows, one of 128 streams
a few hundred): the C++ pass (``greedy.cpp``, the path where the kernels
build) and torch's ``log_softmax`` with numpy's argmax (the path without
them). Rows are fresh each call, as a forward's logits are. Medians of
``--calls``, with torch on ``--threads``.

    python microbench/row_stats.py [--rows 64,256] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from unittest import mock

import torch

from fucina_jobs.decoding import sampler
from fucina_jobs.decoding.sampler import row_stats

VOCAB = 49152  # SmolLM2's


def median_ms(rows: int, calls: int, kernel: bool) -> float:
    times = []
    with mock.patch.object(sampler, "_row_stats_kernel", sampler._row_stats_kernel if kernel else lambda: None):
        for _ in range(calls):
            logits = torch.randn(rows, VOCAB)
            start = time.perf_counter()
            row_stats(list(logits))
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="64,256", help="comma-separated rows per call")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if sampler._row_stats_kernel() is None:
        raise SystemExit("the C++ kernels did not build here (fucina_jobs/native logs why): nothing to compare")
    table = []
    print(f"{'rows':>6} {'C++ pass ms':>12} {'log_softmax + argmax ms':>24} {'ratio':>6}")
    for rows in (int(r) for r in args.rows.split(",")):
        fast, slow = median_ms(rows, args.calls, True), median_ms(rows, args.calls, False)
        table.append({"rows": rows, "kernel_ms": fast, "torch_ms": slow})
        print(f"{rows:>6} {fast:>12.2f} {slow:>24.2f} {slow / fast:>6.1f}")
    print(json.dumps(table))


if __name__ == "__main__":
    main()
