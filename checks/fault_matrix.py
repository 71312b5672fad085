"""The fault matrix: hostile events against real ``python -m fucina_jobs run`` processes.

Each case runs the invoice job on a small dataset (8 rows, 8 tokens each, shards
of 2) into a fresh output dir, injects its fault, reruns the same command where
the fault calls for it, and then counts rows in, rows out (records plus
rejects), duplicates, losses and tracebacks in the runs' logs. Each of these
must be 0: the script exits 1 otherwise.

    python checks/fault_matrix.py                      # every case, table on stdout
    python checks/fault_matrix.py --cases ctrl_c,full_disk --work /tmp/faults

Full disk needs a small tmpfs (``mount -t tmpfs``, so root); the case is
skipped, saying why, where mounting is not allowed. The ``s3_*`` cases read
and write ``s3://`` through a real failing HTTP proxy in front of moto's S3
server on 127.0.0.1 (``faulty_store.py``), on the canned engine (the storage is
under test, not the model: every row is a ``schema_violation`` reject). Only processes this script
started are signalled: a run's process group, and replica workers found among
its descendants.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Callable

from faulty_store import Rule, S3Store
from fucina_jobs.config import SHIPPED
from fucina_jobs.data.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
IDS = [f"r{i:02d}" for i in range(1, 9)]


@dataclass
class Outcome:
    case: str
    _: KW_ONLY
    rows_in: int = 0
    rows_out: int = 0
    duplicates: int = 0
    losses: int = 0
    exits: list[int] = field(default_factory=list)
    status: str = ""
    note: str = ""
    tracebacks: int = 0  # Python tracebacks in the case's run logs (its stops must be one line each)


class Case:
    """One fault against one output dir; ``run`` starts ``python -m fucina_jobs run`` with this case's overrides."""

    def __init__(self, name: str, work: Path, dataset: Path):
        self.name, self.dataset = name, dataset
        self.out = work / name / "out"
        self.started = 0
        self.exits: list[int] = []
        self.note = ""
        self.counted: Outcome | None = None  # set by a case whose outputs vanish afterwards (a tmpfs)
        self.expected: list[str] | None = None  # the input's ids, where the dataset is no plain jsonl (else read from it)
        self.data_uri: str | None = None  # dataset.path and output.dir on an object store (the s3_* cases)
        self.out_uri: str | None = None

    @property
    def output(self) -> str:
        return self.out_uri or str(self.out)

    def start(self, *overrides: str) -> subprocess.Popen:
        args = [
            f"dataset.path='{self.data_uri or self.dataset}'",  # quoted: a URI's query holds = and &
            "dataset.limit=null",
            "decoding.max_tokens=8",
            "runtime.replicas=1",
            "runtime.streams=2",
            "runtime.shard_size=2",
            f"output.dir='{self.output}'",
            *overrides,
        ]
        log = open(self.out.parent / f"run-{self.started}.log", "w")
        self.started += 1
        return subprocess.Popen(
            [sys.executable, "-m", "fucina_jobs", "run", "conf=extract_invoices", *args],
            cwd=REPO,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_sigint,
        )

    def finish(self, proc: subprocess.Popen, timeout: float = 900) -> int:
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        self.exits.append(code)
        return code

    def run(self, *overrides: str) -> int:
        return self.finish(self.start(*overrides))

    def committed(self) -> int:
        return sum(f.key is not None for f in RunDir.open(self.output).shard_files("stats"))

    def manifest(self) -> dict:
        return RunDir.open(self.output).read_manifest() or {}

    def wait(self, proc: subprocess.Popen, predicate: Callable[[], bool], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the run ended (or timed out) before the fault point")
            time.sleep(0.1)

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        os.killpg(proc.pid, sig)
        self.finish(proc)


def _default_sigint() -> None:
    # A shell that starts this script in the background ignores SIGINT for it, and children inherit that:
    # give each run the disposition it has under a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found += children
        frontier += children
    return found


def replica_pid(proc: subprocess.Popen) -> int | None:
    for pid in descendants(proc.pid):
        try:
            if (Path("/proc") / str(pid) / "cmdline").read_bytes().startswith(b"ray::ShardWorker"):
                return pid
        except OSError:
            continue
    return None


# -- the cases -----------------------------------------------------------------


def kill9_at_start(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: bool(c.manifest()))
    c.kill(proc)
    c.note = f"killed once the manifest said running, {c.committed()} of 4 shards committed"
    c.run()


def kill9_after_first_shard(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc)
    c.note = f"killed with {c.committed()} of 4 shards committed"
    c.run()


def kill9_before_last_shard(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= len(IDS) // 2 - 1)
    c.kill(proc)
    c.note = f"killed with {c.committed()} of 4 shards committed"
    c.run()


def replica_kill(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: replica_pid(proc) is not None and c.committed() >= 1)
    os.kill(replica_pid(proc), signal.SIGKILL)
    c.finish(proc)
    c.note = "replica killed mid-shard; " + _summary(c, 0)


def two_concurrent_runs(c: Case) -> None:
    first, second = c.start(), c.start()
    c.finish(first)
    c.finish(second)
    refused = next(i for i, code in enumerate(c.exits) if code != 0) if any(c.exits) else None
    c.note = f"refused run: {_last_line(c.out.parent / f'run-{refused}.log')}" if refused is not None else "neither run was refused"


def reshard_between_runs(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc)
    c.run("runtime.shard_size=3")
    c.run("runtime.shard_size=1")
    c.note = f"shard_size 2, killed; then 3: {_summary(c, 1)}; then 1: {_summary(c, 2)}"


def edited_dataset(c: Case) -> None:
    c.run()
    rows = [json.loads(line) for line in c.dataset.read_text().splitlines()]
    rows[0]["text"] += "\nPaid in full."
    rows[-2]["id"], rows[-1]["id"] = "e07", "e08"
    c.dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c.run()
    c.note = "r01 edited, r07/r08 replaced by e07/e08; rerun: " + _summary(c, 1)


def full_disk(c: Case) -> None:
    c.out.mkdir(parents=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=136k", "tmpfs", str(c.out)], capture_output=True, text=True)
    if mount.returncode != 0:
        c.note = f"skipped: cannot mount a tmpfs here ({mount.stderr.strip()})"
        return
    try:
        c.run()
        status = c.manifest().get("status", "-")
        c.note = f"first run (manifest {status}): " + _last_line(c.out.parent / "run-0.log")
        subprocess.run(["mount", "-o", "remount,size=4m", str(c.out)], check=True)  # the user frees space
        c.run()
        c.counted = count(c)
    finally:
        subprocess.run(["umount", str(c.out)], check=False)


def dataset_replaced(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= 1)
    committed = c.committed()
    lines = c.dataset.read_text()
    tmp = c.dataset.with_name(".in.jsonl.part")  # a nightly export: one row added at the top, the file replaced atomically
    tmp.write_text(json.dumps({"id": "n00", "text": json.loads(lines.splitlines()[0])["text"]}) + "\n" + lines)
    os.replace(tmp, c.dataset)
    c.finish(proc)
    c.note = f"replaced (n00 added at the top) with {committed} of 4 shards committed; first run: {_summary(c, 0)}; rerun: "
    c.run()
    c.note += _summary(c, 1)


def symlink_loop(c: Case) -> None:
    docs = c.dataset.with_name("docs")
    docs.mkdir()
    rows = [json.loads(line) for line in c.dataset.read_text().splitlines()]
    for row in rows:
        (docs / f"{row['id']}.txt").write_text(row["text"])
    os.symlink(".", docs / "loop")
    os.symlink("gone.txt", docs / "dangling.txt")
    c.dataset, c.expected = docs, [row["id"] for row in rows] + ["loop", "dangling"]
    proc = c.start("dataset.format=text_dir")
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc)
    c.note = f"docs/loop -> . and a dangling link; killed with {c.committed()} of 5 shards committed; rerun: "
    c.run("dataset.format=text_dir")
    c.note += _summary(c, 1)


def compressed_dataset(c: Case) -> None:
    packed = c.dataset.with_name("in.jsonl.gz")
    packed.write_bytes(gzip.compress(c.dataset.read_bytes()))
    c.expected = [json.loads(line)["id"] for line in c.dataset.read_text().splitlines()]
    c.dataset.unlink()
    c.dataset = packed
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc)
    c.note = f"in.jsonl.gz; killed with {c.committed()} of 4 shards committed; rerun: "
    c.run()
    c.note += _summary(c, 1)


#: What every chunk of an invoice can fill: a grounded vendor and total, null where the chunk writes none.
CHUNK_SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": ["string", "null"], "maxLength": 40, "x-grounded": True},
        "total": {"type": ["number", "null"], "minimum": 0, "x-grounded": {"amount": True, "labels": ["total"]}},
    },
    "required": ["vendor", "total"],
    "additionalProperties": False,
}


