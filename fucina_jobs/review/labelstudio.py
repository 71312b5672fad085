"""A round trip through Label Studio: a run's records as pre-annotated tasks, people's annotations back as gold labels.

``export labelstudio RUN OUT.json`` writes one task per row (its source text
under ``data.text``) with one prediction per record: each grounded value is a
region of the text (``start``, ``end``, ``text``, labelled with its field's
path, ``score`` its confidence), the prediction's ``score`` is the record's
confidence and its ``model_version`` the run's version. Values a person
types rather than marks (fields without grounding, and grounded fields whose
``allow`` values the text need not write, such as a tax of 0) are ``TextArea``
results. ``labelstudio.xml`` beside it is the matching labelling config.

A run of PDF rows adds the pages: a PDF row's task carries, under
``data.page``, the pages its values are on, rendered and stacked into one image
(a PNG data URI, so Label Studio needs no file storage), and each value's boxes
(``field_boxes``) as ``rectanglelabels`` regions over it, in Label Studio's
percentages of the image, labelled with the same paths as the text's regions.
The gold is read from the text's regions alone: a box shows where a value is.

``import labelstudio EXPORT.json GOLD.jsonl`` reads Label Studio's JSON export
and writes each task's latest submitted annotation (not cancelled; tasks no
one annotated are left out) as a gold line ``{"id": row, "label": {...}}``,
the values normalised to the schema's types the way grounding reads them
(``1.234,50 €`` -> ``1234.5``, ``3rd April 2025`` -> ``2025-04-03``, ``€`` ->
``EUR``), so ``eval eval.gold=GOLD.jsonl`` scores a run against what people
accepted. Array items are rebuilt in text order: the i-th region labelled
``items[].name`` is ``items[i].name``.

Offsets are Python string indices (code points), as Label Studio's text
regions count them.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping
from xml.sax.saxutils import quoteattr

from ..grounding.declaration import Grounded
from ..grounding.spans import writes
from ..grounding.values import dates_in, json_number, normalize_whitespace, number_spans, quantities_in
from .page import PAGE_DPI

log = logging.getLogger(__name__)

LABELS = "label"  # the Labels control that holds the regions
TEXT = "text"  # the Text object: the row's document, ``data.text``
TYPED = "typed:"  # TextArea controls: a value typed in, by field path
PAGE = "page"  # the Image object of a PDF row's pages, ``data.page``
BOXES = "box"  # the RectangleLabels control over them
#: ``data.page`` of a row without pages in a run with some: one white pixel, since every task must fill the config's image.
_NO_PAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGP4DwABAQEAWk1v8QAAAABJRU5ErkJggg=="
_COLOURS = ["#f4a261", "#2a9d8f", "#e76f51", "#8ab17d", "#e9c46a", "#6d9dc5", "#b5838d", "#9c89b8", "#f28482", "#84a59d"]


@dataclass(frozen=True)
class Field:
    """One top-level (or array-item) leaf of the schema as Label Studio sees it."""

    path: str  # items[].name for an array item's field
    schema: dict[str, Any]
    grounded: Grounded | None

    @property
    def marked(self) -> bool:
        """A region of the text holds its value."""
        return self.grounded is not None

    @property
    def typed(self) -> bool:
        """A text box holds its value: no grounding, or allowed values the text need not write. Array items are never typed."""
        return "[]" not in self.path and (self.grounded is None or bool(self.grounded.allow))


def schema_fields(schema: Mapping[str, Any], grounded: list[Grounded]) -> list[Field]:
    """The schema's leaves a person labels: grounded fields (at any depth) and ungrounded top-level scalars."""
    by_path = {g.name: g for g in grounded}
    fields = [Field(name, g.schema, g) for name, g in by_path.items()]
    for key, sub in (schema.get("properties") or {}).items():
        if key not in by_path and isinstance(sub, dict) and sub.get("type") not in ("object", "array"):
            fields.append(Field(key, sub, None))
    return fields


