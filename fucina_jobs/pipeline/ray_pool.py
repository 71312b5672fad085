"""Replica actors on Ray: shards go to whichever replica has a free slot.

Each replica holds ``runtime.shards_in_flight`` shards at once, so its decoder
has the next shard's rows before the last one's finish (``decode_loop.py``).

On GPUs a replica asks for one GPU. On CPUs it asks for one unit of a custom
``replica`` resource and no CPU, so Ray's own tasks never starve behind model
replicas. A replica that dies is restarted by Ray; its shard is retried a
bounded number of times and then given up, so the driver can turn its rows
into rejects that carry the error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter, deque
from typing import Any, Callable, Iterator

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayError, RayTaskError

from .config import ConfigError, JobConfig
from .job_constraint import JobConstraint
from .replica import ShardWorker
from .rundir import RunDir
from .shard_writer import ShardSummary

log = logging.getLogger(__name__)

ACTOR_PREFIX = "fucina-replica-"


class ReplicaPool:
    def __init__(self, cfg: JobConfig, constraint: JobConstraint | None, model_path: str, base: str, out: RunDir, run_id: str):
        self.cfg = cfg
        self.args = (cfg.model_dump(), constraint, model_path, base, out, run_id)
        self.retries = 0
        self._started_ray = False
        self.actors: list[Any] = []

    def __enter__(self) -> "ReplicaPool":
        self._connect()
        options = self._placement()
        worker = ray.remote(ShardWorker)
        self.actors = [
            worker.options(name=f"{ACTOR_PREFIX}{i}", max_restarts=self.cfg.runtime.max_retries, max_task_retries=0,
                           max_concurrency=self.cfg.runtime.shards_in_flight + 1, **options)  # + 1: ping answers while shards run
            .remote(*self.args, i)
            for i in range(self.cfg.runtime.replicas)
        ]
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=self.cfg.runtime.replica_timeout_s)
        except GetTimeoutError:
            self.__exit__(None, None, None)
            raise ConfigError(
                f"{self.cfg.runtime.replicas} replica(s) did not start within runtime.replica_timeout_s="
                f"{self.cfg.runtime.replica_timeout_s}: the cluster lacks the resources they ask for ({options})"
            ) from None
        return self

    def __exit__(self, *exc: Any) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self._started_ray:
            ray.shutdown()

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.cfg.runtime.ray_address
        env = {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}}
        if address is None:
            # A private local cluster needs no token; without this, a token left in
            # ~/.ray by another cluster on the host makes our workers fail to connect.
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(address="local", resources={"replica": self.cfg.runtime.replicas}, include_dashboard=False,
                     runtime_env=env, logging_level=logging.WARNING, log_to_driver=False)
        else:
            ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
        self._started_ray = True

    def _placement(self) -> dict[str, Any]:
        resources = ray.cluster_resources()
        if self.cfg.model.device == "cuda" and resources.get("GPU", 0) < 1:
            raise ConfigError("model.device=cuda, but the Ray cluster has no GPU; use model.device=auto or cpu, or add GPU nodes")
        wants_gpu = self.cfg.model.device == "cuda" or (self.cfg.model.device == "auto" and resources.get("GPU", 0) > 0)
        if wants_gpu:
            return {"num_gpus": 1}
        if resources.get("replica", 0) < 1:
            raise ConfigError(
                "the Ray cluster has no GPU and no 'replica' resource: start CPU nodes with "
                "ray start --resources='{\"replica\": 1}' (one unit per model replica the node can hold)"
            )
        return {"num_cpus": 0, "resources": {"replica": 1}}

    def map(
        self, shards: deque[int], payload: Callable[[int], tuple], max_retries: int, on_dispatch: Callable[[int, Any], None] | None = None
    ) -> Iterator[tuple[int, ShardSummary | None, str | None]]:
        """Run ``ShardWorker.run(shard, *payload(shard))``; yield (shard, summary, None) or, after its retries, (shard, None, error)."""
        # A slot per shard a replica may hold; round-robin, so every replica gets its first shard before any its second.
        queue, free = deque(shards), deque(r for _ in range(self.cfg.runtime.shards_in_flight) for r in range(len(self.actors)))
        attempts: Counter[int] = Counter()
        pending: dict[Any, tuple[int, int]] = {}
        while queue or pending:
            if not (free or pending):
                yield from ((shard, None, "no replica is left alive") for shard in queue)
                return
            while queue and free:
                shard, replica = queue.popleft(), free.popleft()
                pending[self.actors[replica].run.remote(shard, *payload(shard))] = (shard, replica)
                if on_dispatch is not None:
                    on_dispatch(shard, self.actors[replica])
            [ref], _ = ray.wait(list(pending), num_returns=1)
            shard, replica = pending.pop(ref)
            try:
                result = ray.get(ref)
            except RayError as err:
                attempts[shard] += 1
                reason = failure_reason(err)
                if self._await_restart(replica):
                    free.append(replica)
                if attempts[shard] > max_retries or not (free or pending):
                    log.error("shard %d failed %d times, its rows become rejects: %s", shard, attempts[shard], reason)
                    yield shard, None, reason
                else:
                    self.retries += 1
                    log.warning("shard %d failed on replica %d (%s); retrying", shard, replica, reason)
                    queue.appendleft(shard)
                continue
            free.append(replica)
            yield shard, result, None

    def _await_restart(self, replica: int) -> bool:
        """Wait until Ray has restarted a failed replica; False if it is gone for good."""
        deadline = time.monotonic() + self.cfg.runtime.replica_timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(self.actors[replica].ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return True
            except ActorUnavailableError:
                time.sleep(1.0)
            except (ActorDiedError, GetTimeoutError):
                break
        log.error("replica %d is gone and will get no more shards", replica)
        return False


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_reason(err: RayError) -> str:
    """One line for a reject: the exception a replica raised, or why the replica died, without Ray's colour codes."""
    if isinstance(err, RayTaskError) and err.cause is not None:
        text = _ANSI.sub("", str(err.cause)).strip()
        return f"{type(err.cause).__name__}: {text.splitlines()[0]}" if text else type(err.cause).__name__
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("ray::")), lines[0] if lines else type(err).__name__)
