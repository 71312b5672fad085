"""Where a constrained token's processor time goes, per model vocabulary.

``Constraint.process`` does three things a token: llguidance fills the packed
mask, ``only_allowed`` looks for a single allowed token (the row is then not
masked at all), and otherwise ``apply_bitmask`` sets every banned logit to
-inf in place. This walks the invoice job's gold records under the invoice
schema, token by token as a decode commits them, and times each part apart,
for each model's tokenizer side by side; it also says how sparse the masks
are (allowed ids a masked row, words of the mask all banned or all allowed).
Percentiles in microseconds.

    python microbench/mask_split.py [--models default,gemma3-270m] [--records 8]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from fucina_jobs.config import SHIPPED
from fucina_jobs.decoding.constraint import Constraint, only_allowed
from fucina_jobs.models.loading import load_tokenizer


def walk(source: str, records: list[dict], schema: dict) -> dict[str, list[float]]:
    """Each part's seconds at every token of ``records`` written compactly, and each masked row's mask."""
    tokenizer = load_tokenizer(source)
    base = Constraint.json_schema(schema, tokenizer, stop_token=tokenizer.eos_token_id)
    row = torch.randn(base.vocab_size)
    parts: dict[str, list] = {"llguidance mask": [], "only_allowed": [], "apply (masked rows)": [], "masks": []}
    for record in records:
        constraint = base.clone()
        for token in tokenizer.encode(json.dumps(record, separators=(",", ":")), add_special_tokens=False) + [tokenizer.eos_token_id]:
            logits = row.clone()
            start = time.perf_counter()
            constraint._fill_bitmask()
            filled = time.perf_counter()
            forced = only_allowed(constraint._bitmask)
            checked = time.perf_counter()
            constraint._mask(logits, constraint._bitmask, forced)
            done = time.perf_counter()
            parts["llguidance mask"].append(filled - start)
            parts["only_allowed"].append(checked - filled)
            if forced is None:
                parts["apply (masked rows)"].append(done - checked)
                parts["masks"].append(constraint._bitmask.copy())
            if not constraint.allows(token):
                break
            constraint.commit(token)
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="default,gemma3-270m", help="comma-separated model sources")
    ap.add_argument("--records", type=int, default=8, help="first N gold records of jobs/invoices")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lines = (SHIPPED / "jobs" / "invoices" / "gold.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line)["label"] for line in lines[: args.records]]
    schema = json.loads((SHIPPED / "schemas" / "invoice.json").read_text(encoding="utf-8"))
    for source in args.models.split(","):
        parts = walk(source, records, schema)
        masks = np.stack(parts.pop("masks")).view(np.uint32)
        allowed = np.unpackbits(masks.view(np.uint8), axis=1).sum(axis=1)
        print(
            f"{source}: {32 * masks.shape[1]} ids, {len(parts['llguidance mask'])} tokens, {len(masks)} masked; a masked row allows "
            f"{np.median(allowed):.0f} ids (median); mask words all banned {100 * (masks == 0).mean():.0f}%, "
            f"all allowed {100 * (masks == 0xFFFFFFFF).mean():.0f}%"
        )
        for name, seconds in parts.items():
            p50, p99 = (1e6 * np.percentile(seconds, q) for q in (50, 99))
            print(f"  {name:20s} p50 {p50:7.1f}  p99 {p99:8.1f}  mean {1e6 * np.mean(seconds):7.1f}")


if __name__ == "__main__":
    main()
