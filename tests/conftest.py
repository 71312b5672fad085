"""The tests' fixtures; what they share besides fixtures is in ``tests/helpers.py``.

The tests run on 2 shared CPU cores: one torch thread, tiny models, few tokens.
"""

from __future__ import annotations

import os
import socket

import pyarrow.fs as pafs
import pytest
import torch

from tests.helpers import VOCAB, no_ray, tiny_llama

torch.set_num_threads(1)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token: another cluster's may sit in ~/.ray
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# -- fixtures ----------------------------------------------------------------


@pytest.fixture(scope="session")
def _shared_ray():
    """Shuts down, at the end, the Ray that ``local_ray`` keeps up between modules."""
    yield
    no_ray()


@pytest.fixture(scope="module")
def local_ray(_shared_ray):
    """A private 2-CPU Ray with two model slots, for a module's end-to-end jobs.

    It stays up for the next module that asks for it: starting one costs about 8 s on these cores, and
    a dozen modules ask. It starts anew where the environment changed since it started (a module's
    object store sets its credentials, which Ray's workers inherit when it starts). A module that needs
    no Ray, or a cluster of its own, calls ``no_ray`` first."""
    import ray

    global _RAY_ENV
    if ray.is_initialized() and _environment() != _RAY_ENV:
        no_ray()
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, resources={"replica": 2}, include_dashboard=False, object_store_memory=150 * 2**20, log_to_driver=False)
        _RAY_ENV = _environment()  # after ray.init, which sets some of its own
    yield


#: The environment the shared local Ray started with: its workers' environment.
_RAY_ENV: dict[str, str] = {}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


@pytest.fixture
def without_ray():
    no_ray()


@pytest.fixture(scope="session")
def tokenizer():
    from fucina_jobs.models.loading import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def gemma_tokenizer():
    """The second embedded model's tokenizer: SentencePiece, 262,144 ids, byte-fallback and control tokens."""
    from fucina_jobs.models.loading import load_tokenizer

    return load_tokenizer("gemma3-270m")


@pytest.fixture(scope="session")
def tiny_model():
    """Random-weight Llama with the real vocab, float64 (robust against fp32 near-ties)."""
    return tiny_llama(VOCAB)


@pytest.fixture(scope="session")
def tiny_runner(tiny_model):
    from fucina_jobs.models.hf_runner import HFRunner

    return HFRunner(tiny_model)


@pytest.fixture(scope="session")
def padded_runner():
    """The same shape with a padded vocab: logits rows wider than the tokenizer."""
    from fucina_jobs.models.hf_runner import HFRunner

    return HFRunner(tiny_llama(VOCAB + 8, seed=1))


@pytest.fixture(scope="session")
def real_engine():
    from fucina_jobs.engines import FucinaEngine
    from fucina_jobs.config import ModelConfig

    return FucinaEngine.load(ModelConfig(device="cpu"))


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


def pytest_collection_modifyitems(config, items):
    """Under ``-n`` (pytest-xdist) the other worker's Ray runs beside every test, so the tests marked ``alone``
    are left out; the test command runs them on their own after (``pytest -m alone``)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # set in each of xdist's workers, which collect the tests
        return
    alone = [item for item in items if item.get_closest_marker("alone")]
    if alone:
        config.hook.pytest_deselected(items=alone)
        items[:] = [item for item in items if not item.get_closest_marker("alone")]
