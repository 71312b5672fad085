"""Replica actors on Ray: shards go to whichever replica has a free slot.

Each replica holds ``runtime.shards_in_flight`` shards at once, so its decoder
has the next shard's rows before the last one's finish (``decode_loop.py``).

On GPUs a replica asks for one GPU. On CPUs it asks for one unit of a custom
``replica`` resource and no CPU, so Ray's own tasks never starve behind model
replicas; since Ray then starts it with one intra-op thread
(``OMP_NUM_THREADS=1``), it takes its share of its node's CPUs itself
(``node_threads``). A replica that dies is restarted by Ray; its shard is
retried a bounded number of times and then given up, so the driver can turn
its rows into rejects that carry the error.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import socket
import time
from collections import Counter, deque
from typing import Any, Callable, Iterator

import ray
import torch
from ray.exceptions import ActorDiedError, GetTimeoutError, RayError, RayTaskError

from ..private_apis import ray_bootstrap_address
from ..config import ConfigError, JobConfig, CannedEngineConfig
from .job_constraint import JobConstraint
from .replica import ShardWorker
from ..data import RunDir
from .shard_writer import ShardSummary
from .signals import deferred, reclaim

log = logging.getLogger(__name__)

ACTOR_PREFIX = "fucina-replica-"


class ReplicaPool:
    def __init__(self, cfg: JobConfig, *, constraint: JobConstraint | None, model_path: str, base: str, out: RunDir, run_id: str, shards: int):
        self.cfg = cfg
        self.worker_args = {"constraint": constraint, "model_path": model_path, "base": base, "out": out, "run_id": run_id}
        self.replicas = replica_count(cfg, model_path, shards)
        self.retries = 0
        self.gone: set[int] = set()  # replicas that did not come back
        self._started_ray = False
        self.actors: list[Any] = []

    def __enter__(self) -> "ReplicaPool":
        self._started_ray = connect(self.cfg, self.replicas)
        options = self._placement()
        worker = ray.remote(RayReplica)
        self.actors = [
            worker.options(
                name=f"{ACTOR_PREFIX}{i}",
                max_restarts=self.cfg.runtime.max_retries,
                max_task_retries=0,
                max_concurrency=self.cfg.runtime.shards_in_flight + 1,
                **options,
            ).remote(self.cfg.model_dump(), **self.worker_args, replica=i)  # + 1: ping answers while shards run
            for i in range(self.replicas)
        ]
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=self.cfg.runtime.replica_timeout_s)
        except GetTimeoutError:
            self.__exit__(None, None, None)
            raise ConfigError(
                f"{self.replicas} replica(s) did not start within runtime.replica_timeout_s="
                f"{self.cfg.runtime.replica_timeout_s}: the cluster lacks the resources they ask for ({options})"
            ) from None
        return self

    def __exit__(self, *exc: Any) -> None:
        with deferred():  # a stop signal waits for the replicas to go: Ray torn down half-way aborts the process
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
            if self._started_ray:
                ray.shutdown()

    def _placement(self) -> dict[str, Any]:
        resources = ray.cluster_resources()
        if self.cfg.model.device == "cuda" and resources.get("GPU", 0) < 1:
            raise ConfigError("model.device=cuda, but the Ray cluster has no GPU; use model.device=auto or cpu, or add GPU nodes")
        wants_gpu = self.cfg.model.device == "cuda" or (self.cfg.model.device == "auto" and resources.get("GPU", 0) > 0)
        if wants_gpu:
            self._fit(int(resources["GPU"]), "GPU")
            return {"num_gpus": 1}
        if resources.get("replica", 0) < 1:
            raise ConfigError(
                "the Ray cluster has no GPU and no 'replica' resource: start CPU nodes with "
                "ray start --resources='{\"replica\": 1}' (one unit per model replica the node can hold)"
            )
        self._fit(int(resources["replica"]), "'replica' resource unit")
        return {"num_cpus": 0, "resources": {"replica": 1}}

    def _fit(self, slots: int, what: str) -> None:
        """On a local Ray, start no more replicas than it has slots for: the rest would wait for runtime.replica_timeout_s.
        (A cluster's autoscaler may add nodes for them, so there they are all asked for.)"""
        if self.cfg.runtime.ray_address is None and self.replicas > slots:
            log.warning("runtime.replicas=%d: starting %d, one per %s of this Ray", self.cfg.runtime.replicas, slots, what)
            self.replicas = slots

    def map(
        self, shards: deque[int], payload: Callable[[int], tuple], max_retries: int, on_dispatch: Callable[[int, Any], None] | None = None
    ) -> Iterator[tuple[int, ShardSummary | None, str | None]]:
        """Run ``ShardWorker.run(shard, *payload(shard))``; yield (shard, summary, None) or, after its retries, (shard, None, error).

        A failed shard goes back to the queue at once, for any replica with a free slot: the job never
        waits on a replica Ray is restarting (on a lost node, that is until ``runtime.replica_timeout_s``)."""
        # A slot per shard a replica may hold; round-robin, so every replica gets its first shard before any its second.
        queue, free = deque(shards), deque(r for _ in range(self.cfg.runtime.shards_in_flight) for r in range(len(self.actors)))
        attempts: Counter[int] = Counter()
        pending: dict[Any, tuple[int, int]] = {}
        restarts = Restarts(self.actors, self.cfg.runtime.replica_timeout_s, self.gone)
        while queue or pending:
            if not (free or pending or restarts):
                yield from ((shard, None, "no replica is left alive") for shard in queue)
                return
            while queue and free:
                shard, replica = queue.popleft(), free.popleft()
                pending[self.actors[replica].run.remote(shard, *payload(shard))] = (shard, replica)
                if on_dispatch is not None:
                    on_dispatch(shard, self.actors[replica])
            ready, _ = ray.wait(list(pending) + restarts.probes(), num_returns=1, timeout=_POLL_S)
            if not ready or ready[0] not in pending:
                free.extend(restarts.settle(ready))
                continue
            shard, replica = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except RayError as err:
                attempts[shard] += 1
                reason = failure_reason(err)
                restarts.lost_slot(replica)
                if attempts[shard] > max_retries or not (free or pending or restarts):
                    log.error("shard %d failed %d times, its rows become rejects: %s", shard, attempts[shard], reason)
                    yield shard, None, reason
                else:
                    self.retries += 1
                    log.warning("shard %d failed on replica %d (%s); retrying", shard, replica, reason)
                    queue.appendleft(shard)
                continue
            free.append(replica)
            yield shard, result, None


#: Why 1 s: how often the dispatch loop looks at replicas Ray is restarting, and how long it waits
#: before asking again one that answered "unavailable" (it is on its way up).
_POLL_S = 1.0


class Restarts:
    """Replicas whose shard failed, while Ray restarts them: each gets a ping, and its slots come back when it answers.

    A replica that Ray reports dead, or that has not answered within ``timeout_s`` (its node is gone
    and no other has room for it), joins ``gone`` and gets no more shards. A replica found gone once
    is not waited for again: its other shards in flight fail with it, and are retried at once."""

    def __init__(self, actors: list[Any], timeout_s: float, gone: set[int]):
        self.actors, self.timeout_s, self.gone = actors, timeout_s, gone
        self.slots: Counter[int] = Counter()  # a replica's slots that wait for it
        self.deadline: dict[int, float] = {}
        self.pings: dict[Any, int] = {}
        self.later: dict[int, float] = {}  # replicas to ask again, and when

    def __bool__(self) -> bool:
        return bool(self.slots)

    def lost_slot(self, replica: int) -> None:
        if replica in self.gone:
            return
        self.slots[replica] += 1
        if replica not in self.deadline:
            self.deadline[replica] = time.monotonic() + self.timeout_s
            self._ping(replica)

    def probes(self) -> list[Any]:
        """The pings in flight, after asking again those whose turn came."""
        now = time.monotonic()
        for replica, when in list(self.later.items()):
            if when <= now:
                del self.later[replica]
                self._ping(replica)
        return list(self.pings)

    def settle(self, ready: list[Any]) -> list[int]:
        """The slots that came back: one per slot of each replica that answered. Gives up those past their deadline."""
        back: list[int] = []
        for ref in ready:
            replica = self.pings.pop(ref)
            try:
                ray.get(ref)
            except ActorDiedError:
                self._give_up(replica)
            except RayError:  # unavailable while it restarts, or killed again on its way up (Ray's out-of-memory killer)
                self.later[replica] = time.monotonic() + _POLL_S
            else:
                back += [replica] * self.slots.pop(replica)
                del self.deadline[replica]
        now = time.monotonic()
        for replica in [r for r, deadline in self.deadline.items() if deadline <= now]:
            self._give_up(replica)
        return back

    def _ping(self, replica: int) -> None:
        self.pings[self.actors[replica].ping.remote()] = replica

    def _give_up(self, replica: int) -> None:
        log.error("replica %d is gone and will get no more shards", replica)
        self.gone.add(replica)
        del self.slots[replica], self.deadline[replica]
        self.later.pop(replica, None)
        self.pings = {ref: r for ref, r in self.pings.items() if r != replica}


class RayReplica(ShardWorker):
    """A ``ShardWorker`` as a Ray actor, its torch running on its share of its node's CPUs.

    vLLM binds its own CPU threads: its CPU attention fails if torch's count changes under it."""

    def __init__(self, cfg: dict[str, Any], **kwargs: Any):
        if cfg["engine"]["name"] != "vllm":
            torch.set_num_threads(node_threads())
        super().__init__(cfg, **kwargs)
        # What is alive now (the model, the engine) lives as long as this actor. Frozen, it is skipped by the
        # collector's full passes, which at 128 streams otherwise walk it every few steps
        # (docs/history/BENCHMARKS.md, "The collector's full passes skip the model").
        gc.collect()
        gc.freeze()


def connect(cfg: JobConfig, replicas: int) -> bool:
    """Join ``runtime.ray_address``, or start a private local Ray with ``replicas`` replica slots; True when this call started it.

    A Ray already up in this process is used as it is (False): whoever started it shuts it down."""
    if ray.is_initialized():
        return False
    address = cfg.runtime.ray_address
    env = {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}}
    if address is None:
        # A private local cluster needs no token; without this, a token left in
        # ~/.ray by another cluster on the host makes our workers fail to connect.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(
            address="local",
            resources={"replica": replicas},
            include_dashboard=False,
            runtime_env=env,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    else:
        ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
    reclaim()  # ray.init put its own SIGTERM handlers in place of ours
    return True


