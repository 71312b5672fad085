"""The same job on a simulated 2-node Ray cluster (one replica per node), into a local folder and into S3, and the loss of a node."""

import pytest
import ray
from ray.cluster_utils import Cluster

from fucina_jobs.bench.pipeline import generate, job_config
from fucina_jobs.config import validate
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, assert_exactly_once, job_dict, no_ray, read_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes(s3):  # s3 first: the nodes' workers inherit its credentials
    no_ray()  # the tests' shared local Ray, if up: this module joins a cluster of its own
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"replica": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"replica": 1})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_job_runs_across_two_nodes(two_nodes, tmp_path):
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    out = tmp_path / "run"
    cfg = validate(job_dict(out, dataset={"limit": 2}, runtime={"shard_size": 1, "ray_address": "auto"}))
    summary = Job(cfg, REPO).run()
    assert summary.ok
    assert_exactly_once(out, {"inv-001", "inv-002"})
    assert {s["replica"] for s in read_dir(out, "stats")} == {0, 1}


def test_two_nodes_write_to_one_s3_output(two_nodes, s3, tmp_path):
    data = tmp_path / "in.jsonl"
    generate(data, 8)
    out = s3("cluster/run")
    raw = job_config(data, out, 2, 2) | {"runtime": {"replicas": 2, "shard_size": 2, "ray_address": "auto"}}
    summary = Job(validate(raw), REPO).run()
    assert summary.ok and summary.shards == 4
    assert_exactly_once(out, {f"r{i:08d}" for i in range(8)})
    assert {s["replica"] for s in read_dir(out, "stats")} == {0, 1}


def test_losing_a_node_mid_run_loses_no_row(two_nodes, tmp_path, caplog):
    """The worker node dies while its replica holds shards: they are retried on the head's replica, exactly once,
    without waiting for the lost replica, which Ray cannot restart (no other node has room for it)."""
    worker = next(n for n in two_nodes.worker_nodes)
    lost = []

    def on_dispatch(shard, actor):
        lost.append(shard)
        if len(lost) == 2:  # round-robin: each replica holds a shard now, and the worker's dies holding it
            two_nodes.remove_node(worker, allow_graceful=False)

    out = tmp_path / "run"
    runtime = {"shard_size": 1, "ray_address": "auto", "replica_timeout_s": 120}  # two model loads on a busy machine
    summary = Job(validate(job_dict(out, dataset={"limit": 4}, decoding={"max_tokens": 48}, runtime=runtime)), REPO).run(on_dispatch)
    assert lost and summary.ok and summary.retries >= 1
    assert_exactly_once(out, {"inv-001", "inv-002", "inv-003", "inv-004"})
    assert {s["replica"] for s in read_dir(out, "stats")} <= {0, 1}
    assert "is gone" not in caplog.text, "the job finished before the lost replica's runtime.replica_timeout_s ran out"
