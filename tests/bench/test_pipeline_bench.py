"""``bench pipeline --documents``: the PDFs it makes are the invoice's text on its pages, and its scans need OCR."""

import json
import shutil

import pytest

from fucina_jobs.bench.pipeline import _JOB, generate_documents, reading_speed
from fucina_jobs.data import read_document
from fucina_jobs.data.documents import Unreadable


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tesseract") is None, reason="no tesseract: apt-get install tesseract-ocr")
def test_the_made_pdfs_read_back_as_the_invoice_and_the_scans_have_no_text_layer(tmp_path):
    generate_documents(tmp_path, documents=2, pages=2, scans=1)
    first, second, scan = sorted(tmp_path.glob("*.pdf"))
    invoice = json.loads((_JOB / "inputs.jsonl").read_text().splitlines()[0])["text"]
    lines = "\n".join(" ".join(line.split()) for line in f"Ref r00000000. {invoice}".splitlines() if line.strip())
    with first.open("rb") as f:  # PDFium reads a run of spaces as one, and an empty line is no text
        assert read_document(f, first.name, "off").text == "\f".join([lines] * 2)
    with scan.open("rb") as f, pytest.raises(Unreadable, match="no text on any of its 2 pages; it may be a scan"):
        read_document(f, scan.name, "off")
    speed = reading_speed(tmp_path, documents=2)
    assert speed["read_pages_per_s"] > 0 and speed["ocr_pages_per_s"] > 0 and speed["ocr_cpu_s_per_page"] > 0
    assert speed["ocr_word_f1"] > 0.95  # OCR's words against the text the scan was made of: a page read, not noise
