"""The job configuration surface, validated before any model loads.

These pydantic models are the one place every setting and its default is
spelled: the engines build their own options from them, key by key, and this
module imports nothing of the project but the embedded model's name (``models.DEFAULT_MODEL``, what
``model.source`` defaults to, spelled where the loader resolves it). Hydra composes ``conf/NAME.yaml`` over them (``register_defaults``
hands Hydra the defaults as the ``settings`` config and the ``engine`` group) with
the command-line overrides; the models then check every key (unknown keys are
errors) and every range, and turn a failure into one message per bad key that
names the key, the value given and what is allowed.
"""

from __future__ import annotations

import glob
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .models import DEFAULT_MODEL, DEFAULT_MODEL_NAME, EMBEDDED_NAMES


class ConfigError(ValueError):
    """The job configuration is invalid; the message says which key and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Section):
    source: str = Field(
        DEFAULT_MODEL,
        description=f"{DEFAULT_MODEL!r} (embedded {DEFAULT_MODEL_NAME}), another embedded model ({', '.join(EMBEDDED_NAMES[1:])}), a local directory or a hub id",
    )
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = "float32"
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA where torch sees it, else the CPU")
    adapter: str | None = Field(None, description="a LoRA adapter folder `learn adapter=true` wrote, merged into the model at load; null: none")


class FucinaEngineConfig(_Section):
    #: The class that runs this engine, as ``module:class`` in ``fucina_jobs.engines`` (imported only when a job names it).
    implementation: ClassVar[str] = "fucina:FucinaEngine"
    name: Literal["fucina"] = "fucina"
    compile: bool = Field(False, description="torch.compile the model forward: a one-off compile at start, cached across runs")


class VLLMEngineConfig(_Section):
    implementation: ClassVar[str] = "vllm:VLLMEngine"  # vLLM is an optional extra: imported only for engine=vllm
    name: Literal["vllm"]
    max_model_len: int = Field(4096, ge=256, description="longest prompt plus output vLLM plans for")
    kv_cache_gib: float = Field(2.0, gt=0, description="CPU KV cache per replica (VLLM_CPU_KVCACHE_SPACE); unused on GPU")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="share of the GPU's memory vLLM takes")
    enforce_eager: bool = Field(True, description="false compiles the model at every start, which takes long")


class CannedEngineConfig(_Section):
    implementation: ClassVar[str] = "canned:CannedEngine"
    name: Literal["canned"]
    output: str = Field("{}", description="the canned completion every row gets: the pipeline alone, for benchmarks and tests")


EngineConfig = Annotated[FucinaEngineConfig | VLLMEngineConfig | CannedEngineConfig, Field(discriminator="name")]


CONSTRAINT_KINDS = ("json_schema", "lark", "regex")


class ConstraintConfig(_Section):
    json_schema: str | None = Field(None, description="a JSON schema file; x-grounded fields decode from the row's text (docs/GROUNDING.md)")
    lark: str | None = Field(None, description="a Lark grammar file")
    regex: str | None = Field(None, description="a regex file; its named groups become the records' columns")
    learned: str | None = Field(
        None, description="cues `fucina_jobs learn` wrote (learned.json): x-grounded options per field, under the schema's own"
    )
    learned_at: str | None = Field(
        None,
        description="where the learned file's field paths start in this schema, property names and [] joined by / "
        "(receipts/[]): cues learned from one document per row, applied to the items of a list of such documents",
    )
    pydantic_model: str | None = Field(None, description="'module:Class' that records must also validate against")
    whitespace_flexible: bool = Field(False, description="JSON with any whitespace; false: compact JSON, fewer tokens")
    relax: Literal["auto", "off"] = Field(
        "auto",
        description="auto: a JSON schema llguidance refuses is widened until it compiles; outputs are still validated against the original schema",
    )

    @model_validator(mode="after")
    def _at_most_one(self) -> "ConstraintConfig":
        one_constraint(**self._given())
        if self.learned is not None and self.kind != "json_schema":
            raise ValueError("learned cues apply to a json_schema constraint only")
        if self.learned_at is not None and self.learned is None:
            raise ValueError("learned_at says where constraint.learned's cues apply: set constraint.learned too")
        return self

    @property
    def kind(self) -> str | None:
        """Which of json_schema, lark or regex is set; None where rows carry their own schema (``dataset.schema_field``)."""
        return one_constraint(**self._given())

    def _given(self) -> dict[str, str | None]:
        return {k: getattr(self, k) or None for k in CONSTRAINT_KINDS}


def one_constraint(**given: Any) -> str | None:
    """The one kind of constraint ``given`` names (None for none): a job's and the engines' Python API's one rule."""
    kinds = [k for k in CONSTRAINT_KINDS if given.get(k) is not None]
    if len(kinds) > 1:
        raise ValueError(f"give one of json_schema, lark or regex, not {' and '.join(kinds)}")
    return kinds[0] if kinds else None