def node_threads() -> int:
    """This node's CPUs over the replicas it holds (its GPUs, else its ``replica`` units).

    Ray sets ``OMP_NUM_THREADS`` to an actor's ``num_cpus``, 1 where that is 0, and a CPU
    replica on one thread decoded at half the speed of two (docs/history/BENCHMARKS.md, "Kernel
    vector width and replica threads")."""
    node = ray.get_runtime_context().get_node_id()
    resources = next(n["Resources"] for n in ray.nodes() if n["NodeID"] == node)
    slots = resources.get("GPU") or resources.get("replica") or 1
    return max(1, int(resources.get("CPU", os.cpu_count() or 1) // slots))


def replica_count(cfg: JobConfig, model_path: str, shards: int) -> int:
    """``runtime.replicas``, capped at the shards there are to decode and, for the local Ray we start, at what this machine's memory holds.

    On a cluster Ray places replicas by its resources, and a Ray the caller started
    has the slots the caller gave it (``ReplicaPool._fit``), so only the shard count caps them there."""
    wanted = cfg.runtime.replicas
    count = max(1, min(wanted, shards))
    if count < wanted:
        log.warning("runtime.replicas=%d: starting %d, one per shard to decode", wanted, count)
    if cfg.runtime.ray_address is None and not ray.is_initialized():
        free, each = available_memory(), replica_memory(cfg, model_path)
        fits = max(1, int(0.8 * free // each)) if free else count
        if fits < count:
            log.warning(
                "runtime.replicas=%d: starting %d, as many as this machine's free memory holds (%.1f GiB free, about %.1f GiB per replica)",
                wanted,
                fits,
                free / 2**30,
                each / 2**30,
            )
            count = fits
    return count


#: What a replica takes besides its weights: the Python, torch and Ray runtime, the KV cache, the engine's buffers.
REPLICA_OVERHEAD = 600 * 2**20
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def replica_memory(cfg: JobConfig, model_path: str) -> int:
    """Bytes one replica is expected to hold: its model's weight files (none for the canned engine) plus ``REPLICA_OVERHEAD``."""
    if isinstance(cfg.engine, CannedEngineConfig) or not os.path.isdir(model_path):
        return REPLICA_OVERHEAD
    weights = sum(e.stat().st_size for e in os.scandir(model_path) if e.name.endswith(_WEIGHT_SUFFIXES) and e.is_file())
    return weights + REPLICA_OVERHEAD


def available_memory() -> int | None:
    """Bytes the kernel can give without swapping (``MemAvailable``), or None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def probe_cluster(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds, in one line, when ``runtime.ray_address`` names no Ray cluster.

    ``ray.init`` retries an address where nothing answers, or where something other
    than Ray does, for minutes; this resolves the address as Ray does (``auto``:
    ``RAY_ADDRESS``, then the last ``ray start`` on this machine) and asks the port
    for the HTTP/2 greeting that Ray's gRPC servers answer."""
    if ray.is_initialized():  # a caller that connected Ray itself (tests, notebooks) is trusted
        return
    key = f"runtime.ray_address={address}"
    if address.startswith("ray://"):
        host, _, port = address[len("ray://") :].partition(":")
        target = f"{host}:{port or 10001}"
    else:
        try:
            target = ray_bootstrap_address(address)
        except (ConnectionError, ValueError) as err:
            raise ConfigError(
                f"{key}: {' '.join(str(err).split())} (start one with `ray start --head`, or leave runtime.ray_address unset for a private local Ray)"
            ) from None
    host, _, port = target.rpartition(":")
    try:
        answered = _speaks_http2(host, int(port), timeout)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{key}: no Ray cluster answers at {target} ({getattr(err, 'strerror', None) or err}); check the address and "
            "that the cluster is up (`ray status`)"
        ) from None
    if not answered:
        raise ConfigError(
            f"{key}: {target} answers, but it is not a Ray cluster (no gRPC there); give the head node's GCS address (host:6379 by default)"
        )


def _speaks_http2(host: str, port: int, timeout: float) -> bool:
    """True when the server at host:port answers an HTTP/2 client preface with a SETTINGS frame, as every gRPC server does."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS frame
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(preface)
        head = b""
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    return len(head) == 9 and head[3] == 0x04  # a frame header: length (3 bytes), then the type, 4 = SETTINGS


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_reason(err: RayError) -> str:
    """One line for a reject: the exception a replica raised, or why the replica died, without Ray's colour codes."""
    if isinstance(err, RayTaskError) and err.cause is not None:
        text = _ANSI.sub("", str(err.cause)).strip()
        return f"{type(err.cause).__name__}: {text.splitlines()[0]}" if text else type(err.cause).__name__
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("ray::")), lines[0] if lines else type(err).__name__)
