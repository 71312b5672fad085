"""Document files as text: a PDF, Word or HTML file is one row's text, or one reason why it cannot be.

``read`` gives a file's text, or raises ``Unreadable`` with a one-line reason that names the file (an
encrypted, damaged or empty PDF, a Word file that is not one, HTML that is not in its charset, a file that
holds no text): the dataset makes that reason the row's reject, so a document never stops a run and never
becomes a silently empty row. A job's scan reads none: it hashes each file's bytes and knows its row's fields by
name (``unread``), and the replica that decodes the row reads it.

- **PDF** through pypdfium2, the bindings of PDFium (Chrome's PDF engine): Apache-2.0/BSD like this
  package, wheels that carry the library (no system package), maintained, and fast (C++: 1,100 pages of
  text a second on one core here; pdfminer.six is pure Python and slower, PyMuPDF is AGPL). The text layer is
  read page by page in the order PDFium gives it, pages joined by form feeds (``\\f``): page k is
  ``text.split("\\f")[k - 1]``. PDFium reads the file's bytes through its handle as it needs, and each page
  is closed before the next loads, so a document of hundreds of pages is parsed and rendered one page at a time.
- **Scanned pages**: a page whose text layer holds no text is rendered in grayscale at 250 dpi (fewer
  dots on a page too large for ``MAX_PIXELS``) and read by Tesseract, the ``tesseract`` command of
  Debian's ``tesseract-ocr``, a run for a few pages, when ``dataset.ocr=auto``; the row's ``ocr_pages`` field lists those pages
  (from 1). Where tesseract is not installed, such a page makes its document a reject that says how to
  install it (and the log says so once); ``dataset.ocr=off`` reads such a page as empty.
- **Word** (``.docx``) through python-docx: the body's paragraphs and tables in their order, a table's
  cells split by tabs and its rows by lines. (A ``.doc`` file is not Word's XML: it is read as text,
  which rejects it as binary.)
- **HTML** (``.html``, ``.htm``) through the standard library's ``html.parser``: the text a browser
  shows, blocks on lines of their own, without scripts, styles and the title; UTF-8, or the charset its
  ``<meta>`` declares.

**Where on the page.** A PDF's ``Document`` carries a ``Layout``: the file's bytes (already in memory, read once),
the offset where each page starts in the text, and each OCR'd page's words with their boxes. ``Layout.boxes`` finds the
boxes of a record's spans when its shard is written, on the replica that parsed the row: PDFium computes a text-layer
span's rectangles, a line each (``FPDFText_CountRects``), from the one page the span is on, so nothing per character
is kept for a document of hundreds of pages; an OCR'd span's boxes are the union, per line, of the words it covers.
Boxes are fractions of the page as rendered (top left 0, 0): what an image of the page at any resolution, CSS and
Label Studio's percentages take as they are, where a PDF's points would need each page's size, origin (bottom left),
crop box and rotation to be drawn.

The libraries are imported at the first document: a job on JSON Lines never loads PDFium.
"""

from __future__ import annotations

import codecs
import functools
import html.parser
import io
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Iterator, Literal, Mapping, NamedTuple

log = logging.getLogger(__name__)

#: Dots per inch a page is rendered at for OCR. Why 250: Tesseract's cost grows with the pixels (a blank A4 page
#: takes 0.4 s of CPU at 300 dpi) while its recognizer scales each line to one height, so fewer dots read as well
#: down to 250. Word F1 against the text layer, side by side at 300 / 250 / 225 / 200 dpi, of 30 real pages rendered
#: from it (contracts; invoices in 10- and 7-point type): 0.9966 / 0.9971 / 0.9956 / 0.9923, for 2.07 / 1.83 /
#: 1.70 / 1.60 s of CPU a page. Of scans (pages made images at 200 and 300 dpi) read at 300 / 250: 48 invoice pages
#: 0.914 / 0.917 (0.86 / 0.68 s a page), 24 contract pages each within 0.01. Below 250 values are misread (50% as
#: 60% at 225; small print 0.979 at 200). Tesseract's options changed neither cost nor text
#: (tessedit_do_invert=0, --oem 1, --psm 4) or saved 6% and merged columns (--psm 6).
OCR_DPI = 250
#: The most pixels a page is rendered with for OCR, a byte each: A4 at 250 dpi is 6 million, and a
#: poster-sized page gets fewer dots rather than a gigabyte's bitmap.
MAX_PIXELS = 40_000_000
#: Seconds Tesseract may spend on one page before the document is a reject.
OCR_TIMEOUT = 120
INSTALL_TESSERACT = "apt-get install tesseract-ocr"