class ChunkingConfig(_Section):
    """Documents longer than the model's context, cut into overlapping chunks that decode side by side (docs/LONG_DOCUMENTS.md)."""

    enabled: bool = Field(False, description="cut a row's text_field into chunks when its prompt would not fit; off: such a row is a reject")
    max_tokens: int | None = Field(
        None, ge=32, description="text tokens per chunk; null: what the context leaves after the prompt and decoding.max_tokens"
    )
    overlap_tokens: int = Field(256, ge=0, description="text tokens two consecutive chunks share, so a value cut at one edge is whole in the other")

    @model_validator(mode="after")
    def _overlap_leaves_progress(self) -> "ChunkingConfig":
        if self.max_tokens is not None and 2 * self.overlap_tokens > self.max_tokens:
            raise ValueError(
                f"overlap_tokens={self.overlap_tokens} is more than half of max_tokens={self.max_tokens}; "
                "each chunk must move on by at least half its length"
            )
        return self


class DatasetConfig(_Section):
    path: str = Field(
        description="a file, a glob (data/part-*.jsonl), a parquet folder or a folder of documents; local or a pyarrow.fs URI (s3://, gs://, file://)"
    )
    format: Literal["jsonl", "parquet", "csv", "text_dir", "documents", "maskbench"] = Field(
        "jsonl",
        description="csv: UTF-8, a BOM is fine; text_dir: one row per UTF-8 file, id = its path without suffix; documents: text_dir's rows, "
        "PDF (pages split by form feeds), .docx and .html files read as text, one file or a glob too; maskbench: MaskBench files",
    )
    id_field: str = Field("id", description="the field that names a row")
    text_field: str = Field("text", description="the field holding the document, which grounded values are checked against")
    schema_field: str | None = Field(None, description="a field holding each row's own JSON schema")
    limit: int | None = Field(None, ge=1, description="decode the first N rows only")
    ocr: Literal["auto", "off"] = Field(
        "auto",
        description="documents: auto reads a PDF page that has no text layer (a scan) with tesseract (apt-get install tesseract-ocr), "
        "and the row's ocr_pages lists those pages; off reads it as empty",
    )
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
    examples: str | None = Field(
        None, description="JSONL of worked examples, {'text': ..., 'label': ..., 'id': ...} a line (id optional): chat turns before each row's"
    )
    examples_k: int | None = Field(None, ge=1, description="use the first k worked examples; null: all of them")
    examples_nearest: bool = Field(
        False,
        description="each row's examples_k worked examples are those nearest its text (word-weight cosine) that fit a quarter "
        "of the model's context; the record's example_ids names them. false: the first examples_k, for every row",
    )

    @model_validator(mode="after")
    def _nearest_picks_among_examples(self) -> "PromptConfig":
        if self.examples_nearest and self.examples is None:
            raise ValueError("examples_nearest=true picks among the worked examples, and there are none: set prompt.examples=FILE.jsonl")
        return self


class SpeculativeConfig(_Section):
    """Speculation settings, for a job and the Python API alike: each engine builds its own from them."""

    enabled: bool = Field(True, description="false decodes plainly: the same tokens, one forward each")
    max_draft: int = Field(8, ge=1, le=64, description="draft tokens per stream and step (vLLM: speculative tokens)")
    grammar_drafting: bool = Field(True, description="draft the grammar's forced tokens (no vLLM counterpart)")
    max_ngram: int = Field(4, ge=1, le=16, description="longest prompt-lookup n-gram")
    min_ngram: int = Field(2, ge=1, le=16, description="shortest prompt-lookup n-gram")

    @model_validator(mode="after")
    def _ngram_window(self) -> "SpeculativeConfig":
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram={self.min_ngram} is larger than max_ngram={self.max_ngram}; the lookup window needs min_ngram <= max_ngram")
        return self


