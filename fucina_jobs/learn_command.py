"""``learn conf=NAME gold=FILE [out=FILE] [overrides]``: learn a job's cues from gold rows and write them.

The job is composed as ``run`` composes it (Hydra, the same overrides); its dataset gives the
documents, joined to the gold (``{"id", "label"}`` a line, as ``eval.gold``, the review page and the
Label Studio import write it) by row id. The gold is checked against the schema first (``learning/gold.py``): field
names that do not match stop it (``allow_mismatch=true`` goes on), values the schema refuses are left out.
No model loads. The cues go to ``out`` (by default the file
the job's ``constraint.learned`` names, else ``jobs/NAME/learned.json``), learned from the schema's own
options, never from cues learned before; beside them (``learned-examples.jsonl``) the gold rows as worked
examples, for ``prompt.examples_nearest`` to pick the nearest per row.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

USAGE = """usage: python -m fucina_jobs learn conf=NAME [gold=FILE] [out=FILE] [allow_mismatch=true] [adapter=true] [key=value ...]
       python -m fucina_jobs learn conf=NAME gold=FILE curve=0,10,20,50 [held_out=20] [out=DIR] [adapter=true] [key=value ...]

Learns each field's x-grounded options (labels, day order, span shape, units, ...) from gold rows
joined to the job's dataset by id, and writes them with their evidence to out (default: the job's
constraint.learned, else jobs/NAME/learned.json). gold defaults to the job's eval.gold. A job reads
the file with constraint.learned=FILE; a field's own options in the schema win over learned ones.
Beside it, FILE-examples.jsonl holds the gold rows as worked examples (long documents cut to the
passages around their values): prompt.examples=THAT prompt.examples_nearest=true gives each row the
nearest ones.

The gold is checked against the schema before anything is learned: a gold field the schema lacks, or a
schema field no gold row gives, stops learn (allow_mismatch=true warns and goes on without it); a gold
value of the wrong type, or one the schema refuses, is left out of learning, one line each. The table
says why each field that keeps no cue is left to the model.

With adapter=true: also a LoRA adapter of the job's model, fine-tuned on the gold rows (the job's prompt over
each document cut to the passages that write its gold values; the target the whole record as the
job's grammar writes it), stopped early on a held-out fifth of them, saved beside the cues
(FILE-adapter/, safetensors, with evidence.json). A job merges it into its model with model.adapter=DIR;
cues and adapter each work without the other (constraint.learned=null, model.adapter=null).

