"""dataset.format=documents: PDF, Word and HTML files as rows, one a file, made here byte by byte (``pdf_bytes``).

A scanned page is an image-only page (text drawn by Pillow); its OCR needs the
``tesseract`` command (scripts/setup.sh installs it), and those tests skip
without it. Everything else decodes nothing: the end-to-end runs use the canned
engine. A job's scan hashes a document's bytes and parses nothing; the replica
that reads the row's slice parses it.
"""

from __future__ import annotations

import hashlib
import json
import io
import logging
import shutil
import sys
import zlib
from pathlib import Path

import pytest

from fucina_jobs.config import ConfigError, DatasetConfig, validate
from fucina_jobs.data import dataset, documents
from fucina_jobs.data.dataset import DatasetChanged, failed_rows, read_rows, read_slice, scan

from tests.helpers import REPO, assert_exactly_once, canned_job, read_dir

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="no tesseract: apt-get install tesseract-ocr")


def pdf_bytes(pages: list, encrypt: bool = False) -> bytes:
    """A PDF whose pages are text (a ``str``, a line each in Helvetica) or a scan (a grayscale Pillow image at 150 dpi, no text layer).

    ``encrypt`` adds a standard security handler whose user password is not empty, as a password-protected file has."""
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>", 3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
    kids, n = [], 4
    for page in pages:
        if isinstance(page, str):
            lines = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in page.split("\n")]
            content = ("BT /F1 12 Tf 14 TL 72 720 Td " + " T* ".join(f"({line}) Tj" for line in lines) + " ET").encode("latin-1")
            box, resources = "612 792", "/Font << /F1 3 0 R >>"
        else:
            pixels = zlib.compress(page.tobytes())
            width, height = page.width * 72 / 150, page.height * 72 / 150
            objects[n + 2] = _stream(
                f"/Type /XObject /Subtype /Image /Width {page.width} /Height {page.height} /ColorSpace /DeviceGray "
                "/BitsPerComponent 8 /Filter /FlateDecode",
                pixels,
            )
            content = f"q {width} 0 0 {height} 0 0 cm /Scan Do Q".encode()
            box, resources = f"{width} {height}", f"/XObject << /Scan {n + 2} 0 R >>"
        objects[n] = f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {box}] /Resources << {resources} >> /Contents {n + 1} 0 R >>".encode()
        objects[n + 1] = _stream("", content)
        kids.append(f"{n} 0 R")
        n += 3
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode()
    trailer = f"/Root 1 0 R /Size {n}"
    if encrypt:
        objects[n - 1] = b"<< /Filter /Standard /V 1 /R 2 /O <" + b"ab" * 32 + b"> /U <" + b"cd" * 32 + b"> /P -4 >>"
        trailer += f" /Encrypt {n - 1} 0 R /ID [<{'01' * 16}> <{'01' * 16}>]"
    out, offsets = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"), {}  # the comment of binary bytes that PDF writers put first
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref = len(out)
    out += f"xref\n0 {n}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offsets[k]:010d} 00000 n \n" if k in offsets else "0000000000 65535 f \n" for k in range(1, n)).encode()
    out += f"trailer\n<< {trailer} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _stream(entries: str, data: bytes) -> bytes:
    return f"<< {entries} /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"


def scan_of(text: str):
    """A page's image with ``text`` on it, as a scanner makes one: pixels, no text layer."""
    image_module = pytest.importorskip("PIL.Image")
    from PIL import ImageDraw, ImageFont

    image = image_module.new("L", (1200, 300), 255)
    ImageDraw.Draw(image).text((60, 100), text, fill=0, font=ImageFont.load_default(size=64))
    return image


def _rows(path, **kw):
    return read_rows(DatasetConfig(path=str(path), format="documents", **kw), Path(path).parent)


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "2024").mkdir(parents=True)
    (docs / "a.pdf").write_bytes(pdf_bytes(["Invoice A-1\nAcme GmbH", "Total 12.50 EUR"]))
    (docs / "2024" / "b.pdf").write_bytes(pdf_bytes(["Invoice B-2"]))
    return docs


