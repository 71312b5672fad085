"""A failing object store for the storage faults: moto's S3 server behind a real HTTP proxy on 127.0.0.1.

The proxy forwards every request to moto unchanged, except those a ``Rule``
picks: it answers them ``503 SlowDown`` or ``500 InternalError`` (S3's XML
error bodies), ``400 ExpiredToken`` (credentials that expired), cuts the
connection without an answer, or half-way through the upload or the object's
bytes, or holds the request longer than the SDK waits for an answer. A rule may
also run a hook before it forwards a request (truncate an object between the
listing and the read). Nothing of pyarrow or of the job is mocked: the job's S3
client talks HTTP to this proxy as it would to S3.

    with S3Store() as store:                           # moto, and the proxy in front of it
        store.put("data/in.jsonl", body)
        store.rules.append(Rule(method="PUT", key="/stats/", fault="slowdown", times=4))
        uri = store.uri("runs/x")                      # s3://bucket/runs/x?endpoint_override=<proxy>&scheme=http

Used by ``checks/fault_matrix.py`` (its ``s3_*`` cases) and ``tests/reliability/test_storage_faults.py``.
"""

from __future__ import annotations

import http.client
import http.server
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

#: Dummy credentials moto accepts; exported so that Ray's workers, which inherit the environment, sign the same way.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
BUCKET = "bucket"

_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "internal": (500, "InternalError", "We encountered an internal error. Please try again."),
    "expired": (400, "ExpiredToken", "The provided token has expired."),
}
#: How long a ``stall`` holds a request before forwarding it: past the AWS SDK's 3 s without a byte, when it gives up.
STALL_S = 5.0
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "server", "date"}


@dataclass
class Rule:
    """Requests this rule fails: by method and a substring of the unquoted path; the first ``times`` of them (None: all).

    ``fault`` is ``slowdown`` (503), ``internal`` (500), ``expired`` (400 ExpiredToken), ``cut`` (the connection closed
    with no answer), ``drop`` (closed half-way: through a PUT's upload, or a GET's answer, its headers promising all of the
    object), ``stall`` (forwarded after ``STALL_S``) or None (forwarded; with ``before``, a hook run first). ``hits``
    counts the requests it took."""

    method: str | None = None
    key: str = ""
    fault: str | None = "slowdown"
    times: int | None = None
    before: Callable[[], None] | None = None
    hits: int = 0

    def takes(self, method: str, path: str) -> bool:
        if (self.method and method != self.method) or self.key not in path:
            return False
        return self.times is None or self.hits < self.times


class _Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet about a client that gave up on a stalled request (the SDK's timeout): it closed the socket the answer goes to."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def __init__(self, upstream: tuple[str, int], rules: list[Rule]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream, self.rules, self.lock = upstream, rules, threading.Lock()

    def rule_for(self, method: str, path: str) -> Rule | None:
        with self.lock:
            rule = next((r for r in self.rules if r.takes(method, path)), None)
            if rule is not None:
                rule.hits += 1
            return rule


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, *args: object) -> None:  # quiet: the case reports what it did
        pass

    def _any(self) -> None:
        rule = self.server.rule_for(self.command, unquote(urlsplit(self.path).path))
        fault = rule.fault if rule is not None else None
        if fault == "drop" and self.command == "PUT":
            self._half_upload()
            return
        body = self._body()
        if rule is not None and rule.before is not None:
            rule.before()
        if fault == "stall":
            time.sleep(STALL_S)
        if fault == "cut":
            self._hang_up()
        elif fault in _ERRORS:
            self._error(*_ERRORS[fault])
        else:
            self._forward(body, half=fault == "drop")

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    def _body(self) -> bytes:
        """The request's body, its HTTP chunking undone (the SDK streams uploads ``Transfer-Encoding: chunked``); moto gets it
        with a ``Content-Length``, its ``aws-chunked`` content encoding untouched."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = []
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after the chunk
        while self.rfile.readline().strip():  # trailers, then the blank line
            pass
        return b"".join(parts)

    def _half_upload(self) -> None:
        """Read half the upload's first chunk (or half its body), then hang up: a connection cut mid-upload."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.rfile.read(int(self.rfile.readline().split(b";")[0].strip() or b"0", 16) // 2)
        else:
            self.rfile.read(int(self.headers.get("Content-Length") or 0) // 2)
        self._hang_up()

    def _hang_up(self) -> None:
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _error(self, status: int, code: str, message: str) -> None:
        # A GET's error has no body: the AWS SDK writes a GetObject's error body into the caller's buffer, which overflows
        # pyarrow's ranged read (INTERNAL_FAILURE "Failed to flush response stream", not retried); a load balancer's 503 has none.
        body = (
            b""
            if self.command == "GET"
            else f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'.encode()
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, body: bytes, half: bool = False) -> None:
        """moto's answer; ``half``: its headers and half its body, then the connection cut."""
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            upstream.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else answer.getheader("Content-Length") or 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data[: len(data) // 2] if half else data)
            if half:
                self.wfile.flush()
                self._hang_up()
        finally:
            upstream.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Store:
    """moto's S3 server on a free port of 127.0.0.1, a bucket in it, and the failing proxy in front (``rules``)."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> "S3Store":
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
        self._saved = {k: os.environ.get(k) for k in CREDENTIALS}
        os.environ.update(CREDENTIALS)
        port = _free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._moto.start()
        self.direct = f"endpoint_override=127.0.0.1:{port}&scheme=http"  # moto itself, past the proxy
        self._proxy = _Proxy(("127.0.0.1", port), self.rules)
        threading.Thread(target=self._proxy.serve_forever, name="faulty-s3", daemon=True).start()
        self.query = f"endpoint_override=127.0.0.1:{self._proxy.server_address[1]}&scheme=http"
        fs, _ = pafs.FileSystem.from_uri(f"s3://{BUCKET}?{self.direct}&allow_bucket_creation=true")
        fs.create_dir(BUCKET)
        return self

    def __exit__(self, *exc: object) -> None:
        self._proxy.shutdown()
        self._proxy.server_close()
        self._moto.stop()
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def uri(self, key: str) -> str:
        """``key`` in the bucket, through the proxy."""
        return f"s3://{BUCKET}/{key}?{self.query}"

    def fs(self) -> pafs.FileSystem:
        """moto directly, past the proxy: for the test's own setup and counting."""
        return pafs.FileSystem.from_uri(f"s3://{BUCKET}?{self.direct}")[0]

    def put(self, key: str, body: bytes) -> None:
        with self.fs().open_output_stream(f"{BUCKET}/{key}") as f:
            f.write(body)