def labeling_config(fields: list[Field], pages: bool = False) -> str:
    """The labelling config: one label per marked field over the text, one text box per typed field; with ``pages``,
    the same labels as rectangles over the image of a PDF row's pages."""
    labels = "\n".join(f'    <Label value={quoteattr(f.path)} background="{_COLOURS[i % len(_COLOURS)]}"/>' for i, f in enumerate(fields) if f.marked)
    boxes = "\n".join(
        f'  <Header value={quoteattr(_prompt(f))} size="6"/>\n'
        f'  <TextArea name={quoteattr(TYPED + f.path)} toName="{TEXT}" maxSubmissions="1" editable="true" showSubmitButton="false"/>'
        for f in fields
        if f.typed
    )
    return (
        f'<View>\n  <Header value="Mark each value in the text with its field" size="5"/>\n'
        f'  <Labels name="{LABELS}" toName="{TEXT}">\n{labels}\n  </Labels>\n  <Text name="{TEXT}" value="${TEXT}"/>\n'
        + (boxes + "\n" if boxes else "")
        + (
            f'  <Header value="Where each value is on its pages" size="5"/>\n  <RectangleLabels name="{BOXES}" toName="{PAGE}">\n'
            f'{labels}\n  </RectangleLabels>\n  <Image name="{PAGE}" value="${PAGE}"/>\n'
            if pages
            else ""
        )
        + "</View>\n"
    )


def _prompt(f: Field) -> str:
    if f.grounded is not None:
        return f"{f.path}, when the text does not write it ({', '.join(map(json.dumps, f.grounded.allow))})"
    return f"{f.path} ({f.schema.get('type') or 'enum'})"


# -- export -------------------------------------------------------------------------