def test_a_pdf_is_one_row_whose_pages_are_split_by_form_feeds(tmp_path):
    rows = _rows(_folder(tmp_path))
    assert [(r.id, r.problem) for r in rows] == [("2024/b", None), ("a", None)]  # ids: the path below the folder, no suffix
    assert rows[1].fields == {"id": "a", "text": "Invoice A-1\nAcme GmbH\fTotal 12.50 EUR", "ocr_pages": []}
    assert rows[0].fields["text"] == "Invoice B-2"


def test_one_file_a_glob_and_a_folder_name_the_rows_below_their_folder(tmp_path):
    docs = _folder(tmp_path)
    (docs / "notes.txt").write_text("a text file is a row as in text_dir")
    assert [r.id for r in _rows(docs / "a.pdf")] == ["a"]
    assert [r.id for r in _rows(docs / "**" / "*.pdf")] == ["2024/b", "a"]
    assert [r.id for r in _rows(docs / "*.pdf")] == ["a"]
    assert {r.id: r.fields["text"] for r in _rows(docs)}["notes"] == "a text file is a row as in text_dir"
    with pytest.raises(ConfigError, match=r"a\.pdf is a document, not jsonl: set dataset.format=documents"):
        read_rows(DatasetConfig(path=str(docs / "a.pdf")), tmp_path)
    as_text = {r.id: r.problem for r in read_rows(DatasetConfig(path=str(docs), format="text_dir"), tmp_path)}
    assert as_text["a"].startswith("a.pdf: a binary file, not text") and as_text["a"].endswith("; dataset.format=documents reads it")


def _digests(index) -> dict[str, str]:
    return dict(zip(index.table.column("id").to_pylist(), index.table.column("digest").to_pylist()))


def test_the_scan_parses_no_document_and_the_replica_parses_each_once_finding_its_rejects(tmp_path, monkeypatch):
    docs = _folder(tmp_path)
    (docs / "scan.pdf").write_bytes(pdf_bytes([scan_of("INVOICE 4711")]))
    (docs / "locked.pdf").write_bytes(pdf_bytes(["secret"], encrypt=True))
    (docs / "page.html").write_text("<p>Invoice H-5</p>")
    cfg = DatasetConfig(path=str(docs), format="documents", ocr="off")
    parsed: list[str] = []
    parse = dataset.read_document
    monkeypatch.setattr(dataset, "read_document", lambda f, name, ocr: parsed.append(name) or parse(f, name, ocr))
    with monkeypatch.context() as scanning:
        scanning.setitem(sys.modules, "pypdfium2", None)  # an import of PDFium fails: the scan must not need it
        index = scan(cfg, tmp_path)
    assert parsed == [] and index.first_usable.fields == {"id": "2024/b", "text": "", "ocr_pages": []}  # the fields by name
    piece = index.slice(index.table)
    assert [r.id for r in failed_rows(cfg, piece)] == ["2024/b", "a", "locked", "page", "scan"] and parsed == []  # nor does the driver

    rows = read_slice(cfg, piece)  # checked against the scan's digests, of the bytes it parsed
    assert parsed == ["2024/b.pdf", "a.pdf", "locked.pdf", "page.html", "scan.pdf"]
    assert {r.id: r.problem for r in rows if r.problem} == {
        "locked": "locked.pdf: an encrypted PDF that needs a password; save a copy without one",
        "scan": "scan.pdf: no text on any of its 1 pages; it may be a scan: dataset.ocr=auto reads it by OCR",
    }
    assert {r.id: sorted(r.fields) for r in rows if not r.problem} == {
        "2024/b": sorted(index.first_usable.fields),
        "a": ["id", "ocr_pages", "text"],
        "page": ["id", "text"],
    }