Ocr = Literal["auto", "off"]


class Unreadable(ValueError):
    """A document that cannot be read: the one-line reason, naming the file, that is its row's reject."""


class Box(NamedTuple):
    """One line of a value on its page: the page (from 1), and the box in fractions of the page as rendered."""

    page: int
    left: float
    top: float
    right: float
    bottom: float


class Word(NamedTuple):
    """A word Tesseract read: where it is in its page's text (``start``, ``end``), its line on the page, its box."""

    start: int
    end: int
    line: int
    box: tuple[float, float, float, float]  # left, top, right, bottom, fractions of the page


@dataclass(frozen=True)
class Document:
    text: str
    fields: dict[str, Any] = field(default_factory=dict)  # what else its row carries: a PDF's ocr_pages
    layout: Layout | None = None  # a PDF's: where its text lies on its pages


def is_document(name: str) -> bool:
    """Whether ``read`` reads the file ``name`` (by its suffix); any other file of a folder of documents is text."""
    return PurePosixPath(name).suffix.lower() in _READERS


def unread(name: str) -> Document:
    """The row ``read`` gives the file ``name`` before any of it is read: its fields by name, their values empty
    (a PDF's ``ocr_pages`` too), so that the scan checks the prompt template against a document it does not read."""
    return Document("", {"ocr_pages": []} if PurePosixPath(name).suffix.lower() == ".pdf" else {})


def read(f: BinaryIO, name: str, ocr: Ocr = "auto") -> Document:
    """The text of the document ``f`` (seekable bytes), read by the suffix of ``name``, which messages name."""
    document = _READERS[PurePosixPath(name).suffix.lower()](f, name, ocr)
    if not document.text.strip():
        raise Unreadable(f"{name}: holds no text")
    return document


# -- PDF ------------------------------------------------------------------------

#: PDFium is not thread-safe, and a replica reads its shards in threads: one PDFium call at a time in a process
#: (OCR runs outside it).
_PDFIUM = threading.Lock()


def _pdf(f: BinaryIO, name: str, ocr: Ocr) -> Document:
    head = f.read(1024)
    if not head:
        raise Unreadable(f"{name}: an empty file, not a PDF")
    if b"%PDF-" not in head:
        raise Unreadable(f"{name}: not a PDF (no %PDF- header in its first bytes)")
    f.seek(0)
    with _PDFIUM:
        pdf = _open(f, name)
        count = len(pdf)
    pages, scans, read = [], [], {}
    try:
        for number in range(1, count + 1):
            with _PDFIUM:
                text, scan = _page(pdf, number, name, ocr)
            pages.append(text)
            if scan is not None:
                if scans and not _joins(scans, scan):
                    read |= _ocr(scans, name)
                    scans = []
                scans.append((number, scan))
        if scans:
            read |= _ocr(scans, name)
    finally:
        with _PDFIUM:
            pdf.close()
    for number, (text, _) in read.items():
        pages[number - 1] = text
    words = {number: found for number, (_, found) in read.items()}
    if not any(page.strip() for page in pages):
        why = " (OCR found none either)" if words else "; it may be a scan: dataset.ocr=auto reads it by OCR"
        raise Unreadable(f"{name}: no text on any of its {len(pages)} pages{why}")
    f.seek(0)
    starts = tuple(accumulate((len(page) + 1 for page in pages[:-1]), initial=0))
    return Document("\f".join(pages), {"ocr_pages": sorted(words)}, Layout(f.read(), starts, words))