With curve=: the learning curve. The last held_out gold rows are kept out; for each size n the cues
are learned from the first n other rows and the job is scored on the held-out ones with eval (the
model runs). Prints a table per field; the runs go to out (default outputs/NAME/learning-curve).
With adapter=true each size also trains an adapter, and is scored with the cues alone, the adapter
alone and both, with the minutes the adapter trained.
"""
#: The argument that goes on past gold field names that do not match the schema's, warning about each.
ALLOW_MISMATCH = "allow_mismatch"
#: The argument that also trains a LoRA adapter of the job's model on the gold rows.
ADAPTER = "adapter"
#: The arguments ``learn`` takes itself; the rest are the job's Hydra overrides.
OURS = ("gold", "out", "curve", "held_out", ALLOW_MISMATCH, ADAPTER)
#: Gold rows a learning curve keeps out of learning, to score on.
HELD_OUT = 20
#: The share of gold rows an adapter's training keeps out, to stop on (one at least). Why a fifth: enough rows to tell
#: an epoch that generalises from one that memorises, few enough to leave most of a small gold set to training.
ADAPTER_HELD_OUT = 0.2


def learn_command(argv: list[str]) -> int:
    from .pipeline import hydra_command

    if {"-h", "--help"} & set(argv):
        sys.stdout.write(USAGE)
        return 0
    ours = {k: v for k, _, v in (a.partition("=") for a in argv) if k in OURS}
    rest = [a for a in argv if a.partition("=")[0] not in OURS]
    if "curve" in ours:
        return hydra_command("learn", rest, lambda cfg, resolved: _curve_task(cfg, ours, rest))
    return hydra_command("learn", rest, lambda cfg, resolved: _learn_task(cfg, ours))


def _learn_task(cfg: Any, ours: dict[str, str]) -> int:
    from .grounding.learned_file import apply, write
    from .learning.learned import entries, kept, learn_fields

    base = Path.cwd()
    schema, rows, gold, gold_path = _gold_rows(cfg, ours)
    pairs = [(str(rows[i].get(cfg.dataset.text_field, "")), label) for i, label in gold.items() if i in rows]
    fields = learn_fields(schema, pairs)
    cues = kept(fields)
    target = Path(ours.get("out") or cfg.constraint.learned or f"jobs/{cfg.name}/learned.json")
    write(base / target, entries(cues), len(pairs), gold_path)
    examples = examples_path(target)
    shown = write_examples(base / examples, schema, cues, [(i, str(rows[i].get(cfg.dataset.text_field, "")), label) for i, label in gold.items()])
    sys.stdout.write(_summary(cues, fields, len(pairs), target, cfg.constraint.learned is None) + "\n")
    sys.stdout.write(
        f"\n{shown} of {len(pairs)} gold rows as worked examples -> {examples} (prompt.examples={examples} prompt.examples_nearest=true)\n"
    )
    if _flag(ours, ADAPTER):
        from .learning.adapter import adapter_path

        folder = adapter_path(target)
        evidence = _train_adapter(cfg, apply(schema, entries(cues), str(target)), rows, gold, gold_path, base / folder)
        accuracy = evidence["held_out_accuracy"]
        sys.stdout.write(
            f"\nadapter from {evidence['rows']['train']} gold rows, held-out field accuracy "
            f"{accuracy['before']:.3f} -> {accuracy['after']:.3f} -> {folder} (model.adapter={folder})\n"
        )
    return 0


def _train_adapter(
    cfg: Any, schema: dict[str, Any], rows: dict[str, dict[str, Any]], gold: dict[str, Any], source: str, folder: Path
) -> dict[str, Any]:
    """Train a LoRA adapter of the job's model on the ``gold`` rows (read from ``source``) under ``schema`` (the
    job's, its cues merged in), save it into ``folder`` and return its evidence."""
    import random

    from .config import ConfigError
    from .engines import load_model
    from .learning.adapter import train
    from .learning.adapter_samples import samples
    from .models import adapters

    required = set(schema.get("required", []))
    ids = sorted(i for i in gold if i in rows and required <= set(gold[i]))
    if len(ids) < len(gold):
        log.warning("%d gold rows lack a field the schema requires (left out above) and do not train the adapter", len(gold) - len(ids))
    if len(ids) < 2:
        raise ConfigError(f"learn: adapter=true needs at least 2 gold rows, one to train on and one to stop on; {len(ids)} given")
    if cfg.prompt.examples:
        log.warning("the adapter trains on the job's prompt without its worked examples (prompt.examples)")
    random.Random(cfg.decoding.seed).shuffle(ids)
    held = max(1, round(ADAPTER_HELD_OUT * len(ids)))
    loaded = load_model(cfg.model.source, cfg.model.device, "float32")
    job = _sample_format(cfg, schema, loaded)
    split = {name: [(i, rows[i], gold[i]) for i in part] for name, part in (("held", ids[:held]), ("train", ids[held:]))}
    held_out, train_set = (samples(schema, split[name], cfg.dataset.text_field, job) for name in ("held", "train"))
    model, evidence = train(loaded.model, train_set, held_out, report=lambda line: sys.stdout.write(line + "\n"))
    evidence = {"gold": source, **evidence}
    adapters.save(model, folder, loaded.path, evidence)
    return evidence


def _sample_format(cfg: Any, schema: dict[str, Any], loaded: Any) -> Any:
    """The job's side of the adapter's samples (``adapter_samples.SampleFormat``): its prompt as the engine encodes
    it, its records as its grammar writes them."""
    from .config import read_text_option
    from .engines import encode_chat, stop_tokens
    from .learning.adapter_samples import SampleFormat
    from .pipeline import compact_json

    base, tokenizer, text_field = Path.cwd(), loaded.tokenizer, cfg.dataset.text_field
    system, template = read_text_option(cfg.prompt.system, base) or None, read_text_option(cfg.prompt.template, base)

    def prompt(row: dict[str, Any], text: str) -> list[int]:
        return encode_chat(tokenizer, template.format_map({**row, text_field: text}), system)

    stop = min(stop_tokens(tokenizer, loaded.path))
    return SampleFormat(prompt=prompt, answer=lambda label: compact_json(label, schema), tokenizer=tokenizer, stop=stop)


def examples_path(learned: Path) -> Path:
    """Where ``learn`` writes the worked examples beside the cues file ``learned``."""
    return learned.with_name(f"{learned.stem}-examples.jsonl")


