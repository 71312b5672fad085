"""A CPU replica runs torch on its share of its node's CPUs, on a real two-node Ray.

Ray starts an actor that asks for no CPU with ``OMP_NUM_THREADS=1``; a replica
left so decoded at half the speed of two threads on a 2-core host."""

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fucina_jobs.config import validate
from fucina_jobs.pipeline.ray_pool import RayReplica
from fucina_jobs.data.rundir import RunDir

from tests.helpers import REPO, no_ray

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nodes():
    no_ray()  # the tests' shared local Ray, if up: this module joins a cluster of its own
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"replica": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=2, resources={"replica": 2})
    ray.init(address=cluster.address, log_to_driver=False)
    yield [n["NodeID"] for n in ray.nodes()]
    ray.shutdown()
    cluster.shutdown()


def test_each_replica_takes_its_nodes_cpus_over_its_replica_units(nodes, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "text": "x", "schema": {"type": "object"}}\n')
    cfg = validate(
        {
            "name": "t",
            "engine": {"name": "canned"},
            "constraint": {},
            "dataset": {"path": str(data), "schema_field": "schema"},
            "output": {"dir": str(tmp_path / "out")},
        }
    )
    out = RunDir.for_config(str(tmp_path / "out"), tmp_path, "0" * 64)
    threads = {}
    for node in nodes:
        actor = (
            ray.remote(RayReplica)
            .options(num_cpus=0, resources={"replica": 1}, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            .remote(cfg.model_dump(), constraint=None, model_path="unused", base=str(REPO), out=out, run_id="test", replica=0)
        )
        units = next(n["Resources"]["replica"] for n in ray.nodes() if n["NodeID"] == node)
        threads[units] = ray.get(actor.__ray_call__.remote(lambda self: __import__("torch").get_num_threads()))
        ray.kill(actor)
    assert threads == {1: 2, 2: 1}