class DecodingConfig(_Section):
    max_tokens: int = Field(256, ge=1, le=32768, description="generated tokens per row at most; a row that reaches it is a 'length' reject")
    temperature: float = Field(0.0, ge=0.0, description="0 is greedy")
    top_k: int = Field(0, ge=0, description="0 keeps every token")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="1 keeps every token")
    min_p: float = Field(0.0, ge=0.0, lt=1.0, description="0 keeps every token")
    repeat_penalty: float = Field(1.0, gt=0.0, description="1 is none; llama.cpp's rule over the recent tokens")
    seed: int = Field(0, description="with the row's id, each record's seed: outputs do not depend on replicas, streams or speculation")
    samples: int = Field(1, ge=1, le=16, description="samples per row: more than 1 keeps each field's majority value (docs/VOTING.md)")
    vote_temperature: float = Field(0.7, gt=0.0, description="temperature of samples 2..k; sample 1 decodes with the settings above")
    repairs: int = Field(
        2,
        ge=0,
        le=8,
        description="re-decodes of a record that breaks one of its schema's x-rules, "
        "each with the doubtful values excluded, before it is rejected rule_violation (docs/RULES.md)",
    )
    speculative: SpeculativeConfig = SpeculativeConfig()


class RuntimeConfig(_Section):
    replicas: int = Field(1, ge=1, description="model replicas, one Ray actor each (and one GPU each on a GPU node)")
    streams: int = Field(4, ge=1, le=256, description="rows each replica decodes at once, one batched forward per step")
    ray_address: str | None = Field(None, description="null starts a local Ray; 'auto' or host:port joins a cluster")
    shard_size: int = Field(1000, ge=1, description="rows per shard: one records, rejects and stats file each, and the unit of retry and resume")
    shards_in_flight: int = Field(
        2,
        ge=1,
        description="shards each replica holds at once: 2 or more keep its decoder busy across shard boundaries; 1 drains it at each shard's end",
    )
    max_retries: int = Field(2, ge=0, description="times a failed shard is retried before its rows become rejects")
    replica_timeout_s: float = Field(600.0, gt=0, description="seconds to wait for replicas to start")


class OutputConfig(_Section):
    dir: str = Field(
        description="a local path or a pyarrow.fs URI; an S3 endpoint: s3://b/p?endpoint_override=host:port&scheme=http, or AWS_ENDPOINT_URL"
    )
    fresh: bool = Field(False, description="decode every row again: delete this config's version in output.dir (other versions stay)")

    @field_validator("dir")
    @classmethod
    def _named(cls, value: str) -> str:
        return check_output_dir(value)


def check_output_dir(value: str) -> str:
    """``output.dir`` as given; an empty one would scatter a run's files into the working directory."""
    if not value.strip():
        raise ValueError("is empty; set it to a folder or a URI, e.g. output.dir=outputs/NAME")
    return value


class EvalConfig(_Section):
    run_dir: str | None = Field(None, description="score this existing run; null runs the job first, into output.dir")
    mode: Literal["generate", "grammar"] = Field("generate", description="grammar: MaskBench mask verdicts, no model")
    gold: str | None = Field(None, description="gold JSONL, {'id': ..., 'label': {...}} per line")
    numeric_tolerance: float = Field(0.01, ge=0.0, description="absolute difference under which numbers match")
    report: bool = Field(True, description="write report.md and report.html beside scores.json")
    baseline: str | None = Field(None, description="grammar mode: a previous run's directory; exit 1 only for regressions against it")


class JobConfig(_Section):
    name: str = Field("job", description="the job's name: the default output.dir is outputs/NAME, and record ids derive from it")
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
        if self.decoding.samples > 1 and self.constraint.kind in ("lark", "regex"):
            raise ValueError(
                f"decoding.samples={self.decoding.samples} votes per JSON field; a constraint.{self.constraint.kind} job's "
                "output has none: use a JSON schema, or decoding.samples=1"
            )
        return self


_PACKAGE = Path(__file__).resolve().parent
#: The files the package ships, laid out as a job's project folder: ``conf/`` (``base`` and the shipped jobs), ``jobs/`` and
#: ``schemas/``. They sit beside the package in a checkout (and an editable install); a wheel holds them in ``fucina_jobs/shipped/``.
SHIPPED = _PACKAGE / "shipped" if (_PACKAGE / "shipped").is_dir() else _PACKAGE.parent
#: Where a Hydra run writes when the job's config names no output.dir (``name`` is the job's).
DEFAULT_OUTPUT_DIR = "outputs/${name}"
#: Every engine a job can name (``engine=NAME``): its settings, whose ``implementation`` names the class that runs it.
ENGINES = {"fucina": FucinaEngineConfig, "vllm": VLLMEngineConfig, "canned": CannedEngineConfig}