def _open(f: BinaryIO, name: str) -> Any:
    """The PDF, read through ``f`` as PDFium asks.

    PDFium keeps the last error of any load, and pypdfium2 refuses a document
    without pages with that error, whatever it was: a load of no file first
    sets it to ``FPDF_ERR_FILE``, which a stream's load never sets, so a
    refusal that still says so is a document without pages."""
    import pypdfium2 as pdfium

    pdfium.raw.FPDF_LoadDocument(b"", None)
    try:
        return pdfium.PdfDocument(f)
    except pdfium.PdfiumError as err:
        if err.err_code == pdfium.raw.FPDF_ERR_FILE:
            raise Unreadable(f"{name}: a PDF with no pages") from None
        if err.err_code == pdfium.raw.FPDF_ERR_PASSWORD:
            raise Unreadable(f"{name}: an encrypted PDF that needs a password; save a copy without one") from None
        raise Unreadable(f"{name}: a damaged PDF, PDFium cannot open it ({_pdfium_reason(err)})") from None


def _page(pdf: Any, number: int, name: str, ocr: Ocr) -> tuple[str, Scan | None]:
    """Page ``number``'s text, or for a page without a text layer that OCR is to read, its image; the page is
    closed before the next loads."""
    import pypdfium2 as pdfium

    try:
        page = pdf[number - 1]
    except pdfium.PdfiumError as err:
        raise Unreadable(f"{name}: page {number} is damaged, PDFium cannot load it ({_pdfium_reason(err)})") from None
    try:
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
        finally:
            textpage.close()
        if text.strip() or ocr == "off":
            return _plain(text), None
        return "", _image(page)
    finally:
        page.close()


class Scan(NamedTuple):
    """A page to read by OCR: its pixels as PGM (no encoding to pay for), their dots per inch, its width and height."""

    image: bytes
    dpi: int
    size: tuple[int, int]


def _image(page: Any) -> Scan:
    """The page rendered in grayscale at ``OCR_DPI``, or fewer dots where that would pass ``MAX_PIXELS``."""
    width, height = page.get_size()  # in points, 1/72 inch
    scale = min(OCR_DPI / 72, (MAX_PIXELS / max(width * height, 1.0)) ** 0.5)
    bitmap = page.render(scale=scale, grayscale=True)
    try:
        pixels = bitmap.to_numpy()
        height, width = pixels.shape
        return Scan(b"P5\n%d %d\n255\n" % (width, height) + pixels.tobytes(), round(scale * 72), (width, height))
    finally:
        bitmap.close()


def _pdfium_reason(err: Exception) -> str:
    """PDFium's own words in a ``PdfiumError`` ("Failed to load document (PDFium: Data format error)." -> "Data format error")."""
    found = re.search(r"\(PDFium: ([^)]*)\)", str(err))
    return found.group(1) if found else str(err).splitlines()[0]


