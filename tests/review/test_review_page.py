"""``review RUN --html``: the page's data from a run and its documents, then the page in a real headless Chromium."""

import base64
import io
import json
import subprocess
import sys

import pytest

from fucina_jobs.review.browser import BrowserError, Chromium, find_chromium
from fucina_jobs.review.cli import review_command
from fucina_jobs.config import DatasetConfig
from fucina_jobs.data import read_rows
from fucina_jobs.review.page import PAGE_DPI, READY, embedded, page_data, render
from fucina_jobs.eval.runs import read_run
from fucina_jobs.eval.sources import read_sources
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.spans import value_spans

from tests.data.test_documents import pdf_bytes
from tests.helpers import REPO, make_run

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "x-grounded": True},
        "total": {"type": "number", "x-grounded": {"amount": True}},
        "tax": {"type": "number", "x-grounded": {"amount": True, "allow": [0]}},
    },
    "required": ["vendor", "total", "tax"],
}
HARD = '🧾🧾 Beleg\nACME "Tools"\n   GmbH <b>not html</b>\nTotal: 1.234,50 €'  # astral characters before the values, a name across a line break
FILLER = 23  # rows beyond one page of 20 cards


def hand_run(tmp_path):
    """A run of 25 records and one reject, with its dataset, schema and manifest, as a job would leave them."""
    docs = [{"id": "hard", "text": HARD}, {"id": "nope", "text": "Vendor: Bolt Ltd, total due on the next page"}]
    docs += [{"id": f"f{i:02d}", "text": f"Vendor: Filler {i} Ltd\nTotal: ${i}.50\nTax: $0.00"} for i in range(FILLER)]
    (tmp_path / "inputs.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    fields = grounded_fields(SCHEMA)
    values = {"hard": {"vendor": 'ACME "Tools" GmbH', "total": 1234.5, "tax": 0}}
    values |= {f"f{i:02d}": {"vendor": f"Filler {i} Ltd", "total": i + 0.5, "tax": 0} for i in range(FILLER)}
    texts = {d["id"]: d["text"] for d in docs}
    records = []
    for n, (row_id, value) in enumerate(values.items()):
        confidence = {"vendor": 0.3 if row_id == "hard" else 0.99, "total": 0.6 + n / 100, "tax": 0.97}
        records.append(
            {
                "row_id": row_id,
                "text": json.dumps(value, separators=(",", ":")),
                "record_confidence": min(confidence.values()),
                "field_confidence_min": confidence,
                "field_confidence_mean": confidence,
                "flags": ["copied_from_document"] if row_id == "f03" else [],
                "field_spans": {p: list(s) for p, s in value_spans(value, fields, texts[row_id]).items()},
            }
        )
    rejects = [{"row_id": "nope", "reason": "ungrounded", "error": "not found in text: total=99", "text": '{"vendor":"Bolt Ltd","total":99,"tax":0}'}]
    config = {
        "name": "hand",
        "constraint": {"json_schema": str(tmp_path / "schema.json")},
        "dataset": {"path": str(tmp_path / "inputs.jsonl")},
        "output": {"dir": str(tmp_path / "run")},
    }
    make_run(tmp_path / "run", records, rejects, manifest={"name": "hand", "status": "complete", "version": "v1", "config": config})
    return read_run(tmp_path / "run"), texts


def expected_highlights(card, text):
    """What each value's marks must read: the characters of its span (offsets in UTF-16 units, as the page uses them)."""
    units = text.encode("utf-16-le")
    return [units[2 * v["s"] : 2 * v["e"]].decode("utf-16-le") if "s" in v else None for v in card["values"]]


def test_page_data_orders_rows_and_converts_offsets(tmp_path):
    run, texts = hand_run(tmp_path)
    data = page_data(run, read_sources(run, tmp_path))
    cards = data["cards"]
    assert [c["id"] for c in cards[:3]] == ["nope", "hard", "f00"]  # the reject, then the least certain record
    assert cards[0]["reject"] == {"reason": "ungrounded", "error": "not found in text: total=99", "raw": '{"vendor":"Bolt Ltd","total":99,"tax":0}'}
    hard = cards[1]
    assert expected_highlights(hard, texts["hard"]) == ['ACME "Tools"\n   GmbH', "1.234,50 €", None]  # tax 0: allowed, not written
    assert hard["values"][0]["s"] == HARD.index("ACME") + 2  # two emoji: two UTF-16 units each
    assert [v["c"] for v in hard["values"]] == [0.3, 0.6, 0.97]
    assert [v["v"] for v in hard["values"]] == ['ACME "Tools" GmbH', 1234.5, 0]  # values keep their JSON types


def test_the_page_is_one_file_that_no_document_can_break(tmp_path):
    run, _ = hand_run(tmp_path)
    data = page_data(run, read_sources(run, tmp_path))
    html = render(data)
    assert html.count("<script") == 2 and html.count("</script>") == 2 and "<b>not html</b>" not in html
    assert not any(marker in html for marker in ("http://", "https://", "<link", " src=", "@import", "fetch("))  # nothing to fetch
    assert embedded(html) == data and embedded(html)["cards"][1]["text"] == HARD


def test_review_html_command(tmp_path, capsys):
    hand_run(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "fucina_jobs", "review", str(tmp_path / "run"), "--html", str(tmp_path / "page.html")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"wrote {tmp_path / 'page.html'}") and "24 records, 1 rejects" in out.stdout
    (tmp_path / "inputs.jsonl").unlink()
    assert review_command([str(tmp_path / "run"), "--html", str(tmp_path / "p.html")]) == 2
    assert "the run's dataset" in capsys.readouterr().err and not (tmp_path / "p.html").exists()


def test_a_row_edited_since_the_run_loses_its_spans(tmp_path):
    run, texts = hand_run(tmp_path)
    stats = [{"row_ids": list(texts), "row_digests": ["0" * 16] * len(texts)}]  # digests no current row has
    run.stats = stats
    sources = read_sources(run, tmp_path)
    assert sources.changed == set(texts)
    card = next(c for c in page_data(run, sources)["cards"] if c["id"] == "hard")
    assert card["changed"] and all("s" not in v for v in card["values"])


@pytest.mark.slow
def test_the_page_in_headless_chromium(tmp_path):
    if find_chromium() is None:
        pytest.skip(
            "no Chromium on this machine: apt-get install chromium (scripts/setup.sh does where apt is available); the DOM checks above ran on the HTML"
        )
    run, texts = hand_run(tmp_path)
    data = page_data(run, read_sources(run, tmp_path))
    page = tmp_path / "page.html"
    page.write_text(render(data), encoding="utf-8")
    try:
        browser = Chromium(width=1400, height=900)
    except BrowserError as err:
        pytest.skip(f"Chromium does not start here: {err}")
    with browser:
        browser.open(page.as_uri(), READY)
        shown = lambda: browser.evaluate("[...document.querySelectorAll('.card')].map(c => c.dataset.row)")  # noqa: E731
        assert shown() == [c["id"] for c in data["cards"][:20]]  # least certain first, one page of 20
        assert browser.evaluate("document.getElementById('count').textContent") == "25 of 25 rows"

        # Every value's marks read exactly its span of the source text.
        for card in data["cards"][1:20]:
            marks = browser.evaluate(f"""(() => {{ const card = document.querySelector('.card[data-row="{card["id"]}"]');
                return {json.dumps(list(range(len(card["values"]))))}.map(i => {{
                  const m = [...card.querySelectorAll(`mark[data-v~="${{i}}"]`)]; return m.length ? m.map(x => x.textContent).join('') : null; }}); }})()""")
            assert marks == expected_highlights(card, texts[card["id"]]), card["id"]
        assert browser.evaluate("document.querySelector('.card[data-row=\"hard\"] pre.doc').textContent") == HARD  # text, not markup

        # Hover a value: the tooltip names its field, value and confidence; click it: it is selected.
        box = browser.evaluate(
            '(() => { const r = document.querySelector(\'.card[data-row="hard"] mark[data-v~="0"]\').getBoundingClientRect();'
            " return [r.x + 3, r.y + r.height / 2]; })()"
        )
        browser.mouse("mouseMoved", *box)
        tip = browser.evaluate("[getComputedStyle(document.getElementById('tip')).display, document.getElementById('tip').textContent]")
        assert tip[0] == "block" and "vendor" in tip[1] and "ACME" in tip[1] and "0.300" in tip[1]
        browser.mouse("click", *box)
        assert browser.evaluate("document.querySelector('.card[data-row=\"hard\"] tr.sel').dataset.field") == "vendor"
        start = HARD.index("ACME")  # the record's offsets, code points: the two emoji count one each
        assert f"text[{start}:{start + len(expected_highlights(data['cards'][1], HARD)[0])}]" in browser.evaluate(
            "document.querySelector('.card[data-row=\"hard\"] .detail').textContent"
        )
        browser.screenshot(tmp_path / "review-page.png")
        assert (tmp_path / "review-page.png").stat().st_size > 10_000

        def choose(control, value):
            browser.evaluate(
                f"(() => {{ const el = document.getElementById('{control}'); el.value = '{value}';"
                f" el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', {{bubbles: true}})); }})()"
            )

        choose("reason", "ungrounded")
        assert shown() == ["nope"]
        assert "not found in text: total=99" in browser.evaluate("document.querySelector('.card.reject').textContent")
        choose("reason", "")
        choose("flag", "copied_from_document")
        assert shown() == ["f03"]
        choose("flag", "")
        choose("below", "0.65")  # values under 0.65: hard's vendor (0.3), totals 0.60-0.64 and the reject
        assert shown() == ["nope", "hard", "f00", "f01", "f02", "f03"]
        choose("field", "tax")  # tax values are 0.97: none below 0.65
        assert shown() == [] and "No rows match" in browser.evaluate("document.getElementById('cards').textContent")
        choose("below", "1")
        assert len(shown()) == 20 and "nope" not in shown()  # a reject has no tax value
        choose("field", "")
        choose("q", "filler 7 ltd")
        assert shown() == ["f07"]
        choose("q", "")
        choose("kind", "reject")
        assert shown() == ["nope"]
        choose("kind", "")
        browser.evaluate("document.getElementById('next').click()")
        assert shown() == [c["id"] for c in data["cards"][20:]] and browser.evaluate("document.getElementById('pageno').textContent") == "page 2 of 2"


# -- a PDF row: its page beside its text, each value's boxes on it ---------------------------------------

PDF_PAGE = "Invoice from ACME Tools GmbH\nTotal: 1.234,50 EUR\nTax: 0.00"
PDF_VALUE = {"vendor": "ACME Tools GmbH", "total": 1234.5, "tax": 0}
PDF_CONFIDENCE = {"vendor": 0.3, "total": 0.7, "tax": 0.97}


def pdf_run(tmp_path):
    """A run of one PDF row, its values' spans and boxes as the shard writer finds them; the layout the review reads back."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "inv.pdf").write_bytes(pdf_bytes([PDF_PAGE]))
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (row,) = read_rows(DatasetConfig(path=str(docs), format="documents"), tmp_path)
    text = row.fields["text"]
    spans = value_spans(PDF_VALUE, grounded_fields(SCHEMA), text)
    boxes = row.layout.boxes(text, spans)
    record = {
        "row_id": "inv",
        "text": json.dumps(PDF_VALUE, separators=(",", ":")),
        "record_confidence": 0.3,
        "field_confidence_min": PDF_CONFIDENCE,
        "field_confidence_mean": PDF_CONFIDENCE,
        "field_spans": {p: list(s) for p, s in spans.items()},
        "field_boxes": {p: [b._asdict() for b in found] for p, found in boxes.items()},
    }
    config = {
        "name": "pdf",
        "constraint": {"json_schema": str(tmp_path / "schema.json")},
        "dataset": {"path": str(docs), "format": "documents"},
        "output": {"dir": str(tmp_path / "run")},
    }
    make_run(tmp_path / "run", [record], [], manifest={"name": "pdf", "status": "complete", "version": "v1", "config": config})
    return read_run(tmp_path / "run"), boxes


def test_a_pdf_row_s_card_carries_the_pages_its_values_are_on_and_their_boxes(tmp_path):
    from PIL import Image

    run, boxes = pdf_run(tmp_path)
    (card,) = page_data(run, read_sources(run, tmp_path))["cards"]
    (page,) = card["pages"]
    image = Image.open(io.BytesIO(base64.b64decode(page["png"])))
    assert page["n"] == 1 and image.size == (page["w"], page["h"]) == (round(612 * PAGE_DPI / 72), round(792 * PAGE_DPI / 72))
    assert {v["f"]: v["b"] for v in card["values"]} == {
        path: [[b.page, *(round(e, 4) for e in (b.left, b.top, b.right, b.bottom))] for b in found] for path, found in boxes.items()
    }


def test_a_text_row_s_card_has_no_pages(tmp_path):
    run, _ = hand_run(tmp_path)
    assert not any("pages" in c or any("b" in v for v in c["values"]) for c in page_data(run, read_sources(run, tmp_path))["cards"])


@pytest.mark.slow
def test_the_page_of_a_pdf_row_in_headless_chromium_shows_each_box_on_its_page(tmp_path):
    from PIL import Image

    if find_chromium() is None:
        pytest.skip("no Chromium on this machine: apt-get install chromium (scripts/setup.sh does where apt is available)")
    run, boxes = pdf_run(tmp_path)
    page = tmp_path / "page.html"
    page.write_text(render(page_data(run, read_sources(run, tmp_path))), encoding="utf-8")
    try:
        browser = Chromium(width=1400, height=900)
    except BrowserError as err:
        pytest.skip(f"Chromium does not start here: {err}")
    with browser:
        browser.open(page.as_uri(), READY)
        drawn = browser.evaluate("""(() => { const pg = document.querySelector('.pg[data-page="1"]').getBoundingClientRect();
            return [[pg.x, pg.y, pg.width, pg.height], [...document.querySelectorAll('.pg .box')].map(b => {
              const r = b.getBoundingClientRect(); return [Number(b.dataset.v), r.x, r.y, r.width, r.height]; })]; })()""")
        (x, y, width, height), shown = drawn
        order = list(PDF_VALUE)
        expected = sorted((order.index(path), b) for path, found in boxes.items() for b in found)
        assert [i for i, *_ in shown] == [i for i, _ in expected] == [0, 1, 2]  # one box a value: each on one line
        border = 2  # drawn around the value's box, outside it
        for (_, bx, by, bw, bh), (_, b) in zip(shown, expected):  # at their place on the page, to a pixel
            assert (bx + border - x, by + border - y) == pytest.approx((b.left * width, b.top * height), abs=1)
            assert (bw - 2 * border, bh - 2 * border) == pytest.approx(((b.right - b.left) * width, (b.bottom - b.top) * height), abs=1)
            assert bx + bw < 1400 and by + bh < 900  # in view

        shot = Image.open(browser.screenshot(tmp_path / "review-page-pdf.png")).convert("RGB")
        colours = {0: (0xC0, 0x39, 0x2B), 1: (0xD6, 0x89, 0x10), 2: (0x2E, 0x8B, 0x57)}  # confidence < 0.5, 0.5-0.8, >= 0.95
        for i, bx, by, bw, bh in shown:  # the box's colour is on the screen along its left edge, and the page's ink inside it
            edge = [shot.getpixel((round(bx) + 1, round(by + k))) for k in range(border, round(bh) - border)]
            assert all(max(abs(p - c) for p, c in zip(pixel, colours[i])) < 24 for pixel in edge), (i, edge[:3])
            inside = shot.crop((round(bx) + border, round(by) + border, round(bx + bw) - border, round(by + bh) - border)).convert("L")
            assert inside.getextrema()[0] < 128

        browser.mouse("click", shown[0][1] + shown[0][3] / 2, shown[0][2] + 1)  # a box selects its value
        assert browser.evaluate("document.querySelector('.card tr.sel').dataset.field") == "vendor"
        assert "page 1" in browser.evaluate("document.querySelector('.card .detail').textContent")
