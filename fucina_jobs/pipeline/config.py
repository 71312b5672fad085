"""The job configuration surface, validated before any model loads.

These pydantic models are the one place every setting and its default is
spelled. Hydra composes ``conf/NAME.yaml`` over them (``register_defaults``
hands Hydra the defaults as the ``settings`` config and the ``engine`` group) with
the command-line overrides; the models then check every key (unknown keys are
errors) and every range, and turn a failure into one message per bad key that
names the key, the value given and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..engine import SpecConfig


class ConfigError(ValueError):
    """The job configuration is invalid; the message says which key and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Section):
    source: str = Field("default", description="'default' (embedded SmolLM2-135M-Instruct), a local directory or a hub id")
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = "float32"
    device: Literal["auto", "cpu", "cuda"] = "auto"


class FucinaEngineConfig(_Section):
    name: Literal["fucina"] = "fucina"
    compile: bool = Field(False, description="torch.compile the model forward: a one-off compile at start, cached across runs")


class VLLMEngineConfig(_Section):
    name: Literal["vllm"]
    max_model_len: int = Field(4096, ge=256, description="longest prompt plus output vLLM plans for")
    kv_cache_gib: float = Field(2.0, gt=0, description="CPU KV cache per replica (VLLM_CPU_KVCACHE_SPACE); unused on GPU")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    enforce_eager: bool = Field(True, description="false compiles the model: minutes at every start")


class NullEngineConfig(_Section):
    name: Literal["null"]
    output: str = Field("{}", description="the canned completion every row gets: the pipeline alone, for benchmarks and tests")


EngineConfig = Annotated[FucinaEngineConfig | VLLMEngineConfig | NullEngineConfig, Field(discriminator="name")]


