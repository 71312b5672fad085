#!/usr/bin/env bash
# One GPU check, nothing from the network: CUDA correctness (batched attention,
# eager and compiled) against a float64 CPU reference, then tok/s for
# streams = 1, 8, 32, 128, speculation off and on, eager and compiled.
# Needs torch, transformers, llguidance and the SmolLM2 tokenizer files
# (--tokenizer DIR, or the default model's cache). Pass --dry-run to run on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" checks/gpu.py "$@"