def kill9_mid_chunked_row(c: Case) -> None:
    """Rows cut into 4-5 chunks each (``dataset.chunking``): killed while the shards after the first decode their chunks.

    A chunk of 64 tokens holds a few of an invoice's fields, never all, so the schema is two nullable grounded fields:
    under the invoice schema every chunk was refused before decoding (``ungrounded``), and nothing was killed mid-row.
    Shards of one row, one stream and one shard in flight pace the run, a chunk at a time: with two of each, every
    shard had committed before the first commit was seen."""
    schema = c.out.parent / "chunk_schema.json"
    schema.write_text(json.dumps(CHUNK_SCHEMA))
    chunked = ("dataset.chunking.enabled=true", "dataset.chunking.max_tokens=64", "dataset.chunking.overlap_tokens=16")
    chunked += (
        f"constraint.json_schema={schema}",
        "decoding.max_tokens=48",
        "runtime.shard_size=1",
        "runtime.streams=1",
        "runtime.shards_in_flight=1",
    )
    proc = c.start(*chunked)
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc)
    committed = c.committed()
    c.run(*chunked)
    c.note = f"killed with {committed} of 8 shards committed, the next shard's chunks decoding; rerun: {_summary(c, 1)}, chunked rows {_summary(c, 1, 'chunked rows')}"


