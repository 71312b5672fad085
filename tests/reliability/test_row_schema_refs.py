"""Issue 28: a row's own schema is untrusted input, and its ``$ref``s read no file and open no connection.

A replica (``ShardWorker``, plain Python, on the null engine) decodes rows whose
schemas point at ``file:///etc/passwd``, at a secret file of the test's and at
an HTTP server listening on 127.0.0.1. Python's audit hooks see every file the
process opens and every socket it connects, and the real listener would hold
any connection in its backlog; both must stay empty, and every row must end
once, as a record or a reject.
"""

import json
import logging
import socket
import sys

import pytest

from fucina_jobs.config import validate
from fucina_jobs.data.dataset import scan
from fucina_jobs.pipeline.replica import ShardWorker
from fucina_jobs.data.rundir import RunDir

from tests.helpers import REPO, write_jsonl

_WATCH: list = []  # (event, args) while a test watches; audit hooks cannot be removed, so the hook checks this list's owner


def _hook(event: str, args: tuple) -> None:
    if _WATCH and event in ("open", "socket.connect", "urllib.Request"):
        _WATCH[0].append((event, args))


sys.addaudithook(_hook)


@pytest.fixture
def listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def test_refs_in_row_schemas_read_nothing_and_connect_nowhere(tmp_path, listener):
    port = listener.getsockname()[1]
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"type": "string"}))
    refs = {"passwd": "file:///etc/passwd", "secret": secret.as_uri(), "http": f"http://127.0.0.1:{port}/schema.json"}
    rows = [
        {"id": name, "text": "Invoice 7 from Acme", "schema": {"type": "object", "properties": {"a": {"$ref": ref}}}} for name, ref in refs.items()
    ]
    rows.append({"id": "top", "text": "Invoice 8 from Acme", "schema": {"$ref": refs["http"]}})
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = RunDir.for_config(str(tmp_path / "out"), tmp_path, "0" * 64)
    out.start_run()
    out.write_manifest({"run_id": "test"})
    raw = {
        "name": "refs",
        "engine": {"name": "canned", "output": '{"a": "x"}'},
        "constraint": {},
        "dataset": {"path": str(data), "schema_field": "schema"},
        "output": {"dir": str(tmp_path / "out")},
    }
    cfg = validate(raw)
    index = scan(cfg.dataset, tmp_path)
    seen: list = []
    _WATCH.append(seen)
    try:
        worker = ShardWorker(cfg.model_dump(), constraint=None, model_path="unused", base=str(REPO), out=out, run_id="test", replica=0)
        summary = worker.run(0, "refs", index.slice(index.table))
    finally:
        _WATCH.clear()
        for handler in logging.getLogger().handlers[:]:  # the worker logs to a file of its output dir
            if isinstance(handler, logging.FileHandler) and str(tmp_path) in handler.baseFilename:
                logging.getLogger().removeHandler(handler)
                handler.close()
    assert summary.rows == 4 and summary.records + summary.rejects == 4
    ids = sorted(r["row_id"] for kind in ("records", "rejects") for r in out.read(kind).to_pylist())
    assert ids == ["http", "passwd", "secret", "top"]
    opened = [str(args[0]) for event, args in seen if event == "open"]
    assert any(p.endswith("replica-0.log") for p in opened), "the hook sees what the replica opens"
    errors = {r["row_id"]: r["error"] for r in out.read("rejects").to_pylist()}
    assert all(refs["http" if row_id == "top" else row_id] in error for row_id, error in errors.items()), errors
    assert not [p for p in opened if p in ("/etc/passwd", str(secret))], opened
    assert not [args for event, args in seen if event != "open"], "a row's $ref opened a connection"
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever knocked