def write_examples(path: Path, schema: dict[str, Any], cues: list, gold: list[tuple[str, str, Any]]) -> int:
    """The gold rows ((id, text, label)) as worked examples in ``path``, each text cut to the passages that write its
    values; a row whose label the job would refuse as an example (it breaks the schema with the cues merged in, or
    its passages do not write a value) is left out. Returns how many were written."""
    from .data import json_validator, schema_failure
    from .grounding.check import ungrounded_values
    from .grounding.declaration import grounded_fields
    from .grounding.learned_file import apply
    from .learning.excerpts import excerpt
    from .learning.learned import entries

    merged = apply(schema, entries(cues), str(path))
    fields, validator = grounded_fields(merged), json_validator(merged)
    lines = []
    for row_id, text, label in gold:
        cut = excerpt(text, label, fields)
        if schema_failure(validator, label) is None and not ungrounded_values(label, fields, cut)[1]:
            lines.append(json.dumps({"id": row_id, "text": cut, "label": label}, ensure_ascii=False) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return len(lines)


def _curve_task(cfg: Any, ours: dict[str, str], overrides: list[str]) -> int:
    from .config import ConfigError
    from .learning.curve import learning_curve

    try:
        sizes = [int(n) for n in ours["curve"].split(",")]
        held_out = int(ours.get("held_out", HELD_OUT))
    except ValueError:
        raise ConfigError(f"learn: curve={ours['curve']} held_out={ours.get('held_out', HELD_OUT)}: expected whole numbers, curve=0,10,20") from None
    schema, rows, gold, _ = _gold_rows(cfg, ours)
    out = Path(ours.get("out") or f"outputs/{cfg.name}/learning-curve")
    try:
        table = learning_curve(
            cfg.name,
            schema,
            rows,
            gold,
            text_field=cfg.dataset.text_field,
            sizes=sizes,
            held_out=held_out,
            overrides=overrides,
            out=out.resolve(),
            adapter=_flag(ours, ADAPTER),
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    sys.stdout.write(table + "\n")
    return 0


def _gold_rows(cfg: Any, ours: dict[str, str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any], str]:
    """The job's schema without learned cues, its readable rows by id, the gold labels of those rows (checked against
    the schema: ``_check_names`` stops on names that do not match, ``valid_gold`` leaves out what it refuses), the
    gold's path."""
    from .config import ConfigError, locate
    from .data import json_validator, read_rows
    from .eval.evaluate import load_gold
    from .learning.gold import valid_gold
    from .pipeline import read_constraint

    base = Path.cwd()
    if cfg.constraint.kind != "json_schema":
        raise ConfigError(f"learn: the job {cfg.name} has no constraint.json_schema; cues are learned for a JSON schema's fields")
    if cfg.constraint.learned_at is not None:
        raise ConfigError(
            f"learn: the job {cfg.name} reads its cues at constraint.learned_at={cfg.constraint.learned_at}, from "
            f"{cfg.constraint.learned}: learn them with the job that extracts one such document per row"
        )
    allow = _flag(ours, ALLOW_MISMATCH)
    gold_path = ours.get("gold") or cfg.eval.gold
    if gold_path is None:
        raise ConfigError("learn: say which gold rows to learn from: gold=FILE (a JSONL of {'id': ..., 'label': {...}})")
    constraint = read_constraint(cfg.constraint.model_copy(update={"learned": None}), base)
    gold = load_gold(locate(gold_path, base))
    rows = {row.id: {**row.fields, cfg.dataset.id_field: row.id} for row in read_rows(cfg.dataset, base) if row.problem is None}
    known = {i: label for i, label in gold.items() if i in rows}
    if not known:
        raise ConfigError(f"learn: none of the {len(gold)} gold ids of {gold_path} is a row of dataset.path={cfg.dataset.path}")
    if len(known) < len(gold):
        log.warning("%d of %d gold rows have no row in %s and are left out", len(gold) - len(known), len(gold), cfg.dataset.path)
    _check_names(constraint.schema, known, gold_path, allow=allow)
    return constraint.schema, rows, valid_gold(json_validator(constraint.schema), known, gold_path), gold_path


def _check_names(schema: dict[str, Any], gold: dict[str, Any], source: str, *, allow: bool) -> None:
    """Stop where the field names of ``gold`` and ``schema`` do not match (``gold.mismatches``), one line each, with
    what to do: a field learned from no gold row is left empty in every record the job writes. With ``allow``, warn
    and go on."""
    from .config import ConfigError
    from .learning.gold import mismatches

    lines = mismatches(schema, gold, source)
    for line in lines:
        log.log(logging.WARNING if allow else logging.ERROR, "%s", line)
    if lines and not allow:
        raise ConfigError(
            f"learn: the field names of {source} do not match the schema's ({len(lines)} above): rename the gold key or "
            f"the schema's field, or learn without them with {ALLOW_MISMATCH}=true"
        )


def _flag(ours: dict[str, str], key: str) -> bool:
    """The learn argument ``key=true|false`` (false where it is not given)."""
    from .config import ConfigError

    value = ours.get(key, "false").lower()
    if value not in ("true", "false"):
        raise ConfigError(f"learn: {key}={ours[key]}: expected true or false")
    return value == "true"


def _summary(cues: list, fields: list, rows: int, target: Path, tell: bool) -> str:
    """The ``cues`` kept, a row a field, then a line for each of the other ``fields``, left to the model, saying why."""
    lines = [f"learned from {rows} gold rows -> {target}", "", "| field | written | pick rate | options |", "|---|---|---|---|"]
    for c in cues:
        e = c.evidence
        options = ", ".join(f"{k}={v}" for k, v in {**c.options, **c.array}.items())
        lines.append(f"| {c.name} | {e['written']}/{e['values']} | {e['pick_rate_before']:.3f} -> {e['pick_rate_after']:.3f} | {options} |")
    if not cues:
        lines.append("| (none) | | | the gold rows support no cue |")
    left = [f"{c.name}: no cue kept, left to the model: {c.left}" for c in fields if c.left is not None]
    if left:
        lines += ["", *left]
    if tell:
        lines += ["", f"run the job with them: constraint.learned={target} (or add it to the job's config)"]
    return "\n".join(lines)
