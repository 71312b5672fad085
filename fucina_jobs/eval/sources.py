"""A run's records beside the documents they came from: what the review page and the Label Studio export show.

Records hold the model's output, not the row's text (a nightly job would store
every document twice). The text is read back from the dataset that the run's
manifest names, relative to ``base`` (the directory the job ran in), and each
row is checked against the digest its shard committed: a row edited since the
run keeps its text but loses its spans, which would point into other words.
"""

from __future__ import annotations

import logging
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from ..grounding.declaration import Grounded, GroundingError, grounded_fields
from ..config import ConfigError, JobConfig, validate
from .runs import Run, read_run

log = logging.getLogger(__name__)

#: The ``--base`` option of the commands that read a run's documents.
BASE_HELP = "the directory the job ran in, where its dataset path starts (default: here)"


@dataclass
class Sources:
    """The run's config, its job schema and grounded fields, and each row's source text by row id."""

    config: JobConfig
    schema: dict[str, Any] | None
    fields: list[Grounded]
    _: KW_ONLY
    texts: dict[str, str] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)  # rows whose content differs from what the run decoded
    layouts: dict[str, Any] = field(default_factory=dict)  # a PDF row's pages (``documents.Layout``), by row id


def read_sources(run: Run, base: Path, cfg: JobConfig | None = None) -> Sources:
    """The run's source texts and schema, from ``cfg`` or its manifest's config; ``ConfigError`` says what is missing."""
    from ..data import read_rows
    from ..pipeline import read_constraint

    recorded = (run.manifest or {}).get("config")
    if cfg is None and not recorded:
        raise ConfigError(f"{run.path}/manifest.json names no job config, so the run's documents cannot be found")
    cfg = cfg or validate(recorded)
    constraint = read_constraint(cfg.constraint, base) if cfg.constraint.kind else None
    schema = constraint.schema if constraint else None
    expected = ((run.manifest or {}).get("hashes") or {}).get("constraint")
    if constraint and expected and constraint.digest != expected:
        log.warning("%s changed since the run; its fields are read from the file as it is now", cfg.constraint.json_schema)
    try:
        fields = grounded_fields(schema) if schema else []
    except GroundingError as err:
        raise ConfigError(f"constraint.json_schema: {cfg.constraint.json_schema}: {err}") from None
    try:
        rows = read_rows(cfg.dataset, base)
    except (ConfigError, OSError) as err:
        raise ConfigError(
            f"the run's dataset (dataset.path={cfg.dataset.path}) cannot be read from {base}: {err}; "
            "run this from the directory the job ran in, or pass --base"
        ) from None
    digests = _committed_digests(run)
    sources = Sources(cfg, schema, fields)
    for row in rows:
        sources.texts[row.id] = str(row.fields.get(cfg.dataset.text_field, ""))
        if row.layout is not None:
            sources.layouts[row.id] = row.layout
        if row.id in digests and digests[row.id] != row.digest:
            sources.changed.add(row.id)
    if sources.changed:
        log.warning("%d row(s) of %s changed since the run; their values are shown without spans", len(sources.changed), cfg.dataset.path)
    return sources


def open_run(run_dir: Path, base: Path) -> tuple[Run, Sources]:
    """The run in ``run_dir`` and its documents; ``ConfigError`` says in one line what is missing."""
    run = read_run(run_dir)
    if not run.dir.shard_files("records"):
        raise ConfigError(f"{run_dir} holds no records/; give the output.dir of a run")
    return run, read_sources(run, base)


def _committed_digests(run: Run) -> dict[str, str]:
    """Row id -> the content digest its shard committed."""
    digests: dict[str, str] = {}
    for shard in run.stats:
        digests.update(zip(shard.get("row_ids") or [], shard.get("row_digests") or []))
    return digests
