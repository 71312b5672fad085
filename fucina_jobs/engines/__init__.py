"""The engines, found by name, and everything the layers above them use of the decoder.

The job pipeline, ``eval`` and the vLLM engine import this package only, never
``decoding`` or ``models``: the ``Engine`` protocol and its types, the
settings and stats types, the prompt encoding every engine shares, the
constraint and the error it raises, schema relaxation and model resolution. ``build`` is the registry the replica asks: ``engine=NAME`` in a
job's config picks the class ``config.ENGINES[NAME].implementation``
names, imported only when a job uses it (vLLM is an optional extra).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..decoding.batch import StreamStats
from ..decoding.constraint import Constraint, GrammarError, read_schema, read_source, tokenizer_bridge
from ..decoding.drafting import DRAFT_SOURCES, NGRAM
from ..decoding.relaxation import cause as compile_error_cause
from ..decoding.relaxation import compile_json_schema
from ..models import DEFAULT_MODEL
from ..models.families import UnsupportedModel
from ..models import adapters
from ..models.loading import ModelNotFound, load_model, load_tokenizer, resolve_device, resolve_source
from ..decoding.sampler import SamplingParams
from ..config import ENGINES
from .base import BatchSession, Completion, Engine, EngineUnavailable, Prompt, Session, drain
from .fucina import (
    FucinaEngine,
    GrammarCheck,
    compile_constraint,
    completion_text,
    constraint_kind,
    context_overflow,
    encode_chat,
    prompt_overflow,
    sampling_params,
    speculation,
    stop_tokens,
)

__all__ = [
    "DEFAULT_MODEL",
    "DRAFT_SOURCES",
    "NGRAM",
    "BatchSession",
    "Completion",
    "Constraint",
    "Engine",
    "EngineUnavailable",
    "FucinaEngine",
    "GrammarCheck",
    "GrammarError",
    "ModelNotFound",
    "Prompt",
    "SamplingParams",
    "Session",
    "StreamStats",
    "UnsupportedModel",
    "adapters",
    "build",
    "check_model",
    "compile_constraint",
    "compile_error_cause",
    "compile_json_schema",
    "completion_text",
    "constraint_kind",
    "context_overflow",
    "drain",
    "encode_chat",
    "prompt_overflow",
    "load_model",
    "load_tokenizer",
    "read_schema",
    "read_source",
    "require",
    "resolve_device",
    "resolve_source",
    "sampling_params",
    "speculation",
    "stop_tokens",
    "tokenizer_bridge",
]


def build(cfg: Any, model_path: str) -> Engine:
    """The engine the job's config (a ``JobConfig``) names, built from that config over the model at ``model_path``."""
    return _engine_class(cfg.engine.name).from_job(cfg, model_path)


def require(name: str) -> None:
    """Raise ``EngineUnavailable``, saying how to install it, where the engine ``name`` needs an extra this Python lacks."""
    engine = _engine_class(name)
    if hasattr(engine, "require"):
        engine.require()


def check_model(name: str, model_path: str, source: str) -> None:
    """Raise ``UnsupportedModel``, in one line, where the engine ``name`` would not decode the model at ``model_path``
    (``model.source`` ``source``) as transformers does; read from its config alone, before any weight loads."""
    engine = _engine_class(name)
    if hasattr(engine, "check_model"):
        engine.check_model(model_path, source)


def _engine_class(name: str) -> type:
    module, cls = ENGINES[name].implementation.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
