"""``python -m fucina_jobs bench pipeline``: the data path alone, at scale, with the canned engine.

It generates ``--rows`` jsonl rows (about 700 bytes each: an invoice text under
a new id), runs the invoice job over them with ``engine=canned`` (every row gets
a canned, schema-valid record at once), and reports what the pipeline costs:
rows/s over the run, the driver's peak RSS, the files written per kind, and
whether every row ended exactly once. The job runs in this process, so this
process's peak RSS is the driver's.

``--documents N`` makes the rows PDF files instead (``dataset.format=documents``): N of the invoice's text on
``--pages`` pages each, and ``--scans`` more of the same pages rendered to images (no text layer, read by
OCR); the table adds the pages per second of the reader and of OCR, each timed on its own in this process, OCR's
CPU seconds a page (Tesseract's own, which a replica's decoder shares the cores with), and the F1 of OCR's words
against the words the scanned pages were made of.

``--kills N`` runs the job as a child process instead and ``kill -9``s it N
times, each once a random number of shards has committed, then reruns it to
the end: every row must end exactly once, and every shard committed before a
kill must still be the same file (no committed shard redone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..config import SHIPPED
from ..data import RunDir

_JOB = SHIPPED / "jobs" / "invoices"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pipeline",
        help="the data path alone (canned engine): rows/s, driver RSS, files per kind",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=100_000, help="generated jsonl rows (default 100,000)")
    p.add_argument("--replicas", type=int, default=2, help="runtime.replicas (default 2)")
    p.add_argument("--shard-size", type=int, default=None, help="runtime.shard_size (default: the job's default)")
    p.add_argument("--dir", type=Path, default=None, help="where the input and the run go (default: a temporary directory, deleted after)")
    p.add_argument("--kills", type=int, default=0, help="kill -9 the driver this many times at random points, then finish the run")
    p.add_argument("--seed", type=int, default=0, help="where the kills strike (default 0)")
    p.add_argument(
        "--grounded", action="store_true", help="keep the schema's x-grounded fields: each row then builds a grammar and checks its values"
    )
    p.add_argument("--documents", type=int, default=0, help="rows as this many PDF files (dataset.format=documents) instead of jsonl")
    p.add_argument("--pages", type=int, default=2, help="pages of each PDF (default 2)")
    p.add_argument("--scans", type=int, default=2, help="with --documents, this many PDFs more of scanned pages, read by OCR (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def generate(path: Path, rows: int) -> None:
    """``rows`` jsonl rows of about 700 bytes: the first shipped invoice under new ids.

    One document for every row, so the canned record (its gold label) is
    grounded in each and every row ends as a record."""
    text = json.loads((_JOB / "inputs.jsonl").read_text().splitlines()[0])["text"]
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"r{i:08d}", "text": f"Ref r{i:08d}. {text}"}) + "\n")


#: Dots per inch of a made scan: an office scanner's usual setting.
_SCAN_DPI = 200
#: A made PDF's page: US Letter in points, a line of 10-point Courier every 12 points from 72 points in from the top left.
_LETTER, _MARGIN, _FONT, _LEADING = (612.0, 792.0), 72.0, 10.0, 12.0


def generate_documents(folder: Path, documents: int, pages: int, scans: int) -> None:
    """``documents`` PDFs of the first shipped invoice under new ids, ``pages`` pages each, and ``scans`` more whose
    pages are those pages rendered to grayscale images at ``_SCAN_DPI``, with no text layer: scans for OCR."""
    import pypdfium2 as pdfium

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(documents + scans):
        pdf = _text_pdf([_page_text(i)] * pages)
        if i >= documents:
            pdf = _scanned(pdf, pdfium)
        pdf.save(folder / f"r{i:08d}.pdf")
        pdf.close()


def _page_text(i: int) -> str:
    """Each page of the ``i``-th made PDF: the first shipped invoice under the id ``r{i:08d}``."""
    text = json.loads((_JOB / "inputs.jsonl").read_text().splitlines()[0])["text"]
    return f"Ref r{i:08d}. {text}"


def _text_pdf(pages: list[str]) -> Any:
    """A PDF of ``pages``, a line of text per line, in a standard font (the text layer a word processor writes)."""
    import ctypes

    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    pdf = pdfium.PdfDocument.new()
    for text in pages:
        page = pdf.new_page(*_LETTER)
        for n, line in enumerate(text.splitlines()):
            obj = raw.FPDFPageObj_NewTextObj(pdf, b"Courier", _FONT)
            wide = ctypes.create_string_buffer(line.encode("utf-16-le") + b"\0\0")
            raw.FPDFText_SetText(obj, ctypes.cast(wide, ctypes.POINTER(raw.FPDF_WCHAR)))
            raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, _MARGIN, _LETTER[1] - _MARGIN - n * _LEADING)
            raw.FPDFPage_InsertObject(page, obj)
        page.gen_content()
        page.close()
    return pdf


def _scanned(pdf: Any, pdfium: Any) -> Any:
    """A PDF whose pages are ``pdf``'s rendered to grayscale images: what a scanner gives."""
    scan = pdfium.PdfDocument.new()
    for k in range(len(pdf)):
        source = pdf[k]
        width, height = source.get_size()
        bitmap = source.render(scale=_SCAN_DPI / 72, grayscale=True)
        page = scan.new_page(width, height)
        image = pdfium.PdfImage.new(scan)
        image.set_bitmap(bitmap)
        image.set_matrix(pdfium.PdfMatrix().scale(width, height))
        page.insert_obj(image)
        page.gen_content()
        page.close()
        source.close()
    pdf.close()
    return scan