def _plain(text: str) -> str:
    """A page's text with ``\\n`` line ends and no form feed, which separates pages."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")


# -- OCR ------------------------------------------------------------------------


def _joins(scans: list[tuple[int, Scan]], scan: Scan) -> bool:
    """Whether ``scan`` joins the pages of one Tesseract run: at their dots per inch, all of them within ``MAX_PIXELS``.

    Why a run of pages: each run loads Tesseract's model again, 0.08 s of CPU, an eighth of a sparse page's OCR
    at 250 dpi (0.62 s a page read one a run, 0.54 in runs of 6); ``MAX_PIXELS``, the most one page has, bounds the
    images a run holds in memory (6 A4 pages at 250 dpi, 36 MB), so a scan of hundreds of pages is read a run at a time."""
    pixels = sum(s.size[0] * s.size[1] for _, s in scans) + scan.size[0] * scan.size[1]
    return scan.dpi == scans[0][1].dpi and pixels <= MAX_PIXELS


def _ocr(scans: list[tuple[int, Scan]], name: str) -> dict[int, tuple[str, tuple[Word, ...]]]:
    """The pages (number, image) read by one Tesseract run: by number, each one's text, and each word's place in
    that text and box."""
    tesseract = _tesseract()
    numbers = [number for number, _ in scans]
    pages = f"page {numbers[0]}" if len(numbers) == 1 else f"pages {', '.join(map(str, numbers))}"
    if tesseract is None:
        raise Unreadable(
            f"{name}: page {numbers[0]} has no text layer (a scan) and OCR needs tesseract, which is not installed: "
            f"{INSTALL_TESSERACT} (or dataset.ocr=off reads such pages as empty)"
        )
    # One thread a page: Tesseract's OpenMP threads took 2.2x the CPU a page (4.6 s against 2.1) and no less wall
    # where replicas already share the cores.
    env, timeout = {**os.environ, "OMP_THREAD_LIMIT": "1"}, OCR_TIMEOUT * len(scans)
    with tempfile.TemporaryDirectory(prefix="fucina-ocr-") as folder:
        images = [Path(folder, f"{k}.pgm") for k in range(len(scans))]
        for path, (_, scan) in zip(images, scans):
            path.write_bytes(scan.image)
        listing = Path(folder, "pages.txt")  # a file naming images, a line each: one run reads them all
        listing.write_text("".join(f"{path}\n" for path in images))
        command = [tesseract, str(listing), "stdout", "--dpi", str(scans[0][1].dpi), "tsv"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise Unreadable(f"{name}: OCR of {pages} ran past {timeout}s") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Unreadable(f"{name}: OCR of {pages} failed ({said[-1] if said else f'tesseract exited with {done.returncode}'})")
    rows: dict[int, list[list[str]]] = {}
    for row in done.stdout.decode("utf-8", "replace").splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) >= 12 and cells[0] == "5" and cells[11].strip():  # level 5: a word
            rows.setdefault(int(cells[1]), []).append(cells)  # its page in the run, from 1
    return {number: _words_text(rows.get(k, []), scan.size) for k, (number, scan) in enumerate(scans, 1)}


def _words_text(rows: list[list[str]], size: tuple[int, int]) -> tuple[str, tuple[Word, ...]]:
    """The text of a page's words (the cells of Tesseract's ``tsv`` rows, a row a word) as its own text output writes
    them (a space between words, a line end between lines, an empty line between paragraphs), with each word's place in it."""
    width, height = size
    parts: list[str] = []
    words: list[Word] = []
    at, last, line = 0, None, -1
    for cells in rows:
        block, paragraph, line_number = (int(c) for c in cells[2:5])
        left, top, w, h = (int(c) for c in cells[6:10])
        word = _plain(cells[11].strip())
        if last is not None:
            gap = " " if (block, paragraph, line_number) == last else "\n" if (block, paragraph) == last[:2] else "\n\n"
            parts.append(gap)
            at += len(gap)
        if (block, paragraph, line_number) != last:
            line += 1
        last = (block, paragraph, line_number)
        words.append(Word(at, at + len(word), line, (left / width, top / height, (left + w) / width, (top + h) / height)))
        parts.append(word)
        at += len(word)
    return "".join(parts), tuple(words)


@functools.cache
def _tesseract() -> str | None:
    """The tesseract command, or None; said once in the log, since every scanned document is a reject without it."""
    found = shutil.which("tesseract")
    if found is None:
        log.warning("tesseract is not installed: scanned PDF pages cannot be read by OCR, and their documents are rejects; %s", INSTALL_TESSERACT)
    return found


# -- Word -----------------------------------------------------------------------


def _docx(f: BinaryIO, name: str, ocr: Ocr) -> Document:
    import docx
    from docx.table import Table

    try:
        body = docx.Document(io.BytesIO(f.read()))  # zipfile seeks from the end: in memory, a damaged file's error is zipfile's own
        blocks = [_table(block) if isinstance(block, Table) else block.text for block in body.iter_inner_content()]
    except Exception as err:  # python-docx lets through what zipfile, lxml and its own package reader raise on a damaged file
        said = str(err).strip().splitlines()
        raise Unreadable(f"{name}: not a Word file python-docx can read ({type(err).__name__}{': ' + said[0] if said else ''})") from None
    return Document("\n".join(blocks))


def _table(table: Any) -> str:
    return "\n".join("\t".join(cell.text for cell in row.cells) for row in table.rows)


