"""A LoRA adapter of a job's model: its folder's format, its check against the base model, and its merge at load.

``learn adapter=true`` fine-tunes a LoRA adapter (peft) of the job's model on its gold rows and saves it here
(``save``): peft's own ``adapter_config.json`` and ``adapter_model.safetensors``, and ``evidence.json`` with what
it was trained on, how it went, and the digest of the base model's weights. An adapter applied to another model
than the one it was trained on runs without any error and writes wrong records, so a run checks that digest
(``check``) before any row decodes, and merges the adapter into the weights at load (``merge``): the merged model
is a plain transformers model again, so a token costs what it cost before and every runner decodes it unchanged.
The format lives here, beside the loading that reads it, so that a run reads it without the learner.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

#: The file beside peft's own that holds the adapter's evidence and its base model's digest.
EVIDENCE = "evidence.json"
#: The file peft writes the adapter's weights to (safetensors).
WEIGHTS = "adapter_model.safetensors"
#: The files whose bytes are the adapter: its digest, and the run's version, change with them.
ADAPTER_FILES = ("adapter_config.json", WEIGHTS)


class AdapterError(ValueError):
    """An adapter folder cannot be read, or was trained on another model than the job's."""


def weights_digest(model_path: str | Path) -> str:
    """sha256 over the weight files (``*.safetensors``, sorted) of the model folder ``model_path``: the base model's identity."""
    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise AdapterError(f"{model_path}: no *.safetensors weights to check an adapter against; give a saved transformers model folder")
    return _digest(files)


def digest(directory: str | Path) -> str:
    """sha256 of the adapter at ``directory`` (its config and weights), checked to be one first."""
    folder = _folder(directory)
    return _digest([folder / name for name in ADAPTER_FILES])


def save(peft_model: Any, directory: Path, model_path: str | Path, evidence: dict[str, Any]) -> None:
    """Save ``peft_model``'s adapter (safetensors) into ``directory`` with ``evidence`` and the digest of the base
    model at ``model_path``, which ``check`` compares at load."""
    directory.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(directory), safe_serialization=True)
    document = {"base_model": {"path": str(model_path), "digest": weights_digest(model_path)}, **evidence}
    (directory / EVIDENCE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def check(directory: str | Path, model_path: str | Path) -> Path:
    """The adapter folder ``directory``, checked to be one and to have been trained on the model at ``model_path``."""
    folder = _folder(directory)
    try:
        base = json.loads((folder / EVIDENCE).read_text(encoding="utf-8"))["base_model"]["digest"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AdapterError(
            f"model.adapter={directory}: {EVIDENCE} cannot be read ({err}); train it again with `fucina_jobs learn adapter=true`"
        ) from None
    if base != weights_digest(model_path):
        raise AdapterError(
            f"model.adapter={directory} was trained on another model than model.source ({model_path}); "
            "train it for this model with `fucina_jobs learn adapter=true`, or set model.adapter=null"
        )
    return folder


def rank(directory: str | Path) -> int:
    """The LoRA rank of the adapter at ``directory`` (what vLLM must make room for)."""
    return int(json.loads((_folder(directory) / ADAPTER_FILES[0]).read_text(encoding="utf-8"))["r"])


def merge(model: torch.nn.Module, directory: str | Path) -> torch.nn.Module:
    """``model`` with the adapter at ``directory`` merged into its weights: a plain model again, as fast as before."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(_folder(directory))).merge_and_unload()


def _folder(directory: str | Path) -> Path:
    folder = Path(directory).expanduser()
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise AdapterError(
            f"model.adapter={directory}: not an adapter folder (no {', '.join(missing)}); give the folder "
            "`fucina_jobs learn adapter=true` wrote, or set model.adapter=null"
        )
    return folder


def _digest(files: list[Path]) -> str:
    sha = hashlib.sha256()
    for file in files:
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    return sha.hexdigest()
