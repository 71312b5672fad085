"""The engines, found by name, and everything the layers above them use of the decoder.

The job pipeline and ``eval`` import this package only, never ``decoding`` or
``models``: the ``Engine`` protocol and its types, the settings and stats
types, the error ``constraint()`` raises, schema relaxation and model
resolution. ``build`` is the registry the replica asks: ``engine=NAME`` in a
job's config picks ``ENGINES[NAME]``, imported only when a job uses it (vLLM
is an optional extra).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..decoding.batch import SpecConfig, StreamStats
from ..decoding.constraint import GrammarError
from ..decoding.drafting import DRAFT_SOURCES
from ..decoding.relaxation import compile_json_schema
from ..decoding.sampler import SamplingParams
from ..models.loading import ModelNotFound, load_model, load_tokenizer, resolve_device, resolve_source
from .base import BatchSession, Completion, Engine, Prompt, Session, drain
from .fucina import FucinaEngine, GrammarCheck

__all__ = [
    "DRAFT_SOURCES", "ENGINES", "BatchSession", "Completion", "Engine", "FucinaEngine", "GrammarCheck", "GrammarError", "ModelNotFound",
    "Prompt", "SamplingParams", "Session", "SpecConfig", "StreamStats", "build", "compile_json_schema", "drain", "load_model",
    "load_tokenizer", "resolve_device", "resolve_source",
]

#: Every engine a job can name, as ``module:class`` in this package; ``pipeline/config.py`` holds each one's settings.
ENGINES = {"fucina": "fucina:FucinaEngine", "vllm": "vllm:VLLMEngine", "canned": "canned:CannedEngine"}


def build(cfg: Any, model_path: str) -> Engine:
    """The engine the job's config (a ``JobConfig``) names, built from that config over the model at ``model_path``."""
    module, name = ENGINES[cfg.engine.name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name).from_job(cfg, model_path)