def reading_speed(folder: Path, documents: int) -> dict[str, Any]:
    """Pages per second of the text reader (the first ``documents`` files) and of OCR (the rest), in this process; OCR's
    CPU seconds a page, and its words' F1 against the text each scanned page was made of."""
    files = sorted(folder.glob("*.pdf"))
    text, text_s, _ = _read(files[:documents])
    scans, ocr_s, ocr_cpu = _read(files[documents:])
    f1s = [_word_f1(page, _page_text(i)) for i, pages in scans.items() for page in pages]
    return {
        "read_pages_per_s": round(sum(map(len, text.values())) / text_s, 2) if text else None,
        "ocr_pages_per_s": round(len(f1s) / ocr_s, 2) if f1s else None,
        "ocr_cpu_s_per_page": round(ocr_cpu / len(f1s), 2) if f1s else None,
        "ocr_word_f1": round(sum(f1s) / len(f1s), 4) if f1s else None,
    }


def _read(paths: list[Path]) -> tuple[dict[int, list[str]], float, float]:
    """Each made PDF's pages as read, by its number; the wall seconds and the CPU seconds of the children (OCR's)."""
    from ..data import read_document

    read, cpu, start = {}, _children_cpu(), time.perf_counter()
    for path in paths:
        with path.open("rb") as f:
            read[int(path.stem[1:])] = read_document(f, path.name).text.split("\f")
    return read, time.perf_counter() - start, _children_cpu() - cpu


