"""``review RUN --html OUT.html``: one self-contained page to check a run by eye, no server and no network.

One card per row, least certain first (rejects, then records by their least
certain value): the source text with each value highlighted at its span and
coloured by its confidence, the values beside it, the flags, and for a reject
its reason and raw output. The data is embedded once (gzipped JSON); a small script
(``page.html``) filters it and renders one page of cards at a time, so
10,000 records open as fast as 20 (``docs/REVIEW.md``).

A PDF row's card carries the pages its values are on, rendered at ``PAGE_DPI``
as PNG, and each value's boxes (``field_boxes``: fractions of the page), which
the script draws over its page beside the text.

Spans are stored as Python (code point) offsets; the page's script slices
JavaScript strings, which count UTF-16 units, so offsets are converted here
for texts with characters beyond the Basic Multilingual Plane.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import Any, Mapping

from ..config import ConfigError
from ..data import atomic
from ..confidence import leaves
from ..eval.runs import Run
from ..eval.sources import Sources, read_sources

_TEMPLATE = "page.html"
_DATA = "/*REVIEW_DATA*/"
#: Dots per inch of a page shown beside its text: a page's own size on a screen (10-point text stays legible), at
#: 20-45 KB a page of text in grayscale PNG (at 150 dpi, 4 times that; each card of a PDF row carries its pages).
PAGE_DPI = 72
#: The edges of a box as ``field_boxes`` holds them.
_EDGES = ("left", "top", "right", "bottom")
#: True in the page once its data is read and the first cards are drawn (for a driven browser).
READY = "document.documentElement.dataset.ready === 'true'"


def page_data(run: Run, sources: Sources) -> dict[str, Any]:
    """The page's JSON: the run's header and one card per row, least certain first."""
    records = sorted(run.records, key=lambda r: (r.get("record_confidence") is None, r.get("record_confidence") or 0.0, str(r["row_id"])))
    rejects = sorted(run.rejects, key=lambda r: (str(r.get("reason")), str(r["row_id"])))
    manifest = run.manifest or {}
    return {
        "run": {
            "name": manifest.get("name"),
            "path": str(run.path),
            "version": manifest.get("version"),
            "status": manifest.get("status"),
            "ended": manifest.get("ended"),
            "model": sources.config.model.source,
            "dataset": sources.config.dataset.path,
            "records": len(run.records),
            "rejects": len(run.rejects),
        },
        "cards": [_reject_card(r, sources) for r in rejects] + [_record_card(r, sources) for r in records],
    }


def _record_card(record: Mapping[str, Any], sources: Sources) -> dict[str, Any]:
    row_id = str(record["row_id"])
    text = sources.texts.get(row_id, "")
    units = _utf16_offsets(text)
    confidence = dict(record.get("field_confidence_mean") or [])
    spans = {} if row_id in sources.changed else dict(record.get("field_spans") or [])
    layout = None if row_id in sources.changed else sources.layouts.get(row_id)
    boxes = dict(record.get("field_boxes") or []) if layout is not None else {}
    values = []
    for path, literal in _literals(record["text"]).items():
        value = {"f": path, "v": _shown(literal), "c": _rounded(confidence.get(path, record.get("record_confidence") if path == "" else None))}
        if path in spans and spans[path][1] <= len(text):
            value["s"], value["e"] = (units[i] for i in spans[path]) if units else spans[path]
        if path in boxes:
            value["b"] = [[box["page"], *(round(box[edge], 4) for edge in _EDGES)] for box in boxes[path]]
        values.append(value)
    card = {
        "id": row_id,
        "conf": _rounded(record.get("record_confidence")),
        "flags": list(record.get("flags") or []),
        "text": text,
        "values": values,
        "changed": row_id in sources.changed,
    }
    if boxes:
        card["pages"] = [_page(layout, number) for number in sorted({box["page"] for found in boxes.values() for box in found})]
    return card


def _page(layout: Any, number: int) -> dict[str, Any]:
    """Page ``number`` of a PDF row as the card shows it: its PNG in base64, and its size in pixels."""
    png = layout.render(number, PAGE_DPI)
    width, height = (int.from_bytes(png[k : k + 4], "big") for k in (16, 20))  # the PNG header's IHDR chunk
    return {"n": number, "w": width, "h": height, "png": base64.b64encode(png).decode("ascii")}


def _reject_card(reject: Mapping[str, Any], sources: Sources) -> dict[str, Any]:
    row_id = str(reject["row_id"])
    return {
        "id": row_id,
        "conf": None,
        "flags": [],
        "text": sources.texts.get(row_id, ""),
        "values": [],
        "reject": {"reason": reject.get("reason"), "error": reject.get("error"), "raw": reject.get("text") or ""},
    }


def _rounded(confidence: float | None) -> float | None:
    """Four decimals: the page shows three, and 10,000 records' full doubles would add a megabyte."""
    return None if confidence is None else round(confidence, 4)


def _literals(output: str) -> dict[str, str]:
    """Each JSON leaf of the output by path, as written; an output that is not JSON (regex, Lark) is one value, path ``""``."""
    try:
        return {leaf.path: output[leaf.start : leaf.end] for leaf in leaves(output)}
    except (ValueError, RecursionError):
        return {"": output}


def _shown(literal: str) -> Any:
    """A JSON leaf as its value (a string's characters, a number as a number); a regex's or Lark's output as its text."""
    try:
        return json.loads(literal)
    except json.JSONDecodeError:
        return literal


def _utf16_offsets(text: str) -> list[int] | None:
    """Code point index -> UTF-16 index, or None when the two agree (no character beyond U+FFFF)."""
    if all(ord(c) <= 0xFFFF for c in text):
        return None
    return list(accumulate((2 if ord(c) > 0xFFFF else 1 for c in text), initial=0))


def render(data: dict[str, Any]) -> str:
    """The page: the template with the data embedded once, as gzipped JSON in base64.

    A quarter of the bytes for the browser to read and tokenise (``docs/REVIEW.md`` has the sizes at
    10,000 records); the page inflates it with the browser's own ``DecompressionStream``, and
    base64 holds no character that could close the script."""
    template = resources.files(__package__).joinpath(_TEMPLATE).read_text(encoding="utf-8")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return template.replace(_DATA, base64.b64encode(gzip.compress(payload, 6, mtime=0)).decode("ascii"), 1)


def embedded(page: str) -> dict[str, Any]:
    """The data a rendered page holds (for checks without a browser)."""
    payload = page.split('<script id="review-data" type="application/gzip+base64">', 1)[1].split("</script>", 1)[0]
    return json.loads(gzip.decompress(base64.b64decode(payload)))


def write_page(run: Run, sources: Sources, out: Path) -> int:
    """Write the page to ``out``; return its size in bytes."""
    page = render(page_data(run, sources)).encode("utf-8")
    atomic(out, lambda f: f.write(page))
    return len(page)


def page_command(run: Run, base: Path, out: Path) -> int:
    """``review RUN --html OUT``: the page, or a one-line error when the run's documents cannot be read."""
    try:
        sources = read_sources(run, base)
    except ConfigError as err:
        sys.stderr.write(f"review: {err}\n")
        return 2
    size = write_page(run, sources, out)
    sys.stdout.write(f"wrote {out} ({size / 1e6:.2f} MB): {len(run.records)} records, {len(run.rejects)} rejects\n")
    return 0