def register_defaults() -> None:
    """Give Hydra the defaults as configs: ``settings`` (every section but the engine) and one ``engine`` entry per engine.

    ``conf/base.yaml``, which every job lists first, pulls in both; ``engine=vllm`` picks another engine."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    OmegaConf.register_new_resolver("hydra_dir", hydra_dir, replace=True)
    settings = {name: _defaults(field.annotation, field) for name, field in JobConfig.model_fields.items() if name != "engine"}
    settings["output"]["dir"] = DEFAULT_OUTPUT_DIR
    store.store(name="settings", node=settings)
    for name, model in ENGINES.items():
        store.store(group="engine", name=name, node=model.model_construct(name=name).model_dump())


def hydra_dir(output_dir: str | None) -> str:
    """Where Hydra keeps its own log (``cli.log``): ``output.dir`` itself, or for a URI a local temporary folder.

    Hydra makes this folder before the job's config is validated, so an empty
    ``output.dir`` or a file in its place is refused here, before anything is written."""
    try:
        value = check_output_dir(str(output_dir or ""))
    except ValueError as err:
        raise ConfigError(f"output.dir {err}") from None
    if "://" in value:
        return str(Path(tempfile.gettempdir()) / "fucina_jobs" / "hydra" / re.sub(r"[^A-Za-z0-9._-]+", "_", value.split("?")[0]))
    if Path(value).is_file():
        raise ConfigError(f"output.dir={value} is a file, not a folder; give a folder's path")
    return value


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
        problems = [_describe(e) for e in err.errors()]
        if len(problems) == 1:  # the usual case: one line
            raise ConfigError(f"invalid job config: {problems[0].strip()}") from None
        raise ConfigError("invalid job config:\n" + "\n".join(problems)) from None


#: Settings a release removed, by key: what a job that still sets one is told, in place of "unknown key".
REMOVED = {
    key: f"{key} was removed: grounded values decode token by token under their grammar, as every other value does "
    "(choosing a value by its whole likelihood measured worse; docs/history/LIKELIHOOD_CHOICE.md); delete the setting"
    for key in ("decoding.choice", "decoding.choice_options")
}


def unknown_engine(name: Any) -> str:
    """The one-line error for an engine name that is not one of ours (``null`` included: YAML reads it as none)."""
    shown = "null" if name is None else name
    return f"engine={shown} is not an engine; the engines are {', '.join(ENGINES)}"


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "<config>"
    if error["loc"] == ("engine",) and error["type"] in ("union_tag_invalid", "union_tag_not_found", "model_attributes_type"):
        given = error.get("input")
        return "  " + unknown_engine(given.get("name") if isinstance(given, dict) else given)
    if error["type"] == "extra_forbidden" and key in REMOVED:
        return f"  {REMOVED[key]}"
    if error["type"] == "extra_forbidden":
        return f"  {key}: unknown key (check the spelling; see --cfg job for the known keys)"
    if error["type"] == "missing":
        return f"  {key}: required, but not set"
    return f"  {key}={error.get('input')!r}: {error['msg'].removeprefix('Value error, ')}"


def locate(path: str, base: Path) -> Path:
    """Where a job reads a relative input path from (a constraint, a prompt file, a dataset, gold labels).

    Below ``base``, the working directory, where anything is there; else among
    the files the package ships, laid out as a project folder is (``SHIPPED``:
    ``conf/``, ``jobs/``, ``schemas/``), so that the shipped jobs run from any
    folder; else below ``base`` again, so that an error names the user's path.
    An absolute path is itself. A glob exists where it matches a file."""
    local, shipped = base / path, SHIPPED / path
    return shipped if not _exists(local) and _exists(shipped) else local


def _exists(path: Path) -> bool:
    return path.exists() or bool(glob.glob(str(path)))


def read_text_option(value: str, base: Path) -> str:
    """``@path`` reads a file (``locate``d from ``base``); anything else is literal."""
    if not value.startswith("@"):
        return value
    path = locate(value[1:], base).resolve()
    if not path.is_file():
        raise ConfigError(f"prompt file {path} does not exist")
    return path.read_text(encoding="utf-8")