def ctrl_c(c: Case) -> None:
    proc = c.start()
    c.wait(proc, lambda: c.committed() >= 1)
    c.kill(proc, signal.SIGINT)  # what a terminal sends to its foreground process group
    c.note = "first run: " + _last_line(c.out.parent / "run-0.log")
    c.run()


def _stop(c: Case, point: str, ready: Callable[[], bool], sig: int = signal.SIGTERM, group: bool = False) -> None:
    """Send ``sig`` to the driver (``group``: to its whole process group) once ``ready``, then rerun the same command."""
    proc = c.start()
    c.wait(proc, ready)
    committed = c.committed()
    (os.killpg if group else os.kill)(proc.pid, sig)
    code = c.finish(proc)
    log = (c.out.parent / "run-0.log").read_text(errors="replace")
    dumped = "received at time=" in log or "Traceback" in log  # a native stack dump or a Python traceback
    c.note = (
        f"{signal.Signals(sig).name} {point} ({committed} of 4 shards committed, manifest then {c.manifest().get('status', '-')}, "
        f"{'a dump or traceback' if dumped else 'no traceback'}, exit {code}): {_last_line(c.out.parent / 'run-0.log')}"
    )
    c.run()


def sigterm_at_start(c: Case) -> None:
    _stop(c, "once the manifest said running", lambda: bool(c.manifest()))


def sigterm_mid_run(c: Case) -> None:
    _stop(c, "after the first commit", lambda: c.committed() >= 1)


