"""Time the ways to apply llguidance's packed token bitmask to one logits row.

Arms, side by side on the default model's vocab and the invoice schema's
first mask (almost every token banned) and an all-allowed mask (inside a
string): the unpack to a bool tensor plus ``masked_fill_`` that
``Constraint`` used first, numpy's unpack (``apply_bitmask`` on a batch of
one row, and on one row where no compiler built the kernels), the C++ pass
(``apply_bitmask`` on the sampler's row, its path now), and with
``--llguidance-torch`` llguidance's compiled ``apply_token_bitmask_inplace``
(its first call, which compiles, is reported apart). Medians of ``--calls``.

    python microbench/mask_apply.py [--llguidance-torch]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import llguidance
import numpy as np
import torch

from fucina_jobs.decoding.constraint import Constraint, apply_bitmask
from fucina_jobs.models.loading import load_tokenizer
from fucina_jobs.config import SHIPPED


def unpack_then_fill(logits: torch.Tensor, bitmask: np.ndarray) -> None:
    allowed = torch.from_numpy(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: logits.shape[0]].astype(bool))
    logits.masked_fill_(~allowed, float("-inf"))


def numpy_unpack(logits: torch.Tensor, bitmask: np.ndarray) -> None:
    apply_bitmask(logits[None], bitmask[None])  # a batch row: the kernel takes single rows only


def median_us(apply, bitmask, vocab: int, calls: int) -> float:
    row = torch.randn(vocab)
    times = []
    for _ in range(calls):
        logits = row.clone()
        start = time.perf_counter()
        apply(logits, bitmask)
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--llguidance-torch", action="store_true", help="also time llguidance.torch (compiles at its first call)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    constraint = Constraint.json_schema(json.loads((SHIPPED / "schemas" / "invoice.json").read_text()), tokenizer)
    vocab = constraint.vocab_size
    first = np.zeros((vocab + 31) // 32, dtype=np.int32)
    llguidance.LLMatcher(constraint.bridge, constraint.grammar).unsafe_compute_mask_ptr(first.ctypes.data, first.nbytes)
    masks = {"schema start": first, "all allowed": np.full_like(first, -1)}
    arms = {"unpack + masked_fill_ (first)": unpack_then_fill, "numpy unpack": numpy_unpack, "C++ pass (now)": apply_bitmask}
    if args.llguidance_torch:
        import llguidance.torch as llt

        def compiled(logits, bitmask):
            llt.apply_token_bitmask_inplace(logits, torch.from_numpy(bitmask))

        start = time.perf_counter()
        compiled(torch.randn(vocab), masks["schema start"])
        print(f"llguidance.torch first call (compile): {time.perf_counter() - start:.1f} s")
        arms["llguidance.torch (compiled)"] = compiled
    for name, bitmask in masks.items():
        reference = torch.randn(vocab)
        expected = reference.clone()
        unpack_then_fill(expected, bitmask)
        for apply in arms.values():
            got = reference.clone()
            apply(got, bitmask)
            assert torch.equal(got, expected)
        print(f"{name}: " + ", ".join(f"{arm} {median_us(apply, bitmask, vocab, args.calls):.1f} us" for arm, apply in arms.items()))


if __name__ == "__main__":
    main()
