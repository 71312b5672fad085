"""The pipeline tests' fixture: a bucket on a private moto S3 server."""

import os
import socket

import pyarrow.fs as pafs
import pytest

_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """A bucket on a private moto server; yields a function that turns a key into an ``s3://`` URI for it."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)  # dummy credentials, before Ray starts, so that its workers inherit them
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    query = f"endpoint_override=127.0.0.1:{port}&scheme=http"
    fs, _ = pafs.FileSystem.from_uri(f"s3://bucket?{query}&allow_bucket_creation=true")
    fs.create_dir("bucket")
    yield lambda key: f"s3://bucket/{key}?{query}"
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
