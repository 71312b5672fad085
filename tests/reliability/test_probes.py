"""Issue 28: mistakes that hung for minutes (a cluster address, a store without credentials) fail in seconds, in one line.

Nothing here starts a Ray of this process: the probes run before any does. The
Ray cluster that must pass the probe is a real head node (``ray.cluster_utils``).
"""

import http.server
import re
import socket
import threading

import pytest
import ray

from fucina_jobs.config import ConfigError, validate
from fucina_jobs.pipeline.ray_pool import probe_cluster, replica_count
from fucina_jobs.data.rundir import RunDir, is_our_manifest
from fucina_jobs.data.storage import probe

from tests.helpers import REPO, job_dict, ray_running

pytestmark = pytest.mark.usefixtures("without_ray")  # each checks that no Ray started


@pytest.fixture
def http_port():
    """A local HTTP server: something answers on the port, but not Ray."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)  # Ray connects to the node IP
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_a_cluster_address_where_nothing_listens_fails_at_once():
    """Defect 8: ``runtime.ray_address=127.0.0.1:9`` printed nothing for 200 s."""
    assert not ray.is_initialized()
    with pytest.raises(ConfigError, match=r"runtime.ray_address=127.0.0.1:9: no Ray cluster answers at .*:9 \(Connection refused\)"):
        probe_cluster("127.0.0.1:9")


def test_a_cluster_address_where_something_else_answers_fails_at_once(http_port):
    with pytest.raises(ConfigError, match="answers, but it is not a Ray cluster"):
        probe_cluster(f"127.0.0.1:{http_port}")


@pytest.mark.alone
def test_auto_without_a_cluster_fails_at_once(monkeypatch, tmp_path):
    """Defect 8: ``ray_address=auto`` with no cluster took 89 s, then a traceback."""
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():
        pytest.skip("a Ray cluster runs on this machine: auto finds it, as Ray does")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no record of an earlier `ray start`
    with pytest.raises(ConfigError, match="runtime.ray_address=auto: Could not find any running Ray instance.*ray start --head"):
        probe_cluster("auto")


@pytest.mark.alone
def test_auto_with_a_stale_record_of_an_earlier_ray_start_fails_at_once(monkeypatch, tmp_path):
    """``ray start`` records its address; after that cluster is gone, auto resolves to a port where nothing listens."""
    if why := ray_running():
        pytest.skip(why)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"runtime.ray_address=auto: no Ray cluster answers at .*:9"):
        probe_cluster("auto")


@pytest.mark.slow
def test_a_real_ray_head_passes_the_probe():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    address = cluster.address
    try:
        assert not ray.is_initialized()  # the probe really asks the port: it trusts a driver already connected
        assert probe_cluster(address) is None
    finally:
        cluster.shutdown()
    with pytest.raises(ConfigError, match=re.escape(f"runtime.ray_address={address}: no Ray cluster answers at {address}")):
        probe_cluster(address)  # the same address, once the head is gone


def _reachable(host: str) -> bool:
    try:
        socket.create_connection((host, 443), timeout=2).close()
        return True
    except OSError:
        return False


def test_an_object_store_that_does_not_answer_fails_in_seconds(tmp_path):
    """Defect 9: a ``gs://`` output without credentials printed nothing for 240 s; every scheme gets the same probe."""
    if _reachable("storage.googleapis.com"):
        pytest.skip("Google Cloud Storage is reachable from here: without credentials it answers, and the probe passes")
    with pytest.raises(ConfigError, match=r"gs://fucina-no-bucket/out: (the store did not answer within 2s|cannot reach it)"):
        probe("gs://fucina-no-bucket/out", tmp_path, timeout=2)


def test_output_dir_that_is_a_file_or_empty_says_so(tmp_path):
    """``output.dir`` naming a file said "File exists; rerun to resume"; an empty one wrote into the working directory."""
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ConfigError, match=r"output.dir=.*/taken is a file, not a folder"):
        RunDir.for_config(str(tmp_path / "taken"), tmp_path, "a" * 64)
    with pytest.raises(ConfigError, match=r"^invalid job config: output.dir='': is empty; set it to a folder or a URI"):
        validate(job_dict(""))


def test_replicas_are_capped_by_shards_and_by_free_memory(monkeypatch, tmp_path):
    """``runtime.replicas=64`` for 3 shards started over 56 workers and took 13 GB in a minute."""
    import fucina_jobs.pipeline.ray_pool as ray_pool

    cfg = validate(job_dict(tmp_path, runtime={"replicas": 64}))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 2**20)
    assert replica_count(cfg, str(model), shards=3) == 3
    monkeypatch.setattr(ray_pool, "available_memory", lambda: 5 * ray_pool.replica_memory(cfg, str(model)))  # a small machine
    assert replica_count(cfg, str(model), shards=3) == 3
    assert replica_count(cfg, str(model), shards=10) == 4  # 80% of free memory, over one replica's weights and runtime


def test_our_manifest_is_known_by_its_content():
    """Defect 6: any root ``manifest.json`` (a web app's) was taken for ours."""
    assert not is_our_manifest({"name": "My App", "start_url": "/", "display": "standalone"})
    assert is_our_manifest({"fingerprint": "f", "status": "complete", "name": "job"})


def test_fresh_refuses_a_folder_with_a_web_app_manifest_and_keeps_its_files(tmp_path):
    """Defect 6: output.fresh=true deleted the user's ``logs/replica-set-rs0.log`` beside their own ``manifest.json``."""
    from fucina_jobs.pipeline.driver import Job

    out = tmp_path / "site"
    (out / "logs").mkdir(parents=True)
    (out / "manifest.json").write_text('{"name": "My App", "start_url": "/"}')
    (out / "logs" / "replica-set-rs0.log").write_text("mongod")
    with pytest.raises(ConfigError, match="no manifest.json of ours: it is not a run of fucina_jobs"):
        Job(validate(job_dict(out, output={"fresh": True})), REPO).run()
    assert (out / "manifest.json").read_text().startswith('{"name": "My App"') and (out / "logs" / "replica-set-rs0.log").exists()