def test_the_digest_is_the_files_bytes_so_an_edit_is_found_even_where_the_text_stays(tmp_path):
    docs = _folder(tmp_path)
    cfg = DatasetConfig(path=str(docs), format="documents")
    index = scan(cfg, tmp_path)
    first = _digests(index)
    assert first["a"] == hashlib.sha256((docs / "a.pdf").read_bytes()).hexdigest()[:16]
    texts = [r.fields for r in read_rows(cfg, tmp_path)]
    assert [r.fields for r in read_slice(cfg, index.slice(index.table))] == texts

    (docs / "a.pdf").write_bytes((docs / "a.pdf").read_bytes() + b"% saved again\n")  # a comment after %%EOF: the same text
    assert [r.fields for r in read_rows(cfg, tmp_path)] == texts
    with pytest.raises(DatasetChanged, match="its content is not what the scan read"):
        read_slice(cfg, index.slice(index.table))
    again = scan(cfg, tmp_path)
    now = _digests(again)
    assert now["2024/b"] == first["2024/b"] and now["a"] != first["a"] and again.hash != index.hash

    (docs / "a.pdf").write_bytes(pdf_bytes(["Invoice A-1\nAcme GmbH", "Total 13.50 EUR"]))  # the replica would decode another row
    with pytest.raises(DatasetChanged, match="its content is not what the scan read"):
        read_slice(cfg, again.slice(again.table))


@pytest.mark.parametrize(
    "data, reason",
    [
        (pdf_bytes(["secret"], encrypt=True), "a.pdf: an encrypted PDF that needs a password; save a copy without one"),
        (pdf_bytes(["cut short"])[:300], "a.pdf: a damaged PDF, PDFium cannot open it (Data format error)"),
        (b"", "a.pdf: an empty file, not a PDF"),
        (b"<html>saved with the wrong name</html>", "a.pdf: not a PDF (no %PDF- header in its first bytes)"),
        (pdf_bytes([" "]), "a.pdf: no text on any of its 1 pages; it may be a scan: dataset.ocr=auto reads it by OCR"),
    ],
    ids=["encrypted", "cut_short", "empty", "not_a_pdf", "blank"],
)
def test_a_pdf_that_cannot_be_read_is_a_reject_with_its_reason(tmp_path, data, reason):
    (tmp_path / "a.pdf").write_bytes(data)
    (tmp_path / "b.pdf").write_bytes(pdf_bytes(["fine"]))
    rows = _rows(tmp_path / "*.pdf", ocr="off")
    assert [(r.id, r.problem) for r in rows] == [("a", reason), ("b", None)]


def test_pdfium_s_no_pages_is_said_so():
    import pypdfium2 as pdfium

    empty = io.BytesIO()
    pdfium.PdfDocument.new().save(empty)  # PDFium refuses to load its own zero-page file, with the error code "success"
    empty.seek(0)
    with pytest.raises(documents.Unreadable, match="^new.pdf: a PDF with no pages$"):
        documents.read(empty, "new.pdf")


@needs_tesseract
def test_scanned_pages_are_read_by_ocr_and_the_row_names_them(tmp_path, monkeypatch):
    (tmp_path / "scan.pdf").write_bytes(pdf_bytes([scan_of("INVOICE 4711"), "Total 12.50 EUR", scan_of("PAID 99.00")]))
    (row,) = _rows(tmp_path / "scan.pdf")
    assert row.problem is None and row.fields["ocr_pages"] == [1, 3]
    first, second, third = row.fields["text"].split("\f")
    assert "INVOICE 4711" in first and second == "Total 12.50 EUR" and "PAID 99.00" in third
    # one Tesseract run reads both scans; where they pass MAX_PIXELS together, a run each reads them the same
    monkeypatch.setattr(documents, "MAX_PIXELS", 1_500_000)  # a scan_of page at OCR_DPI is 1,000,000 pixels
    (apart,) = _rows(tmp_path / "scan.pdf")
    assert apart.fields == row.fields and apart.layout.words == row.layout.words
    (off,) = _rows(tmp_path / "scan.pdf", ocr="off")
    assert off.fields["text"] == "\fTotal 12.50 EUR\f" and off.fields["ocr_pages"] == []
    (tmp_path / "blank.pdf").write_bytes(pdf_bytes([" "]))
    (blank,) = _rows(tmp_path / "blank.pdf")
    assert blank.problem == "blank.pdf: no text on any of its 1 pages (OCR found none either)"


