"""CUDA check and throughput table for the batch decoder, on a random-weight model.

No network: the model is random (Llama shape, about 0.5B parameters by
default) over the real SmolLM2 tokenizer files, so nothing large travels.
Every run takes the GPU's path: one attention call per layer for the whole
batch. First the device's batch decoder, eager and compiled, must reproduce a
float64 CPU reference for a few greedy steps; then it prints tok/s for several
stream counts with speculation off and on, eager and compiled, and the
compile time. ``--dry-run`` shrinks everything to run on a CPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fucina_jobs.decoding.batch import BatchDecoder, Request, SpecConfig
from fucina_jobs.engine import encode_chat, stop_tokens
from fucina_jobs.models.hf_runner import HFRunner
from fucina_jobs.models.loading import load_tokenizer

log = logging.getLogger("gpu_check")
SHAPES = {
    "realistic": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=12, num_key_value_heads=4),
    "dry-run": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}


def random_model(shape: str, vocab: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True, **SHAPES[shape])
    return LlamaForCausalLM(config).eval()


def requests(tokenizer, n: int, max_tokens: int) -> list[Request]:
    text = "Invoice INV-{i} from Acme Tools to Nordlicht Bakery, total EUR {i}00.00. " * 4
    return [Request(str(i), encode_chat(tokenizer, text.format(i=i)), seed=i, max_tokens=max_tokens) for i in range(n)]


def decode(model, device, tokenizer, streams: int, spec: SpecConfig | None, n: int, max_tokens: int, compile: bool = False):
    runner = HFRunner(model, device, batched_attention=True, compile=compile)
    decoder = BatchDecoder(runner, stop_tokens(tokenizer), spec=spec, streams=streams)
    start = time.perf_counter()
    outs = sorted(decoder.run(requests(tokenizer, n, max_tokens)), key=lambda g: int(g.id))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return outs, time.perf_counter() - start


def check_against_reference(model, device, tokenizer, steps: int) -> bool:
    """Greedy tokens on the device, eager and compiled, equal a float64 CPU reference, per stream."""
    reference, _ = decode(model.double(), torch.device("cpu"), tokenizer, 1, None, 4, steps)
    model.float().to(device)
    same = []
    for compile in (False, True):
        outs, wall = decode(model, device, tokenizer, 4, SpecConfig(), 4, steps, compile)
        same += [a.tokens == b.tokens for a, b in zip(reference, outs)]
        log.info("first %s run: %.1f s%s", "compiled" if compile else "eager", wall, " (the compile included)" if compile else "")
    model.cpu()
    log.info("reference check: %d of %d streams identical over %d steps (eager and compiled)", sum(same), len(same), steps)
    return all(same)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="tiny model on CPU: checks the script, not the GPU")
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
    model = random_model("dry-run" if args.dry_run else "realistic", len(tokenizer))
    log.info("model: %.0fM parameters", sum(p.numel() for p in model.parameters()) / 1e6)
    ok = check_against_reference(model, device, tokenizer, args.check_steps)
    model.to(device)
    if device.type == "cuda":
        model.to(torch.bfloat16)
    start = time.perf_counter()
    decode(model, device, tokenizer, 2, SpecConfig(), 2, 4, compile=True)  # a compile for the table's dtype, timed apart
    log.info("compile for the table's dtype and first run: %.1f s", time.perf_counter() - start)
    print(f"{'streams':>8} {'spec':>5} {'forward':>9} {'tok/s':>9} {'tok/fwd':>8}")
    for streams in (int(s) for s in args.streams.split(",")):
        for spec in (None, SpecConfig()):
            for compile in (False, True):
                outs, wall = decode(model, device, tokenizer, streams, spec, streams, args.max_tokens, compile)
                tokens = sum(len(o.tokens) for o in outs)
                forwards = max(sum(o.stats.forwards for o in outs), 1)
                forward = "compiled" if compile else "eager"
                print(f"{streams:>8} {'on' if spec else 'off':>5} {forward:>9} {tokens / wall:>9.1f} {tokens / forwards:>8.2f}")
    print("reference check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