def _children_cpu() -> float:
    """CPU seconds of this process's finished children: the tesseract commands OCR runs."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _word_f1(read: str, truth: str) -> float:
    """F1 of the words (split at white space) of ``read`` against those of ``truth``, each word counted as often as it occurs."""
    got, want = Counter(read.split()), Counter(truth.split())
    hits = sum((got & want).values())
    return 2 * hits / (sum(got.values()) + sum(want.values())) if got or want else 1.0


def job_config(data: Path, out: Path, replicas: int, shard_size: int | None, grounded: bool = False) -> dict[str, Any]:
    """The invoice job on the canned engine; without ``grounded``, its schema minus ``x-grounded`` (written beside ``data``).

    A model spends about a second a row, so the grounded grammar and checks (milliseconds
    a row, measured by ``bench decode``) vanish beside it; here they would be all there is."""
    record = json.loads((_JOB / "gold.jsonl").read_text().splitlines()[0])["label"]
    runtime = {"replicas": replicas} | ({"shard_size": shard_size} if shard_size else {})
    schema = SHIPPED / "schemas" / "invoice.json"
    if not grounded:
        schema = data.with_name("schema.json")
        schema.write_text(json.dumps(_ungrounded(json.loads((SHIPPED / "schemas" / "invoice.json").read_text()))))
    return {
        "name": "bench_pipeline",
        "engine": {"name": "canned", "output": json.dumps(record, separators=(",", ":"))},
        "constraint": {"json_schema": str(schema)},
        "dataset": {"path": str(data)},
        "prompt": {"system": "@jobs/invoices/system.txt", "template": "@jobs/invoices/template.txt"},
        "runtime": runtime,
        "output": {"dir": str(out)},
    }


def _ungrounded(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _ungrounded(v) for k, v in schema.items() if k != "x-grounded"}
    return [_ungrounded(v) for v in schema] if isinstance(schema, list) else schema


def run_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    from ..config import validate
    from ..pipeline import Job

    work = Path(tempfile.mkdtemp(prefix="fucina-bench-pipeline-")) if args.dir is None else args.dir
    try:
        work.mkdir(parents=True, exist_ok=True)
        out, rows = work / "out", args.rows
        if args.documents:
            data, rows = work / "docs", args.documents + args.scans
            generate_documents(data, args.documents, args.pages, args.scans)
        else:
            data = work / "in.jsonl"
            generate(data, rows)
        raw = job_config(data, out, args.replicas, args.shard_size, args.grounded)
        if args.documents:
            raw["dataset"]["format"] = "documents"
        if args.kills:
            return _killed_runs(args, raw, work, rows)
        cfg = validate(raw)
        start = time.perf_counter()
        summary = Job(cfg, work).run()
        wall = time.perf_counter() - start
        return {
            "rows": rows,
            "replicas": args.replicas,
            "shard_size": cfg.runtime.shard_size,
            "grounded": args.grounded,
            "wall_s": round(wall, 1),
            "rows_per_s": round(rows / wall, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "files": _files(out),
            "records": summary.records,
            "rejects": summary.rejects,
            "exactly_once": _exactly_once(out, rows),
        } | (reading_speed(data, args.documents) if args.documents else {})
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def _files(out: Path) -> dict[str, int]:
    run_dir = RunDir.open(out)
    return {kind: sum(f.key is not None for f in run_dir.shard_files(kind)) for kind in ("records", "rejects", "stats")}


def _committed(out: Path) -> dict[str, int]:
    """Each committed shard's stats file (every partition) and its modification time."""
    return {f.path: os.stat(f.path).st_mtime_ns for f in RunDir.open(out).shard_files("stats") if f.key is not None}


def _exactly_once(out: Path, rows: int) -> bool:
    run_dir = RunDir.open(out)
    ids = [run_dir.read(kind, ["row_id"]).column("row_id") for kind in ("records", "rejects")]
    return sum(len(c) for c in ids) == len(set().union(*(c.to_pylist() for c in ids))) == rows


def _killed_runs(args: argparse.Namespace, raw: dict[str, Any], work: Path, rows: int) -> dict[str, Any]:
    """Kill the driver at random commit counts, rerun to the end, and check nothing committed was redone."""
    from ..config import validate

    config, out = work / "job.json", Path(raw["output"]["dir"])
    config.write_text(json.dumps(raw))
    shards = -(-rows // validate(raw).runtime.shard_size)
    points = sorted(random.Random(args.seed).sample(range(1, shards), args.kills))
    command = [sys.executable, "-c", "import sys; from fucina_jobs.bench.pipeline import run_job; run_job(sys.argv[1])", str(config)]
    committed: dict[str, int] = {}
    for n, point in enumerate(points):
        with (work / f"driver-{n}.log").open("w") as log:
            child = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=log)
        while len(_committed(out)) < point and child.poll() is None:
            time.sleep(0.05)
        if child.poll() is not None:
            raise RuntimeError(f"the driver exited ({child.returncode}) before {point} shards committed; see {work / f'driver-{n}.log'}")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        time.sleep(5)  # the replicas of a dead driver die with it; give them time to
        committed |= _committed(out)
    start = time.perf_counter()
    final = subprocess.run(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    now = _committed(out)
    redone = [path for path, mtime in committed.items() if now.get(path) != mtime]
    return {
        "rows": rows,
        "shards": shards,
        "killed_after_commits": points,
        "committed_before_last_run": len(committed),
        "last_run_exit": final.returncode,
        "last_run_s": round(time.perf_counter() - start, 1),
        "committed_shards_redone": len(redone),
        "files": _files(out),
        "exactly_once": _exactly_once(out, rows),
    }


def run_job(config: str) -> None:
    """The child process of ``--kills``: run the job a JSON file describes."""
    from ..config import validate
    from ..pipeline import Job

    Job(validate(json.loads(Path(config).read_text())), Path.cwd()).run()


def format_pipeline(result: dict[str, Any]) -> str:
    return "".join(f"{key:<20}{value}\n" for key, value in result.items())


def main(args: argparse.Namespace) -> int:
    result = run_pipeline(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_pipeline(result))
    return 0 if result["exactly_once"] and not result.get("committed_shards_redone") else 1