def test_without_tesseract_a_scanned_page_is_a_reject_that_says_how_to_install_it(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    documents._tesseract.cache_clear()
    try:
        (tmp_path / "scan.pdf").write_bytes(pdf_bytes(["Cover letter", scan_of("INVOICE 4711")]))
        (tmp_path / "only.pdf").write_bytes(pdf_bytes([scan_of("INVOICE 4712")]))
        with caplog.at_level(logging.WARNING, logger=documents.__name__):
            rows = _rows(tmp_path / "*.pdf")
        assert [r.problem for r in rows] == [
            f"{name}: page {page} has no text layer (a scan) and OCR needs tesseract, which is not installed: "
            "apt-get install tesseract-ocr (or dataset.ocr=off reads such pages as empty)"
            for name, page in (("only.pdf", 1), ("scan.pdf", 2))
        ]
        assert [r.getMessage() for r in caplog.records] == [
            "tesseract is not installed: scanned PDF pages cannot be read by OCR, and their documents are rejects; apt-get install tesseract-ocr"
        ]
        off = _rows(tmp_path / "*.pdf", ocr="off")
        assert [(r.problem, r.fields.get("text")) for r in off] == [
            ("only.pdf: no text on any of its 1 pages; it may be a scan: dataset.ocr=auto reads it by OCR", None),
            (None, "Cover letter\f"),
        ]
    finally:
        documents._tesseract.cache_clear()


def test_word_and_html_files_are_their_text(tmp_path):
    docx = pytest.importorskip("docx")
    word = docx.Document()
    word.add_heading("Invoice W-3", 1)
    table = word.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Total", "9.00 EUR"
    word.add_paragraph("Thank you")
    word.save(tmp_path / "w.docx")
    (tmp_path / "h.html").write_text(
        "<html><head><title>Tab</title><style>p {}</style></head><body><h1>Invoice&nbsp;H-4</h1>"
        "<p>From <b>Acme</b>\n   GmbH<br/>Berlin</p><table><tr><td>Total</td><td>7.00 EUR</td></tr></table>"
        "<script>var total = 0;</script></body></html>"
    )
    (tmp_path / "latin.htm").write_bytes('<meta charset="iso-8859-1"><p>Gebühr 5 EUR</p>'.encode("latin-1"))
    (tmp_path / "broken.docx").write_bytes(b"PK not a zip")
    (tmp_path / "wrong.html").write_bytes(b"<p>caf\xe9</p>")
    rows = {r.id: r for r in _rows(tmp_path)}
    assert rows["w"].fields["text"] == "Invoice W-3\nTotal\t9.00 EUR\nThank you"
    assert rows["h"].fields["text"] == "Invoice H-4\n\nFrom Acme GmbH\nBerlin\n\nTotal\t7.00 EUR"
    assert rows["latin"].fields["text"] == "Gebühr 5 EUR"
    assert rows["broken"].problem == "broken.docx: not a Word file python-docx can read (BadZipFile: File is not a zip file)"
    assert rows["wrong"].problem == "wrong.html: not valid UTF-8 text (byte 0xe9 at offset 6); save it as UTF-8"


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray")
def test_a_folder_of_pdfs_runs_exactly_once_and_a_rerun_decodes_the_edited_and_added_files(tmp_path):
    from fucina_jobs.pipeline.driver import Job

    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(pdf_bytes(["Invoice A-1 from Acme GmbH", "Total 12.50 EUR"]))
    (docs / "b.pdf").write_bytes(pdf_bytes(["Invoice B-2 from Acme GmbH"], encrypt=True))
    schema = tmp_path / "any.json"
    schema.write_text('{"type": "object"}')
    raw = canned_job(out, docs, "{}", constraint={"json_schema": str(schema)}, dataset={"format": "documents"}, runtime={"shard_size": 1})

    first = Job(validate(raw), REPO).run()
    assert first.ok and first.rows == 2 and first.shards == 2
    assert_exactly_once(out, {"a", "b"})
    (reject,) = read_dir(out, "rejects")
    assert reject["row_id"] == "b" and "b.pdf: an encrypted PDF that needs a password" in reject["error"]

    (docs / "b.pdf").write_bytes(pdf_bytes(["Invoice B-2 from Acme GmbH"]))  # saved again without a password
    (docs / "c.pdf").write_bytes(pdf_bytes(["Invoice C-3 from Acme GmbH"]))
    again = Job(validate(raw), REPO).run()
    assert again.ok and again.rows == 3 and again.shards == 3
    assert again.shards_resumed == 1 and again.shards_redone == 1  # a.pdf is as it was; b.pdf's shard holds a row it no longer has
    assert_exactly_once(out, {"a", "b", "c"})
    assert not read_dir(out, "rejects") and sorted(r["row_id"] for r in read_dir(out, "records")) == ["a", "b", "c"]


# -- where on the page ------------------------------------------------------------------

#: pdf_bytes' pages: US Letter (612 x 792 points), 12-point Helvetica, the first line's baseline 720 points up, 14 between lines.
LETTER, BASELINE, LEADING = (612, 792), 720, 14
CAP = 0.718 * 12  # Helvetica's capital height at 12 points


def _spanned(text: str, *values: str) -> dict[str, tuple[int, int]]:
    return {v: (text.index(v), text.index(v) + len(v)) for v in values}


def test_a_text_layer_value_s_box_is_where_the_pdf_draws_it_a_box_per_line_and_page(tmp_path):
    (tmp_path / "a.pdf").write_bytes(pdf_bytes(["Invoice A-1\nAcme GmbH", "Total 12.50 EUR"]))
    (row,) = _rows(tmp_path / "a.pdf")
    text = row.fields["text"]
    boxes = row.layout.boxes(text, _spanned(text, "Acme GmbH", "12.50 EUR", "A-1\nAcme", "GmbH\fTotal", "Total"))
    (acme,) = boxes["Acme GmbH"]
    baseline = BASELINE - LEADING  # the second line
    assert acme.page == 1 and acme.left == pytest.approx(72 / LETTER[0], abs=0.002)
    assert acme.top == pytest.approx((LETTER[1] - baseline - CAP) / LETTER[1], abs=0.002)
    assert acme.bottom == pytest.approx((LETTER[1] - baseline) / LETTER[1], abs=0.002)
    (total,), (amount,) = boxes["Total"], boxes["12.50 EUR"]
    assert amount.page == 2 and amount.left > total.right and amount.top == pytest.approx(total.top, abs=0.002)
    first, second = boxes["A-1\nAcme"]  # two lines: a box each, in reading order
    assert first.bottom < second.top and second.left == pytest.approx(acme.left) and first.left > acme.left
    assert [b.page for b in boxes["GmbH\fTotal"]] == [1, 2]

    image = _page_image(row.layout, 1, 144)  # the ink is inside the box
    width, height = image.size
    inside = image.crop((int(acme.left * width), int(acme.top * height), int(acme.right * width) + 1, int(acme.bottom * height) + 1))
    left_of = image.crop((0, int(acme.top * height), int(acme.left * width) - 2, int(acme.bottom * height) + 1))
    assert inside.getextrema()[0] < 64 and left_of.getextrema()[0] == 255


@pytest.mark.parametrize("rotation", [0, 90, 180])
def test_a_box_holds_its_value_s_ink_on_the_page_as_rendered_a_rotated_page_too(tmp_path, rotation):
    import pypdfium2 as pdfium
    from PIL import ImageOps

    pdf = pdfium.PdfDocument(pdf_bytes(["Acme GmbH"]))
    pdf[0].set_rotation(rotation)  # /Rotate: the page is shown turned, its text drawn as before
    pdf.save(tmp_path / "a.pdf")
    (row,) = _rows(tmp_path / "a.pdf")
    (box,) = row.layout.boxes(row.fields["text"], {"v": (0, 9)})["v"]
    image = _page_image(row.layout, 1, 144)
    width, height = image.size
    ink = ImageOps.invert(image).getbbox()  # every dark pixel of the page: the value's, as rendered
    assert (width > height) == (rotation == 90) and ((box.right - box.left) * width > (box.bottom - box.top) * height) == (rotation != 90)
    assert ink == pytest.approx((box.left * width, box.top * height, box.right * width, box.bottom * height), abs=3)


def _page_image(layout, page: int, dpi: int):
    from PIL import Image

    return Image.open(io.BytesIO(layout.render(page, dpi))).convert("L")


@needs_tesseract
def test_an_ocr_value_s_box_is_its_words_on_the_scan(tmp_path):
    (tmp_path / "scan.pdf").write_bytes(pdf_bytes([scan_of("INVOICE 4711"), "Total 12.50 EUR"]))
    (row,) = _rows(tmp_path / "scan.pdf")
    text = row.fields["text"]
    boxes = row.layout.boxes(text, _spanned(text, "INVOICE", "4711", "INVOICE 4711", "12.50"))
    (invoice,), (number,), (both,) = boxes["INVOICE"], boxes["4711"], boxes["INVOICE 4711"]
    # scan_of draws at (60, 100) of a 1200 x 300 image in a 64-pixel font
    assert invoice.page == 1 and invoice.left == pytest.approx(60 / 1200, abs=0.02) and 100 / 300 < invoice.bottom < 200 / 300
    assert number.left > invoice.right and (both.left, both.right) == (invoice.left, number.right)
    assert boxes["12.50"][0].page == 2


def test_word_and_html_rows_have_no_layout(tmp_path):
    (tmp_path / "h.html").write_text("<p>Invoice H-4</p>")
    (row,) = _rows(tmp_path / "h.html")
    assert row.problem is None and row.layout is None


GROUNDED = {
    "type": "object",
    "properties": {"vendor": {"type": "string", "x-grounded": True}, "total": {"type": "number", "x-grounded": {"amount": True}}},
    "required": ["vendor", "total"],
}


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray")
def test_a_pdf_row_s_record_carries_its_values_boxes_and_other_rows_records_are_as_they_were(tmp_path):
    from fucina_jobs.pipeline.driver import Job

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(pdf_bytes(["Invoice from Acme GmbH", "Total 12.50 EUR"]))
    (docs / "b.html").write_text("<p>Invoice from Acme GmbH</p><p>Total 12.50 EUR</p>")
    (tmp_path / "rows.jsonl").write_text('{"id": "b", "text": "Invoice from Acme GmbH\\n\\nTotal 12.50 EUR"}\n')
    (tmp_path / "schema.json").write_text(json.dumps(GROUNDED))
    answer, constraint = '{"vendor": "Acme GmbH", "total": 12.5}', {"json_schema": str(tmp_path / "schema.json")}
    as_documents = canned_job(tmp_path / "docs-out", docs, answer, constraint=constraint, dataset={"format": "documents"})
    as_text = canned_job(tmp_path / "text-out", tmp_path / "rows.jsonl", answer, constraint=constraint)
    assert Job(validate(as_documents), REPO).run().ok and Job(validate(as_text), REPO).run().ok

    records = {r["row_id"]: r for r in read_dir(tmp_path / "docs-out", "records")}
    boxes = dict(records["a"]["field_boxes"])
    assert sorted(boxes) == ["total", "vendor"] and [b["page"] for b in boxes["vendor"]] == [1] and [b["page"] for b in boxes["total"]] == [2]
    (vendor,) = boxes["vendor"]
    assert 0 < vendor["left"] < vendor["right"] < 1 and 0 < vendor["top"] < vendor["bottom"] < 1
    assert records["b"]["field_boxes"] is None  # an HTML file has no pages

    (text_record,) = read_dir(tmp_path / "text-out", "records")
    assert "field_boxes" not in text_record  # a job on anything but documents writes the columns it always wrote
    html = {k: v for k, v in records["b"].items() if k not in ("field_boxes", "run")}
    assert html == {k: v for k, v in text_record.items() if k != "run"}  # and the same row read from HTML is the same record