# -- HTML -----------------------------------------------------------------------


def _html(f: BinaryIO, name: str, ocr: Ocr) -> Document:
    data = f.read()
    encoding = _charset(data)
    try:
        text = data.decode("utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding)  # -sig: a byte-order mark is no text
    except LookupError:
        raise Unreadable(f"{name}: its <meta> declares the charset {encoding!r}, which Python does not know") from None
    except UnicodeDecodeError as err:
        raise Unreadable(f"{name}: not valid {encoding} text (byte 0x{data[err.start]:02x} at offset {err.start}); save it as UTF-8") from None
    parser = _Visible()
    parser.feed(text)
    parser.close()
    return Document(parser.text())


def _charset(data: bytes) -> str:
    """The encoding of HTML bytes: a UTF-16 byte-order mark's, else the charset its ``<meta>`` declares, else UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16"
    declared = re.search(rb"""<meta[^>]*charset\s*=\s*["']?([A-Za-z0-9._:-]+)""", data[:4096], re.I)
    return declared.group(1).decode("ascii") if declared else "UTF-8"


class _Visible(html.parser.HTMLParser):
    """The text a browser shows: blocks on lines of their own, table cells split by tabs, spaces collapsed outside ``<pre>``."""

    HIDDEN = frozenset({"script", "style", "title", "template", "noscript"})
    BLOCKS = frozenset(
        "address article aside blockquote br dd div dl dt figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr li main nav ol p "
        "pre section table tr ul".split()
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._hidden = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._hidden += tag in self.HIDDEN
        self._pre += tag == "pre"
        if tag in self.BLOCKS:
            self._parts.append("\n")
        elif tag in ("td", "th"):
            self._parts.append("\t")

    def handle_startendtag(self, tag: str, attrs: list) -> None:  # <br/>: one line end, not a start's and an end's
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN:
            self._hidden = max(self._hidden - 1, 0)
        if tag == "pre":
            self._pre = max(self._pre - 1, 0)
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self._parts.append(data if self._pre else re.sub(r"\s+", " ", data))

    def text(self) -> str:
        lines = (line.strip(" \t") for line in "".join(self._parts).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


# -- Where on the page ------------------------------------------------------------

#: Device units of a page's side in ``FPDF_PageToDevice``, which counts in integers: boxes to a millionth of the page.
_UNITS = 1_000_000


@dataclass(frozen=True, eq=False)
class Layout:
    """Where a PDF row's text lies on its pages: the file's bytes, the offset in the text where each page starts
    (page k at ``starts[k - 1]``), and each OCR'd page's words."""

    data: bytes
    starts: tuple[int, ...]
    words: Mapping[int, tuple[Word, ...]]

    def boxes(self, text: str, spans: Mapping[str, tuple[int, int]]) -> dict[str, list[Box]]:
        """Each span's boxes, a line each, by path; ``text`` is the row's, which the spans index. A span across a page
        break has boxes on both pages."""
        pieces: dict[int, list[tuple[str, int, int]]] = {}
        for path, (start, end) in spans.items():
            for number, a, b in self._pieces(start, end):
                pieces.setdefault(number, []).append((path, a, b))
        found: dict[str, list[Box]] = {path: [] for path in spans}
        if any(number not in self.words for number in pieces):
            import pypdfium2 as pdfium

            with _PDFIUM:
                pdf = pdfium.PdfDocument(self.data)
                try:
                    for number in sorted(n for n in pieces if n not in self.words):
                        for path, box in _text_layer_boxes(pdf, number, self.page_text(text, number), pieces[number]):
                            found[path].append(box)
                finally:
                    pdf.close()
        for number in sorted(n for n in pieces if n in self.words):
            for path, a, b in pieces[number]:
                found[path] += _word_boxes(self.words[number], number, a, b)
        return {path: sorted(boxes, key=lambda b: (b.page, b.top, b.left)) for path, boxes in found.items() if boxes}

    def page_text(self, text: str, number: int) -> str:
        start = self.starts[number - 1]
        end = self.starts[number] - 1 if number < len(self.starts) else len(text)
        return text[start:end]

    def _pieces(self, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(page, start, end) of each page's part of the span ``[start, end)``, in that page's text."""
        first, last = bisect_right(self.starts, start), bisect_right(self.starts, max(end - 1, start))
        for number in range(first, last + 1):
            base = self.starts[number - 1]
            a, b = max(start - base, 0), end - base
            if number < len(self.starts):
                b = min(b, self.starts[number] - 1 - base)
            if b > a:
                yield number, a, b

    def render(self, number: int, dpi: int) -> bytes:
        """Page ``number`` as a grayscale PNG at ``dpi`` dots per inch (a third of colour's bytes; the boxes drawn over
        it bring the colour): the image the boxes' fractions are of."""
        import pypdfium2 as pdfium

        with _PDFIUM:
            pdf = pdfium.PdfDocument(self.data)
            try:
                page = pdf[number - 1]
                bitmap = page.render(scale=dpi / 72, grayscale=True)
                image = bitmap.to_pil()
                bitmap.close()
                page.close()
            finally:
                pdf.close()
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=True)
        return out.getvalue()


def _text_layer_boxes(pdf: Any, number: int, page_text: str, pieces: list[tuple[str, int, int]]) -> Iterator[tuple[str, Box]]:
    """The boxes PDFium gives each piece of page ``number``'s text: a rectangle per line it spans, in page fractions."""
    import ctypes

    import pypdfium2.raw as raw

    page = pdf[number - 1]
    textpage = page.get_textpage()
    try:
        layer = textpage.get_text_range()
        if _plain(layer) != page_text:  # the same bytes parse the same: anything else is a bug, said rather than drawn wrong
            log.warning("page %d's text layer reads differently now; its values get no boxes", number)
            return
        index = _char_index(layer)
        edges = [ctypes.c_double() for _ in range(4)]
        x, y = ctypes.c_int(), ctypes.c_int()
        for path, a, b in pieces:
            first, last = raw.FPDFText_GetCharIndexFromTextIndex(textpage, index(a)), raw.FPDFText_GetCharIndexFromTextIndex(textpage, index(b - 1))
            if first < 0 or last < first:
                continue
            for i in range(raw.FPDFText_CountRects(textpage, first, last - first + 1)):
                raw.FPDFText_GetRect(textpage, i, *(ctypes.byref(e) for e in edges))
                left, top, right, bottom = (e.value for e in edges)
                corners = []
                for px, py in ((left, top), (right, bottom)):
                    raw.FPDF_PageToDevice(page, 0, 0, _UNITS, _UNITS, 0, px, py, ctypes.byref(x), ctypes.byref(y))
                    corners.append((x.value / _UNITS, y.value / _UNITS))
                (x0, y0), (x1, y1) = corners
                yield path, Box(number, min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
    finally:
        textpage.close()
        page.close()


def _char_index(layer: str) -> Callable[[int], int]:
    """Offset in the page's text (``_plain(layer)``) -> index in PDFium's text (UTF-16 units, its ``\\r\\n`` line ends)."""
    breaks = [m.start() - k for k, m in enumerate(re.finditer("\r\n", layer))]  # where each \r\n became one \n, in the page's text
    wide = [i for i, c in enumerate(layer) if ord(c) > 0xFFFF]  # two UTF-16 units each

    def index(offset: int) -> int:
        at = offset + bisect_left(breaks, offset)
        return at + bisect_left(wide, at)

    return index


def _word_boxes(words: tuple[Word, ...], number: int, start: int, end: int) -> list[Box]:
    """The union, per line, of the OCR words that ``[start, end)`` of their page's text covers."""
    lines: dict[int, list[float]] = {}
    for word in words:
        if word.start < end and word.end > start:
            box = lines.setdefault(word.line, list(word.box))
            box[:] = [min(box[0], word.box[0]), min(box[1], word.box[1]), max(box[2], word.box[2]), max(box[3], word.box[3])]
    return [Box(number, *box) for box in lines.values()]


_READERS: dict[str, Callable[[BinaryIO, str, Ocr], Document]] = {".pdf": _pdf, ".docx": _docx, ".html": _html, ".htm": _html}