def sigterm_at_end(c: Case) -> None:
    _stop(c, "once the last shard committed", lambda: c.committed() >= len(IDS) // 2)


def sighup_to_the_group(c: Case) -> None:
    _stop(c, "to the process group (a closed terminal), after the first commit", lambda: c.committed() >= 1, signal.SIGHUP, group=True)


#: The s3_* cases' engine: no model, every row answered ``{}`` at once.
CANNED = ("engine=canned",)


def _on_s3(c: Case, store: S3Store) -> None:
    """Put the case's dataset in the bucket, and its output.dir there too, both through the failing proxy."""
    store.put(f"{c.name}/in.jsonl", c.dataset.read_bytes())
    c.data_uri, c.out_uri = store.uri(f"{c.name}/in.jsonl"), store.uri(f"{c.name}/out")


def _faults(rules: list[Rule]) -> str:
    return ", ".join(f"{r.hits} {r.method} {r.key.strip('/')} {r.fault}" for r in rules)


def s3_throttled_commits(c: Case, store: S3Store) -> None:
    _on_s3(c, store)
    store.rules[:] = [Rule(method="PUT", key="/stats/", fault="slowdown", times=4), Rule(method="PUT", key="/records/", fault="cut", times=2)]
    c.run(*CANNED)
    c.note = f"faults served: {_faults(store.rules)}; {_summary(c, 0)}"
    store.rules.clear()


def s3_refused_commits(c: Case, store: S3Store) -> None:
    _on_s3(c, store)
    store.rules[:] = [Rule(method="PUT", key="/stats/", fault="internal")]
    c.run(*CANNED)
    c.note = f"every commit refused (500, {store.rules[0].hits} times), manifest then {c.manifest().get('status', '-')}: "
    c.note += f"{_last_line(c.out.parent / 'run-0.log')}; the store answers again, rerun: "
    store.rules.clear()
    c.run(*CANNED)
    c.note += _summary(c, 1)


def s3_input_cut_short(c: Case, store: S3Store) -> None:
    _on_s3(c, store)
    body = c.dataset.read_bytes()
    cut = lambda: store.put(f"{c.name}/in.jsonl", body[: len(body) // 3])  # noqa: E731
    store.rules[:] = [Rule(method="GET", key=f"/{c.name}/in.jsonl", fault=None, times=1, before=cut)]
    c.run(*CANNED)
    c.note = f"rewritten to a third after the listing: {_last_line(c.out.parent / 'run-0.log')}; the export finished, rerun: "
    store.rules.clear()
    store.put(f"{c.name}/in.jsonl", body)
    c.run(*CANNED)
    c.note += _summary(c, 1)


def s3_cut_mid_transfer(c: Case, store: S3Store) -> None:
    _on_s3(c, store)
    data = f"/{c.name}/in.jsonl"
    store.rules[:] = [
        Rule(method="HEAD", key=data, fault="stall", times=1),
        Rule(method="GET", key=data, fault="drop", times=3),
        Rule(method="PUT", key="/rejects/", fault="drop", times=2),
    ]
    c.run(*CANNED)
    c.note = f"faults served: {_faults(store.rules)}; {_summary(c, 0)}"
    store.rules.clear()


def s3_credentials_expire(c: Case, store: S3Store) -> None:
    """One shard at a time: the second shard's records upload comes after the first shard's commit, and expires the
    credentials for every request after it (its own upload's completion included)."""
    _on_s3(c, store)

    def expire() -> None:
        if store.rules[0].hits == 2:
            store.rules.append(Rule(fault="expired"))

    store.rules[:] = [Rule(method="PUT", key="/records/", fault=None, times=2, before=expire)]
    c.run(*CANNED, "runtime.shards_in_flight=1")
    refused = store.rules[-1].hits
    store.rules.clear()  # fresh credentials
    committed = c.committed()
    c.note = f"expired after {committed} commit(s) ({refused} requests refused 400 ExpiredToken), manifest then {c.manifest().get('status', '-')}: "
    c.note += f"{_last_line(c.out.parent / 'run-0.log')}; fresh credentials, rerun: "
    c.run(*CANNED, "runtime.shards_in_flight=1")
    c.note += _summary(c, 1)


#: Cases that take the failing object store as well.
S3_CASES: dict[str, Callable[[Case, S3Store], None]] = {
    "s3_throttled_commits": s3_throttled_commits,
    "s3_refused_commits": s3_refused_commits,
    "s3_input_cut_short": s3_input_cut_short,
    "s3_cut_mid_transfer": s3_cut_mid_transfer,
    "s3_credentials_expire": s3_credentials_expire,
}

CASES: dict[str, Callable[[Case], None]] = {
    "kill9_at_start": kill9_at_start,
    "kill9_after_first_shard": kill9_after_first_shard,
    "kill9_before_last_shard": kill9_before_last_shard,
    "replica_kill": replica_kill,
    "two_concurrent_runs": two_concurrent_runs,
    "reshard_between_runs": reshard_between_runs,
    "edited_dataset": edited_dataset,
    "full_disk": full_disk,
    "ctrl_c": ctrl_c,
    "dataset_replaced": dataset_replaced,
    "symlink_loop": symlink_loop,
    "compressed_dataset": compressed_dataset,
    "sigterm_at_start": sigterm_at_start,
    "sigterm_mid_run": sigterm_mid_run,
    "sigterm_at_end": sigterm_at_end,
    "sighup_to_the_group": sighup_to_the_group,
    "kill9_mid_chunked_row": kill9_mid_chunked_row,
}


def _summary(c: Case, run: int, row: str = "shards") -> str:
    """The ``shards ...`` line (or another ``row``) of a run's closing table."""
    path = c.out.parent / f"run-{run}.log"
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith(row)] if path.exists() else []
    return " ".join(lines[-1][len(row) :].split()) if lines else "-"


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip() and "rows:" not in line]
    return re.sub(r"^(\[[^\]]*\])+ - ", "", lines[-1].strip()) if lines else ""  # without the log prefix


def count(c: Case) -> Outcome:
    expected = c.expected or [json.loads(line)["id"] for line in c.dataset.read_text().splitlines()]
    run_dir = RunDir.open(c.output)
    seen = collections.Counter(row_id for kind in ("records", "rejects") for row_id in run_dir.read(kind, ["row_id"]).column("row_id").to_pylist())
    manifest = c.manifest()
    return Outcome(
        c.name,
        rows_in=len(expected),
        rows_out=sum(seen.values()),
        duplicates=sum(n - 1 for n in seen.values() if n > 1),
        losses=sum(1 for i in expected if i not in seen),
        exits=c.exits,
        status=manifest.get("status", "-"),
        note=c.note,
        tracebacks=sum(log.read_text(errors="replace").count("Traceback") for log in c.out.parent.glob("run-*.log")),
    )


def dataset(path: Path) -> Path:
    invoices = [json.loads(line) for line in (SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": invoices[k]["text"]}) + "\n" for k, i in enumerate(IDS)))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [*CASES, *S3_CASES]
    parser.add_argument("--cases", default=",".join(names), help=f"comma-separated, from: {', '.join(names)}")
    parser.add_argument("--work", default="/tmp/fucina-faults", help="scratch folder (emptied first)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    outcomes = []
    with S3Store() as store:  # before any run starts, so that each inherits its credentials
        for name in args.cases.split(","):
            c = Case(name, work, dataset(work / name / "in.jsonl"))
            c.out.parent.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            if name in S3_CASES:
                S3_CASES[name](c, store)
            else:
                CASES[name](c)
            outcomes.append(c.counted or count(c))
            print(f"{name}: done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    print("| case | rows in | rows out | duplicates | losses | tracebacks | exit codes | final manifest | note |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for o in outcomes:
        exits = ", ".join(map(str, o.exits))
        print(f"| {o.case} | {o.rows_in} | {o.rows_out} | {o.duplicates} | {o.losses} | {o.tracebacks} | {exits} | {o.status} | {o.note} |")
    clean = (
        o.duplicates == 0 and o.losses == 0 and o.tracebacks == 0 and o.rows_out == o.rows_in for o in outcomes if not o.note.startswith("skipped")
    )
    return 0 if all(clean) else 1


if __name__ == "__main__":
    sys.exit(main())