def tasks(
    records: Iterable[Mapping[str, Any]],
    rejects: Iterable[Mapping[str, Any]],
    texts: Mapping[str, str],
    fields: list[Field],
    model_version: str,
    schema_path: str,
    changed: set[str] = frozenset(),
    layouts: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One task per row; a record's task carries its prediction, a reject's none (its reason is in ``data``).

    ``data.schema`` names the job's schema file, where ``import labelstudio`` finds how to read each value. ``layouts``:
    the PDF rows' pages (``documents.Layout`` by row id), whose tasks carry the pages and the values' boxes."""
    out = []
    for record in records:
        row_id = str(record["row_id"])
        text = texts.get(row_id, "")
        result = _regions(record, text, fields) if row_id not in changed else []
        result += _typed(record, fields)
        data = {TEXT: text, "row_id": row_id, "record_id": record["record_id"], "schema": schema_path}
        if layouts:
            data[PAGE], rectangles = _pages(record, layouts.get(row_id) if row_id not in changed else None, fields)
            result += rectangles
        out.append({"data": data, "predictions": [{"model_version": model_version, "score": record.get("record_confidence"), "result": result}]})
    for reject in rejects:
        row_id = str(reject["row_id"])
        out.append(
            {
                "data": {
                    TEXT: texts.get(row_id, ""),
                    "row_id": row_id,
                    "record_id": reject["record_id"],
                    "schema": schema_path,
                    "reject": reject.get("reason"),
                }
                | ({PAGE: _NO_PAGE} if layouts else {})
            }
        )
    return out


def _pages(record: Mapping[str, Any], layout: Any, fields: list[Field]) -> tuple[str, list[dict[str, Any]]]:
    """The pages a PDF row's values are on, stacked into one image (a PNG data URI), and each value's boxes as
    rectangles over it, in percentages of the image as Label Studio takes them."""
    from PIL import Image

    boxes = dict(record.get("field_boxes") or []) if layout is not None else {}
    numbers = sorted({box["page"] for found in boxes.values() for box in found})
    if not numbers:
        return _NO_PAGE, []
    pages = {n: Image.open(io.BytesIO(layout.render(n, PAGE_DPI))) for n in numbers}
    width, height = max(p.width for p in pages.values()), sum(p.height for p in pages.values())
    sheet, tops, top = Image.new("RGB", (width, height), "white"), {}, 0
    for n, page in pages.items():
        sheet.paste(page, (0, top))
        tops[n], top = top, top + page.height
    labels, confidence = {f.path for f in fields if f.marked}, dict(record.get("field_confidence_mean") or [])
    rectangles = []
    for path, found in boxes.items():
        if _schema_path(path) not in labels:
            continue
        for box in found:
            page = pages[box["page"]]
            rectangles.append(
                {
                    "id": f"b{len(rectangles)}",
                    "from_name": BOXES,
                    "to_name": PAGE,
                    "type": "rectanglelabels",
                    "origin": "prediction",
                    "original_width": width,
                    "original_height": height,
                    "image_rotation": 0,
                    "value": {
                        "x": 100 * box["left"] * page.width / width,
                        "y": 100 * (tops[box["page"]] + box["top"] * page.height) / height,
                        "width": 100 * (box["right"] - box["left"]) * page.width / width,
                        "height": 100 * (box["bottom"] - box["top"]) * page.height / height,
                        "rotation": 0,
                        "rectanglelabels": [_schema_path(path)],
                    },
                    "score": confidence.get(path),
                }
            )
    out = io.BytesIO()
    sheet.save(out, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii"), rectangles


def _regions(record: Mapping[str, Any], text: str, fields: list[Field]) -> list[dict[str, Any]]:
    labels = {f.path for f in fields if f.marked}
    confidence = dict(record.get("field_confidence_mean") or [])
    regions = []
    for path, (start, end) in sorted(dict(record.get("field_spans") or []).items(), key=lambda item: tuple(item[1])):
        label = _schema_path(path)
        if label not in labels or not 0 <= start < end <= len(text):
            continue
        regions.append(
            {
                "id": f"r{len(regions)}",
                "from_name": LABELS,
                "to_name": TEXT,
                "type": "labels",
                "origin": "prediction",
                "value": {"start": start, "end": end, "text": text[start:end], "labels": [label]},
                "score": confidence.get(path),
            }
        )
    return regions


def _typed(record: Mapping[str, Any], fields: list[Field]) -> list[dict[str, Any]]:
    value = json.loads(record["text"])
    spans = dict(record.get("field_spans") or [])
    results = []
    for f in fields:
        if f.typed and isinstance(value, dict) and value.get(f.path) is not None and f.path not in spans:
            shown = value[f.path] if isinstance(value[f.path], str) else json.dumps(value[f.path])
            results.append(
                {
                    "id": f"t{len(results)}",
                    "from_name": TYPED + f.path,
                    "to_name": TEXT,
                    "type": "textarea",
                    "origin": "prediction",
                    "value": {"text": [shown]},
                }
            )
    return results


def _schema_path(path: str) -> str:
    """``items[0].name`` -> ``items[].name``: the label a value's field has in the config."""
    return re.sub(r"\[\d+\]", "[]", path)


# -- import -------------------------------------------------------------------------


class LabelStudioError(ValueError):
    """An export this command cannot read, named by file and task."""


def gold_lines(export: list[Mapping[str, Any]], fields: list[Field], name: str = "export") -> tuple[list[dict[str, Any]], list[str]]:
    """Gold lines from a Label Studio JSON export, and one warning per value that could not be read."""
    if not isinstance(export, list):
        raise LabelStudioError(f"{name}: expected Label Studio's JSON export, a list of tasks, not {type(export).__name__}")
    lines, warnings = [], []
    for n, task in enumerate(export):
        row_id = (task.get("data") or {}).get("row_id") if isinstance(task, dict) else None
        if row_id is None:
            raise LabelStudioError(f"{name}: task {n} has no data.row_id; export the project that `export labelstudio` filled")
        annotation = latest_annotation(task.get("annotations") or [])
        if annotation is None:
            continue
        label, problems = _label(annotation.get("result") or [], task["data"].get(TEXT, ""), fields)
        warnings += [f"{name}: row {row_id!r}: {p}" for p in problems]
        lines.append({"id": row_id, "label": label})
    return lines, warnings


def latest_annotation(annotations: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The task's latest submitted annotation; a cancelled (skipped) one does not count."""
    kept = [a for a in annotations if not a.get("was_cancelled")]
    return max(kept, key=lambda a: (str(a.get("updated_at") or a.get("created_at") or ""), a.get("id") or 0), default=None)


def _label(result: list[Mapping[str, Any]], text: str, fields: list[Field]) -> tuple[dict[str, Any], list[str]]:
    regions: dict[str, list[Mapping[str, Any]]] = {}
    typed: dict[str, str] = {}
    for item in result:
        value = item.get("value") or {}
        if item.get("type") == "labels" and value.get("labels"):
            regions.setdefault(value["labels"][0], []).append(value)
        elif item.get("type") == "textarea" and str(item.get("from_name", "")).startswith(TYPED):
            typed[item["from_name"][len(TYPED) :]] = "\n".join(value.get("text") or [])
    label: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields:
        marked = sorted(regions.get(f.path, []), key=lambda v: v.get("start", 0))
        written = [v.get("text") if v.get("text") is not None else text[v["start"] : v["end"]] for v in marked]
        if "[]" in f.path:
            for i, w in enumerate(written):
                _put(label, f.path, i, _read(f, w, problems))
            continue
        if len(written) > 1:
            problems.append(f"{f.path}: {len(written)} regions; the first in the text is taken")
        if written:
            label[f.path] = _read(f, written[0], problems)
        elif typed.get(f.path, "").strip():
            label[f.path] = _typed_value(f, typed[f.path].strip(), problems)
        else:
            label[f.path] = None  # nothing marked or typed: the document does not hold it
    return label, problems


def _put(label: dict[str, Any], path: str, index: int, value: Any) -> None:
    """``items[].name`` with index 2 -> ``label["items"][2]["name"]``, growing the list as needed."""
    head, _, rest = path.partition("[]")
    items = label.setdefault(head, [])
    while len(items) <= index:
        items.append({} if rest else None)
    if rest:
        items[index][rest.lstrip(".")] = value
    else:
        items[index] = value


def _read(f: Field, written: str, problems: list[str]) -> Any:
    """A marked span's text as the schema's value, read as grounding reads it."""
    g = f.grounded
    if g.kind == "string":
        return normalize_whitespace(written) if g.whitespace == "normalize" else written
    if g.kind == "enum":
        member = next((m for m in g.members if writes(g, written, m)), None)
        if member is None:
            problems.append(f"{f.path}: {written!r} writes no member of {g.members}")
        return member
    if g.kind == "date":
        return _one(f, list(dates_in(written)), written, problems)
    if g.kind == "quantity":
        return _one(f, list(quantities_in(written, g.units)), written, problems)
    numbers = list(number_spans(written))
    negative = written.lstrip()[:1] in ("(", "-", "−", "–")
    numbers = [n for n in numbers if (n < 0) == negative] or numbers
    value = _one(f, numbers, written, problems)
    return None if value is None else _number(value, g.kind)


def _one(f: Field, readings: list[Any], written: str, problems: list[str]) -> Any:
    if not readings:
        problems.append(f"{f.path}: {written!r} writes no {f.grounded.kind}")
        return None
    if len(readings) > 1:
        problems.append(f"{f.path}: {written!r} reads as {', '.join(map(str, readings))}; the first is taken")
    return readings[0]


def _number(value: Decimal, kind: str) -> int | float:
    return int(value) if kind == "integer" or value == value.to_integral_value() else float(json_number(value))


def _typed_value(f: Field, typed: str, problems: list[str]) -> Any:
    """A typed value as the field's type: a grounded field's read as a marked span is, another's as JSON where it parses
    (``12``, ``true``), else as the text."""
    if f.grounded is not None:
        return _read(f, typed, problems)
    if f.schema.get("type") == "string":
        return typed
    try:
        return json.loads(typed)
    except json.JSONDecodeError:
        return typed


# -- commands -----------------------------------------------------------------------


def export_command(argv: list[str]) -> int:
    from ..eval.arguments import ArgumentParser
    from ..eval.sources import BASE_HELP, open_run
    from ..config import ConfigError, locate
    from ..data import write_json

    parser = ArgumentParser(
        prog="python -m fucina_jobs export labelstudio",
        description="Write a run as Label Studio tasks with predictions (one task per row), and its labelling config.",
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path, metavar="OUT.json")
    parser.add_argument("--config", type=Path, help="where to write the labelling config (default: labelstudio.xml beside OUT.json)")
    parser.add_argument("--base", type=Path, default=Path.cwd(), help=BASE_HELP)
    args = parser.parse_args(argv)
    try:
        run, sources = open_run(args.run_dir, args.base)
    except ConfigError as err:
        sys.stderr.write(f"export labelstudio: {err}\n")
        return 2
    if sources.schema is None:
        sys.stderr.write("export labelstudio: the run has no job JSON schema (a regex, Lark or per-row schema job); there are no fields to label\n")
        return 2
    fields = schema_fields(sources.schema, sources.fields)
    manifest = run.manifest or {}
    version = f"{manifest.get('name') or sources.config.name} version={manifest.get('version') or manifest.get('fingerprint', '')[:12]}"
    schema_path = str(locate(sources.config.constraint.json_schema, args.base).resolve())
    written = tasks(run.records, run.rejects, sources.texts, fields, version, schema_path, sources.changed, sources.layouts)
    config_path = args.config or args.out.parent / "labelstudio.xml"
    write_json(args.out, written)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(labeling_config(fields, pages=bool(sources.layouts)), encoding="utf-8")
    sys.stdout.write(f"wrote {args.out} ({len(written)} tasks, {len(run.records)} with predictions) and its labelling config {config_path}\n")
    return 0


def _named_schema(export: Any, name: str) -> Path:
    named = {(t.get("data") or {}).get("schema") for t in export if isinstance(t, dict)} if isinstance(export, list) else set()
    named.discard(None)
    if len(named) != 1:
        raise LabelStudioError(f"{name}: its tasks name {len(named)} schema files (data.schema); give the job's schema with --schema")
    path = Path(named.pop())
    if not path.is_file():
        raise LabelStudioError(f"{name}: its tasks name the schema {path}, which is not here; give the job's schema with --schema")
    return path


def import_command(argv: list[str]) -> int:
    from ..eval.arguments import ArgumentParser
    from ..grounding.declaration import GroundingError, grounded_fields

    parser = ArgumentParser(
        prog="python -m fucina_jobs import labelstudio",
        description="Turn a Label Studio JSON export's submitted annotations into gold JSONL for `eval eval.gold=...`.",
    )
    parser.add_argument("export", type=Path, metavar="EXPORT.json")
    parser.add_argument("gold", type=Path, metavar="GOLD.jsonl")
    parser.add_argument(
        "--schema",
        type=Path,
        help="the job's JSON schema, whose types and grounding say how to read each value (default: the file the tasks name, data.schema)",
    )
    args = parser.parse_args(argv)
    try:
        export = json.loads(args.export.read_text(encoding="utf-8"))
        schema_path = args.schema or _named_schema(export, args.export.name)
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
        lines, warnings = gold_lines(export, schema_fields(schema, grounded_fields(schema)), args.export.name)
    except (OSError, json.JSONDecodeError, GroundingError, LabelStudioError) as err:
        sys.stderr.write(f"import labelstudio: {err}\n")
        return 2
    for warning in warnings:
        log.warning("%s", warning)
    args.gold.parent.mkdir(parents=True, exist_ok=True)
    args.gold.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    sys.stdout.write(
        f"wrote {args.gold}: {len(lines)} annotated rows of {len(export)} tasks"
        + (f"; {len(warnings)} value(s) could not be read as written (see the warnings)" if warnings else "")
        + "\n"
    )
    return 0