class ConstraintConfig(_Section):
    json_schema: str | None = None
    lark: str | None = None
    regex: str | None = None
    pydantic_model: str | None = Field(None, description="'module:Class' that records must also validate against")
    whitespace_flexible: bool = False
    relax: Literal["auto", "off"] = Field("auto", description="auto: a JSON schema llguidance refuses is widened until it compiles; "
                                          "outputs are still validated against the original schema")

    @model_validator(mode="after")
    def _at_most_one(self) -> "ConstraintConfig":
        given = [k for k in ("json_schema", "lark", "regex") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give one of constraint.json_schema, constraint.lark or constraint.regex, not {' and '.join(given)}")
        return self

    @property
    def kind(self) -> str | None:
        return next((k for k in ("json_schema", "lark", "regex") if getattr(self, k)), None)


class ChunkingConfig(_Section):
    """Documents longer than the model's context, cut into overlapping chunks that decode side by side (docs/LONG_DOCUMENTS.md)."""

    enabled: bool = Field(False, description="cut a row's text_field into chunks when its prompt would not fit; off: such a row is a reject")
    max_tokens: int | None = Field(None, ge=32, description="text tokens per chunk; null: what the context leaves after the prompt and decoding.max_tokens")
    overlap_tokens: int = Field(256, ge=0, description="text tokens two consecutive chunks share, so a value cut at one edge is whole in the other")

    @model_validator(mode="after")
    def _overlap_leaves_progress(self) -> "ChunkingConfig":
        if self.max_tokens is not None and 2 * self.overlap_tokens > self.max_tokens:
            raise ValueError(f"overlap_tokens={self.overlap_tokens} is more than half of max_tokens={self.max_tokens}; "
                             "each chunk must move on by at least half its length")
        return self


class DatasetConfig(_Section):
    path: str
    format: Literal["jsonl", "parquet", "csv", "text_dir", "maskbench"] = "jsonl"
    id_field: str = "id"
    text_field: str = "text"
    schema_field: str | None = None
    limit: int | None = Field(None, ge=1)
    chunking: ChunkingConfig = ChunkingConfig()

    @model_validator(mode="before")
    @classmethod
    def _maskbench_rows_carry_their_schema(cls, data: Any) -> Any:
        # A MaskBench file is one schema: each row is constrained by its own file's schema.
        if isinstance(data, dict) and data.get("format") == "maskbench" and data.get("schema_field") is None:
            data = {**data, "schema_field": "schema"}
        return data


class PromptConfig(_Section):
    system: str = Field("", description="system message, or @path to a file holding it")
    template: str = Field("{text}", description="user message; {field} takes the row's field; @path reads a file")


class SpeculativeConfig(_Section):
    """Speculation settings; their defaults are the decoder's own (``SpecConfig``), so a job and the Python API agree."""

    enabled: bool = True
    max_draft: int = Field(SpecConfig.max_draft, ge=1, le=64, description="draft tokens per stream and step (vLLM: speculative tokens)")
    grammar_drafting: bool = Field(SpecConfig.grammar_drafting, description="draft the grammar's forced tokens (no vLLM counterpart)")
    max_ngram: int = Field(SpecConfig.max_ngram, ge=1, le=16, description="longest prompt-lookup n-gram")
    min_ngram: int = Field(SpecConfig.min_ngram, ge=1, le=16, description="shortest prompt-lookup n-gram")

    @model_validator(mode="after")
    def _ngram_window(self) -> "SpeculativeConfig":
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram={self.min_ngram} is larger than max_ngram={self.max_ngram}; the lookup window needs min_ngram <= max_ngram")
        return self


class DecodingConfig(_Section):
    max_tokens: int = Field(256, ge=1, le=32768)
    temperature: float = Field(0.0, ge=0.0)
    top_k: int = Field(0, ge=0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    min_p: float = Field(0.0, ge=0.0, lt=1.0)
    repeat_penalty: float = Field(1.0, gt=0.0)
    seed: int = 0
    speculative: SpeculativeConfig = SpeculativeConfig()


class RuntimeConfig(_Section):
    replicas: int = Field(1, ge=1)
    streams: int = Field(4, ge=1, le=256)
    ray_address: str | None = Field(None, description="null starts a local Ray; 'auto' or host:port joins a cluster")
    shard_size: int = Field(1000, ge=1, description="rows per shard: one records, rejects and stats file each, and the unit of retry and resume")
    shards_in_flight: int = Field(2, ge=1, description="shards each replica holds at once: 2 or more keep its decoder busy across shard boundaries; 1 drains it at each shard's end")
    max_retries: int = Field(2, ge=0, description="times a failed shard is retried before its rows become rejects")
    replica_timeout_s: float = Field(600.0, gt=0, description="seconds to wait for replicas to start")


class OutputConfig(_Section):
    dir: str
    fresh: bool = Field(False, description="decode every row again: delete this config's version in output.dir (other versions stay)")


class EvalConfig(_Section):
    run_dir: str | None = Field(None, description="score this existing run; null runs the job first, into output.dir")
    mode: Literal["generate", "grammar"] = Field("generate", description="grammar: MaskBench mask verdicts, no model")
    gold: str | None = Field(None, description="gold JSONL, {'id': ..., 'label': {...}} per line")
    numeric_tolerance: float = Field(0.01, ge=0.0, description="absolute difference under which numbers match")
    report: bool = Field(True, description="write report.md and report.html beside scores.json")
    baseline: str | None = Field(None, description="grammar mode: a previous run's directory; exit 1 only for regressions against it")


class JobConfig(_Section):
    name: str = "job"
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = FucinaEngineConfig()
    constraint: ConstraintConfig = ConstraintConfig()
    dataset: DatasetConfig
    prompt: PromptConfig = PromptConfig()
    decoding: DecodingConfig = DecodingConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    output: OutputConfig
    eval: EvalConfig = EvalConfig()

    @model_validator(mode="after")
    def _constraint_given(self) -> "JobConfig":
        if self.constraint.kind is None and self.dataset.schema_field is None:
            raise ValueError("set one of constraint.json_schema, constraint.lark, constraint.regex or dataset.schema_field")
        return self


#: Where a Hydra run writes when the job's config names no output.dir (``name`` is the job's).
DEFAULT_OUTPUT_DIR = "outputs/${name}"
ENGINES = {"fucina": FucinaEngineConfig, "vllm": VLLMEngineConfig, "null": NullEngineConfig}


def register_defaults() -> None:
    """Give Hydra the defaults as configs: ``settings`` (every section but the engine) and one ``engine`` entry per engine.

    ``conf/base.yaml``, which every job lists first, pulls in both; ``engine=vllm`` picks another engine."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    settings = {name: _defaults(field.annotation, field) for name, field in JobConfig.model_fields.items() if name != "engine"}
    settings["output"]["dir"] = DEFAULT_OUTPUT_DIR
    store.store(name="settings", node=settings)
    for name, model in ENGINES.items():
        store.store(group="engine", name=name, node=model.model_construct(name=name).model_dump())


def _defaults(annotation: Any, field: Any) -> Any:
    """A field's default as plain data; a section's, key by key; '???' (Hydra's "required") where there is none."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: _defaults(f.annotation, f) for name, f in annotation.model_fields.items()}
    return "???" if field.is_required() else field.get_default(call_default_factory=True)


def validate(raw: dict[str, Any]) -> JobConfig:
    """Validate a composed config, or raise ``ConfigError`` naming each bad key."""
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError("invalid job config:\n" + "\n".join(_describe(e) for e in err.errors())) from None


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "<config>"
    if error["type"] == "extra_forbidden":
        return f"  {key}: unknown key (check the spelling; see --cfg job for the known keys)"
    if error["type"] == "missing":
        return f"  {key}: required, but not set"
    return f"  {key}={error.get('input')!r}: {error['msg']}"


def read_text_option(value: str, base: Path) -> str:
    """``@path`` reads a file (relative to ``base``); anything else is literal."""
    if not value.startswith("@"):
        return value
    path = (base / value[1:]).resolve()
    if not path.is_file():
        raise ConfigError(f"prompt file {path} does not exist")
    return path.read_text(encoding="utf-8")
