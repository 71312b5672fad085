"""Label Studio round trip: a run exported as tasks with predictions, annotations back as gold, scored by ``eval``.

The slow test starts a real Label Studio (``.venv-labelstudio``, made by
``scripts/setup.sh --with-review``) on 127.0.0.1 with a temporary data folder
and a user and API token from its environment variables, and drives its HTTP API.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fucina_jobs.eval.runs import read_run
from fucina_jobs.eval.sources import read_sources
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.spans import value_spans
from fucina_jobs.review.labelstudio import export_command, gold_lines, import_command, labeling_config, schema_fields

from tests.helpers import REPO, make_run

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "x-grounded": True},
        "date": {"type": "string", "format": "date", "x-grounded": True},
        "currency": {"enum": ["EUR", "USD", None], "x-grounded": {"spellings": {"EUR": ["€"], "USD": ["$"]}}},
        "total": {"type": "number", "x-grounded": {"amount": True}},
        "tax": {"type": "number", "x-grounded": {"amount": True, "allow": [0]}},
        "paid": {"type": "boolean"},
    },
    "required": ["vendor", "date", "currency", "total", "tax", "paid"],
}
DOCS = {
    "a": "Rechnung von Acme GmbH, 3. April 2025\nBetrag: 1.234,50 € (ohne MwSt.)",
    "b": "Bolt Ltd (agent) for Nordlicht\nBakery\ninvoice of 04/15/2025, total $88.80, tax $8.80",
    "c": "Pinewood Labels, 2025-01-02, total $5.00, tax $0.50",
    "d": "Kitagawa Tool Works, 2025-05-20, total €9.00",
}
PREDICTED = {
    "a": {"vendor": "Acme GmbH", "date": "2025-04-03", "currency": "EUR", "total": 1234.5, "tax": 0, "paid": False},
    "b": {"vendor": "Bolt Ltd", "date": "2025-04-15", "currency": "USD", "total": 88.8, "tax": 8.8, "paid": True},  # the vendor is wrong
    "c": {"vendor": "Pinewood Labels", "date": "2025-01-02", "currency": "USD", "total": 5, "tax": 0.5, "paid": False},
}


def hand_run(tmp_path: Path) -> Path:
    """Three records (row d a reject), their dataset, schema and manifest, as a job leaves them."""
    (tmp_path / "inputs.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in DOCS.items()), encoding="utf-8"
    )
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    fields = grounded_fields(SCHEMA)
    records = []
    for row_id, value in PREDICTED.items():
        confidence = {k: 0.5 if (row_id, k) == ("b", "vendor") else 0.95 for k in value}
        records.append(
            {
                "row_id": row_id,
                "text": json.dumps(value, separators=(",", ":")),
                "record_confidence": min(confidence.values()),
                "field_confidence_min": confidence,
                "field_confidence_mean": confidence,
                "field_spans": {p: list(s) for p, s in value_spans(value, fields, DOCS[row_id]).items()},
            }
        )
    rejects = [{"row_id": "d", "reason": "ungrounded", "error": "not found in text: total=9.5", "text": '{"vendor":"Kitagawa","total":9.5}'}]
    config = {
        "name": "ls_job",
        "constraint": {"json_schema": str(tmp_path / "schema.json")},
        "dataset": {"path": str(tmp_path / "inputs.jsonl")},
        "output": {"dir": str(tmp_path / "run")},
    }
    return make_run(tmp_path / "run", records, rejects, manifest={"name": "ls_job", "status": "complete", "version": "v7", "config": config})


def exported(tmp_path: Path) -> list[dict]:
    assert export_command([str(hand_run(tmp_path)), str(tmp_path / "tasks.json"), "--base", str(tmp_path)]) == 0
    return json.loads((tmp_path / "tasks.json").read_text())


def region(text: str, written: str, label: str) -> dict:
    start = text.index(written)
    return {
        "id": f"hand-{label}",
        "from_name": "label",
        "to_name": "text",
        "type": "labels",
        "value": {"start": start, "end": start + len(written), "text": written, "labels": [label]},
    }


def test_export_tasks_and_config(tmp_path):
    tasks = exported(tmp_path)
    assert (
        [t["data"]["row_id"] for t in tasks] == ["a", "b", "c", "d"] and "predictions" not in tasks[3] and tasks[3]["data"]["reject"] == "ungrounded"
    )
    prediction = tasks[0]["predictions"][0]
    assert prediction["model_version"] == "ls_job version=v7" and prediction["score"] == 0.95
    values = {r["value"]["labels"][0]: r["value"] for r in prediction["result"] if r["type"] == "labels"}
    assert {k: v["text"] for k, v in values.items()} == {"vendor": "Acme GmbH", "date": "3. April 2025", "currency": "€", "total": "1.234,50 €"}
    assert all(DOCS["a"][v["start"] : v["end"]] == v["text"] for v in values.values())
    typed = {r["from_name"]: r["value"]["text"] for r in prediction["result"] if r["type"] == "textarea"}
    assert typed == {"typed:tax": ["0"], "typed:paid": ["false"]}  # tax 0 is allowed but not written; paid has no grounding
    config = (tmp_path / "labelstudio.xml").read_text()
    assert re.findall(r'<Label value="([^"]+)"', config) == ["vendor", "date", "currency", "total", "tax"]
    assert re.findall(r'<TextArea name="([^"]+)"', config) == ["typed:tax", "typed:paid"]


def test_gold_from_an_export_reads_values_as_the_schema_types_them(tmp_path):
    tasks = exported(tmp_path)
    accepted = tasks[0]["predictions"][0]["result"]
    corrected = [r for r in tasks[1]["predictions"][0]["result"] if r["value"].get("labels") != ["vendor"]] + [
        region(DOCS["b"], "Nordlicht\nBakery", "vendor")
    ]
    by_hand = [
        region(DOCS["d"], "€9.00", "total"),
        region(DOCS["d"], "€", "currency"),
        region(DOCS["d"], "2025-05-20", "date"),
        {"from_name": "typed:tax", "to_name": "text", "type": "textarea", "value": {"text": ["0"]}},
    ]
    export = [
        {**tasks[0], "annotations": [{"id": 1, "result": accepted, "was_cancelled": False, "updated_at": "2026-01-01T10:00:00Z"}]},
        {
            **tasks[1],
            "annotations": [
                {"id": 2, "result": [], "was_cancelled": False, "updated_at": "2026-01-01T09:00:00Z"},
                {"id": 3, "result": corrected, "was_cancelled": False, "updated_at": "2026-01-01T11:00:00Z"},
            ],
        },
        {**tasks[2], "annotations": [{"id": 4, "result": accepted, "was_cancelled": True}]},  # skipped: no gold
        {**tasks[3], "annotations": [{"id": 5, "result": by_hand}]},
    ]
    fields = schema_fields(SCHEMA, grounded_fields(SCHEMA))
    lines, warnings = gold_lines(export, fields)
    assert warnings == []
    assert lines == [
        {"id": "a", "label": PREDICTED["a"]},
        {"id": "b", "label": {**PREDICTED["b"], "vendor": "Nordlicht Bakery"}},
        {"id": "d", "label": {"vendor": None, "date": "2025-05-20", "currency": "EUR", "total": 9, "tax": 0, "paid": None}},
    ]


def test_ambiguous_and_unreadable_annotations_warn():
    fields = schema_fields(SCHEMA, grounded_fields(SCHEMA))
    text = "on 03/04/2025 pay 1,340 in cash"
    task = {
        "data": {"row_id": "x", "text": text},
        "annotations": [{"result": [region(text, "03/04/2025", "date"), region(text, "1,340", "total"), region(text, "cash", "currency")]}],
    }
    lines, warnings = gold_lines([task], fields)
    assert lines[0]["label"]["date"] == "2025-04-03" and lines[0]["label"]["total"] == 1.34 and lines[0]["label"]["currency"] is None
    assert (
        len(warnings) == 3
        and "reads as 2025-04-03, 2025-03-04" in warnings[0]
        and "writes no member" in warnings[1]
        and "reads as 1.340, 1340" in warnings[2]
    )


def test_labeling_config_escapes_field_names():
    schema = {"type": "object", "properties": {'a"b<c': {"type": "string", "x-grounded": True}}}
    config = ElementTree.fromstring(labeling_config(schema_fields(schema, grounded_fields(schema))))
    assert [label.get("value") for label in config.iter("Label")] == ['a"b<c']


# -- a real Label Studio ----------------------------------------------------------------

LS_BINARY = REPO / ".venv-labelstudio" / "bin" / "label-studio"
TOKEN = "fucina-test-token-0123456789"


class LabelStudio:
    def __init__(self, url: str):
        self.url = url

    def api(self, method: str, path: str, body=None):
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            raise AssertionError(f"{method} {path}: HTTP {err.code}: {err.read()[:1000]!r}") from None


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    binary = os.environ.get("LABEL_STUDIO") or (str(LS_BINARY) if LS_BINARY.exists() else shutil.which("label-studio"))
    if binary is None:
        pytest.skip("no label-studio: bash scripts/setup.sh --with-review makes .venv-labelstudio (or set LABEL_STUDIO)")
    data = tmp_path_factory.mktemp("label-studio")
    migrated = Path(binary).parents[1] / "empty" / "label_studio.sqlite3"  # made by setup.sh: saves minutes of migrations
    if migrated.is_file():
        shutil.copy(migrated, data / migrated.name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABEL_STUDIO_", "HEARTEX_")) and k not in ("HOST", "PORT")}
    env |= {
        "LABEL_STUDIO_BASE_DATA_DIR": str(data),
        "LABEL_STUDIO_USERNAME": "reviewer@example.com",
        "LABEL_STUDIO_PASSWORD": "fucina-review",
        "LABEL_STUDIO_USER_TOKEN": TOKEN,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_LATEST_VERSION_CHECK": "false",
        "LABEL_STUDIO_COLLECT_ANALYTICS": "false",
    }
    log = (data / "server.log").open("w")
    process = subprocess.Popen(
        [binary, "start", "--internal-host", "127.0.0.1", "--port", str(port), "--no-browser", "--enable-legacy-api-token"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=data,
    )
    started = time.monotonic()
    try:
        url = None
        while time.monotonic() - started < 900:
            if process.poll() is not None:
                pytest.fail(f"label-studio exited ({process.returncode}): {(data / 'server.log').read_text()[-3000:]}")
            bound = re.search(r"Starting development server at (http://127\.0\.0\.1:\d+)/", (data / "server.log").read_text())
            if bound:
                try:
                    urllib.request.urlopen(bound.group(1) + "/health", timeout=5).read()
                    url = bound.group(1)
                    break
                except OSError:
                    pass
            time.sleep(1)
        if url is None:
            pytest.fail(f"label-studio did not answer within 900 s: {(data / 'server.log').read_text()[-3000:]}")
        print(f"label-studio started in {time.monotonic() - started:.0f} s")
        yield LabelStudio(url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.slow
def test_round_trip_through_a_real_label_studio(tmp_path, label_studio, capsys):
    from fucina_jobs.eval.evaluate import evaluate
    from fucina_jobs.config import validate

    tasks = exported(tmp_path)
    project = label_studio.api("POST", "/api/projects/", {"title": "fucina review", "label_config": (tmp_path / "labelstudio.xml").read_text()})
    imported = label_studio.api("POST", f"/api/projects/{project['id']}/import", tasks)
    assert (imported["task_count"], imported["prediction_count"]) == (4, 3)

    # Read the tasks back: the predictions arrive with their regions, scores and version.
    back = {t["data"]["row_id"]: t for t in label_studio.api("GET", f"/api/tasks/?project={project['id']}&fields=all&page_size=100")["tasks"]}
    assert set(back) == set(DOCS)
    prediction = back["b"]["predictions"][0]
    assert prediction["model_version"] == "ls_job version=v7" and prediction["score"] == 0.5
    vendor = next(r for r in prediction["result"] if r["value"].get("labels") == ["vendor"])
    assert (vendor["value"]["text"], vendor["score"]) == ("Bolt Ltd", 0.5)
    assert DOCS["b"][vendor["value"]["start"] : vendor["value"]["end"]] == "Bolt Ltd"

    # A person accepts a's prediction, corrects b's vendor, leaves c alone and labels the reject d by hand.
    accept = back["a"]["predictions"][0]["result"]
    correct = [r for r in prediction["result"] if r is not vendor] + [region(DOCS["b"], "Nordlicht\nBakery", "vendor")]
    by_hand = [
        region(DOCS["d"], "Kitagawa Tool Works", "vendor"),
        region(DOCS["d"], "2025-05-20", "date"),
        region(DOCS["d"], "€9.00", "total"),
        region(DOCS["d"], "€", "currency"),
        {"id": "t", "from_name": "typed:tax", "to_name": "text", "type": "textarea", "value": {"text": ["0"]}},
        {"id": "p", "from_name": "typed:paid", "to_name": "text", "type": "textarea", "value": {"text": ["false"]}},
    ]
    for row_id, result in (("a", accept), ("b", correct), ("d", by_hand)):
        label_studio.api("POST", f"/api/tasks/{back[row_id]['id']}/annotations/", {"result": result})

    export = label_studio.api("GET", f"/api/projects/{project['id']}/export?exportType=JSON&download_all_tasks=true")
    (tmp_path / "export.json").write_text(json.dumps(export))
    assert import_command([str(tmp_path / "export.json"), str(tmp_path / "gold.jsonl")]) == 0
    assert "3 annotated rows of 4 tasks" in capsys.readouterr().out
    gold = {g["id"]: g["label"] for g in map(json.loads, (tmp_path / "gold.jsonl").read_text().splitlines())}
    assert gold["a"] == PREDICTED["a"] and gold["b"] == {**PREDICTED["b"], "vendor": "Nordlicht Bakery"}
    assert gold["d"] == {"vendor": "Kitagawa Tool Works", "date": "2025-05-20", "currency": "EUR", "total": 9, "tax": 0, "paid": False}

    # eval scores the run against what the person accepted: b's vendor is now wrong, the reject d wrong throughout.
    run = read_run(tmp_path / "run")
    raw = {**run.manifest["config"], "eval": {"run_dir": str(tmp_path / "run"), "gold": str(tmp_path / "gold.jsonl"), "report": False}}
    scores = evaluate(validate(raw), tmp_path).scores
    accuracy = scores["accuracy"]
    assert accuracy["rows_scored"] == 3 and accuracy["run_rows_without_gold"] == 1
    counts = {name: (f["correct"], f["total"], f["rate"]) for name, f in accuracy["fields"].items()}
    assert counts["vendor"] == (1, 3, 1 / 3) and counts["total"] == (2, 3, 2 / 3)
    assert accuracy["wrong_fields"] == {"b": ["vendor"], "d": list(gold["d"])}
    assert scores["spans"]["mismatched"] == 0 and read_sources(run, tmp_path).changed == set()


# -- a run of PDF rows: the pages and each value's boxes -----------------------------------------------


def pdf_exported(tmp_path: Path) -> tuple[list[dict], dict]:
    from tests.review.test_review_page import pdf_run

    _, boxes = pdf_run(tmp_path)
    assert export_command([str(tmp_path / "run"), str(tmp_path / "tasks.json"), "--base", str(tmp_path)]) == 0
    return json.loads((tmp_path / "tasks.json").read_text()), boxes


def test_a_pdf_row_s_task_carries_its_page_and_each_value_s_box_in_percent(tmp_path):
    import base64
    import io

    from PIL import Image

    (task,), boxes = pdf_exported(tmp_path)
    kind, payload = task["data"]["page"].split(",", 1)
    page = Image.open(io.BytesIO(base64.b64decode(payload)))
    assert kind == "data:image/png;base64" and page.size == (612, 792)  # one page at 72 dpi
    rectangles = {r["value"]["rectanglelabels"][0]: r for r in task["predictions"][0]["result"] if r["type"] == "rectanglelabels"}
    assert sorted(rectangles) == sorted(boxes) == ["tax", "total", "vendor"]
    for path, r in rectangles.items():
        (b,) = boxes[path]
        assert (r["from_name"], r["to_name"], r["original_width"], r["original_height"]) == ("box", "page", 612, 792)
        assert [r["value"][k] for k in ("x", "y", "width", "height")] == pytest.approx(
            [100 * b.left, 100 * b.top, 100 * (b.right - b.left), 100 * (b.bottom - b.top)], abs=1e-4
        )
    assert rectangles["vendor"]["score"] == 0.3
    config = ElementTree.fromstring((tmp_path / "labelstudio.xml").read_text())
    (rectangle_labels,) = config.iter("RectangleLabels")
    assert [label.get("value") for label in rectangle_labels] == [label.get("value") for label in next(config.iter("Labels"))]
    assert next(config.iter("Image")).get("value") == "$page"


def test_a_text_run_s_config_and_tasks_have_no_pages(tmp_path):
    tasks = exported(tmp_path)
    assert all("page" not in t["data"] for t in tasks) and "<Image" not in (tmp_path / "labelstudio.xml").read_text()


@pytest.mark.slow
def test_a_real_label_studio_takes_a_pdf_row_s_page_and_boxes(tmp_path, label_studio):
    tasks, boxes = pdf_exported(tmp_path)
    project = label_studio.api("POST", "/api/projects/", {"title": "fucina pdf", "label_config": (tmp_path / "labelstudio.xml").read_text()})
    imported = label_studio.api("POST", f"/api/projects/{project['id']}/import", tasks)
    assert (imported["task_count"], imported["prediction_count"]) == (1, 1)
    (back,) = label_studio.api("GET", f"/api/tasks/?project={project['id']}&fields=all&page_size=100")["tasks"]
    assert back["data"]["page"] == tasks[0]["data"]["page"]
    sent = [r for r in tasks[0]["predictions"][0]["result"] if r["type"] == "rectanglelabels"]
    kept = [r for r in back["predictions"][0]["result"] if r["type"] == "rectanglelabels"]
    assert [(r["value"], r["score"]) for r in kept] == [(r["value"], r["score"]) for r in sent] and len(kept) == len(boxes)
