"""CUDA check and throughput table for the batch decoder, on a random-weight model.

No network: the model is random (Llama shape) over the real SmolLM2 tokenizer
files, so nothing large travels. ``--shape realistic`` (the default) is about
0.5B parameters; ``--shape smollm2`` is the default model's own shape. Every
run takes the GPU's path: one attention call per layer for the whole batch.

First the device's batch decoder, eager and compiled, must reproduce a float64
CPU reference for a few greedy steps. Then it prints, per stream count, tok/s
the time per decoder step and where it goes, for three arms, eager and compiled:

- ``plain``: no speculation, no grammar;
- ``ngram``: speculation on, no grammar;
- ``json``: speculation on under a JSON schema, the product's path (grammar
  masks, forced drafts).

``fwd%`` is the share of the wall time spent in the model's forwards, ``proc%``
the constraint processor's; the rest is the decoder's own work on the host.

An arm that fails prints its error in its row and the run goes on; the exit
status is 1 if the reference check or any arm failed. ``--dry-run`` shrinks
everything to run on a CPU.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fucina_jobs.decoding.batch import BatchDecoder, Request, SpecConfig
from fucina_jobs.engines import compile_constraint, encode_chat, sampling_params, speculation, stop_tokens
from fucina_jobs.models.hf_runner import HFRunner
from fucina_jobs.models.loading import load_tokenizer
from fucina_jobs.config import DecodingConfig

log = logging.getLogger("checks.gpu")
SHAPES = {
    "realistic": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=12, num_key_value_heads=4),
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3),
    "dry-run": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}
#: An invoice-like schema with bounded strings, so a random model's records end.
SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "maxLength": 12},
        "vendor": {"type": "string", "maxLength": 24},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "total": {"type": "number"},
    },
    "required": ["invoice_number", "vendor", "currency", "total"],
    "additionalProperties": False,
}
GREEDY, SPEC = sampling_params(DecodingConfig()), speculation(DecodingConfig().speculative)  # a job's defaults
ARMS = {"plain": (None, False), "ngram": (SPEC, False), "json": (SPEC, True)}  # name: (speculation, grammar)


def random_model(shape: str, vocab: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True, **SHAPES[shape])
    return LlamaForCausalLM(config).eval()


def requests(tokenizer, n: int, max_tokens: int, constraint=None) -> list[Request]:
    text = "Invoice INV-{i} from Acme Tools to Nordlicht Bakery, total EUR {i}00.00. " * 4
    return [
        Request(str(i), encode_chat(tokenizer, text.format(i=i)), constraint.clone() if constraint else None, seed=i, max_tokens=max_tokens)
        for i in range(n)
    ]


def decode(model, device, tokenizer, streams: int, spec: SpecConfig | None, n: int, max_tokens: int, compile: bool = False, constraint=None):
    """Decode ``n`` requests; returns the generations, the wall time and the time spent in the runner's forwards.

    A forward ends by copying its logits to the host, so its wall time covers the device's work.
    """
    runner = HFRunner(model, device, batched_attention=True, compile=compile)
    forward, in_forward = runner.forward, [0.0]

    def timed_forward(*args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            in_forward[0] += time.perf_counter() - start

    runner.forward = timed_forward
    decoder = BatchDecoder(runner, stop_tokens(tokenizer), GREEDY, spec=spec, streams=streams)
    start = time.perf_counter()
    outs = sorted(decoder.run(requests(tokenizer, n, max_tokens, constraint)), key=lambda g: int(g.id))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return outs, time.perf_counter() - start, in_forward[0]


def check_against_reference(model, device, tokenizer, steps: int) -> bool:
    """Greedy tokens on the device, eager and compiled, equal a float64 CPU reference, per stream."""
    reference, *_ = decode(model.double(), torch.device("cpu"), tokenizer, 1, None, 4, steps)
    model.float().to(device)
    same = []
    for compile in (False, True):
        outs, wall, _ = decode(model, device, tokenizer, 4, SPEC, 4, steps, compile)
        same += [a.tokens == b.tokens for a, b in zip(reference, outs)]
        log.info("first %s run: %.1f s%s", "compiled" if compile else "eager", wall, " (the compile included)" if compile else "")
    model.cpu()
    log.info("reference check: %d of %d streams identical over %d steps (eager and compiled)", sum(same), len(same), steps)
    return all(same)


def table_row(model, device, tokenizer, streams: int, arm: str, compile: bool, max_tokens: int, constraint) -> str:
    """One line of the table: tok/s, tokens per forward, ms per decoder step, and the shares of the wall time
    spent in the model's forwards and in the constraint processor (the rest is the decoder's own Python)."""
    spec, grammar = ARMS[arm]
    outs, wall, in_forward = decode(model, device, tokenizer, streams, spec, streams, max_tokens, compile, constraint if grammar else None)
    tokens = sum(len(o.tokens) for o in outs)
    steps = max(max(o.stats.forwards for o in outs), 1)
    processor = sum(sum(o.stats.process_seconds) for o in outs)
    errors = sum(o.finish_reason == "error" for o in outs)
    cells = f"{tokens / wall:>9.1f} {tokens / max(sum(o.stats.forwards for o in outs), 1):>8.2f} {1e3 * wall / steps:>8.1f} {100 * in_forward / wall:>5.0f} {100 * processor / wall:>6.1f}"
    return cells + (f"  ({errors} streams ended in error)" if errors else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="tiny model on CPU: checks the script, not the GPU")
    ap.add_argument("--shape", choices=["realistic", "smollm2"], default="realistic", help="the random model's shape")
    ap.add_argument("--streams", default="1,8,32,128", help="comma-separated stream counts")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--check-steps", type=int, default=8)
    ap.add_argument("--tokenizer", default="default", help="a directory with the SmolLM2 tokenizer files (they are 3.5 MB and travel)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    device = torch.device("cpu" if args.dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        log.error("no CUDA device: run with --dry-run on a CPU machine")
        return 2
    tokenizer = load_tokenizer(args.tokenizer)
    shape = "dry-run" if args.dry_run else args.shape
    model = random_model(shape, len(tokenizer))
    log.info(
        "model: %s shape, %.0fM parameters; %s",
        shape,
        sum(p.numel() for p in model.parameters()) / 1e6,
        torch.cuda.get_device_name() if device.type == "cuda" else "CPU",
    )
    ok = check_against_reference(model, device, tokenizer, args.check_steps)
    model.to(device)
    if device.type == "cuda":
        model.to(torch.bfloat16)
    constraint = compile_constraint(tokenizer, vocab_size=model.config.vocab_size, json_schema=SCHEMA)
    start = time.perf_counter()
    for spec, grammar in ARMS.values():  # compile for the table's dtype and each arm's shapes, timed apart from the table
        for streams in (1, 2):
            decode(model, device, tokenizer, streams, spec, streams, 4, True, constraint if grammar else None)
    log.info("compile for the table's dtype and first runs: %.1f s", time.perf_counter() - start)
    gc.collect()
    gc.freeze()  # as a replica does once its engine is built (pipeline/ray_pool.py)
    failed = 0
    print(f"{'streams':>8} {'arm':>6} {'forward':>9} {'tok/s':>9} {'tok/fwd':>8} {'ms/step':>8} {'fwd%':>5} {'proc%':>6}", flush=True)
    for streams in (int(s) for s in args.streams.split(",")):
        for arm in ARMS:
            for compile in (False, True):
                try:
                    cells = table_row(model, device, tokenizer, streams, arm, compile, args.max_tokens, constraint)
                except Exception as err:  # one broken arm must not cost the rest of a GPU lease
                    log.exception("streams=%d arm=%s compile=%s failed", streams, arm, compile)
                    failed += 1
                    cells = f"  error: {type(err).__name__}: {str(err).splitlines()[0][:80] if str(err) else ''}", False
                print(f"{streams:>8} {arm:>6} {'compiled' if compile else 'eager':>9} {cells}", flush=True)
    if failed:
        print(f"{failed} rows failed (their errors are logged above)")
    print("reference check:", "PASS" if ok else "FAIL")
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
