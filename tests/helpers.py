"""What the tests share besides fixtures (those live in the ``conftest.py`` files): ``from tests.helpers import ...``.

Decoding: the real vocab's constants, processors that record or steer the seam,
a runner that logs its feeds, ``decode``. Jobs: the shipped invoice job as a
raw config, readers of a run's outputs, the exactly-once check, a small job
and the command line. Evaluation: a hand-built run directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

import pyarrow as pa
import torch

from fucina_jobs.decoding.batch import BatchDecoder, Generation, Request, SpecConfig
from fucina_jobs.decoding.processor import LogitProcessor
from fucina_jobs.decoding.sampler import SamplingParams
from fucina_jobs.engines import sampling_params, speculation
from fucina_jobs.eval.maskbench import instance_accepted, load_suite  # noqa: F401  (tests import them from here)
from fucina_jobs.eval.maskbench import run_suite as _run_suite
from fucina_jobs.config import SHIPPED, DecodingConfig
from fucina_jobs.data.rundir import RunDir
from fucina_jobs.data.sink import META_FIELDS, REJECT_SCHEMA
from fucina_jobs.data.storage import write_json, write_table

REPO = Path(__file__).resolve().parents[1]
VOCAB = 49152
STOP = 2  # <|im_end|>: SmolLM2's eos and end-of-turn marker
STOPS = frozenset({STOP})
#: A job's default sampling (greedy) and speculation, as the engine builds them; ``dataclasses.replace(GREEDY, temperature=0.8)``.
GREEDY = sampling_params(DecodingConfig())
SPEC = speculation(DecodingConfig().speculative)
INVOICES = [json.loads(line) for line in (SHIPPED / "jobs/invoices/inputs.jsonl").read_text().splitlines()]


# -- processors and runners ------------------------------------------------------


class Recorder(LogitProcessor):
    """Wraps a processor (or none) and logs every call the seam makes."""

    def __init__(self, inner: LogitProcessor | None = None, keep_rows: bool = False):
        self.inner = inner
        self.has_structure = bool(inner is not None and inner.has_structure)
        self.keep_rows = keep_rows
        self.rows: list[torch.Tensor] = []
        self.commits: list[int] = []
        self.resets = 0

    def process(self, logits, history):
        if self.keep_rows:
            self.rows.append(logits.clone())
        return self.inner.process(logits, history) if self.inner is not None else None

    def commit(self, token):
        self.commits.append(int(token))
        if self.inner is not None:
            self.inner.commit(token)

    def reset(self):
        self.resets += 1
        if self.inner is not None:
            self.inner.reset()

    def error(self):
        return self.inner.error() if self.inner is not None else None

    def forced_tokens(self):
        return self.inner.forced_tokens() if self.inner is not None else []

    def valid_prefix_len(self, tokens):
        return self.inner.valid_prefix_len(tokens) if self.inner is not None else len(tokens)


class StopAfter(LogitProcessor):
    """No structure: after ``n`` commits only ``stop`` is selectable."""

    def __init__(self, n: int, stop: int = STOP):
        self.n, self.stop, self.seen = n, stop, 0

    def process(self, logits, history):
        if self.seen >= self.n:
            keep = logits[self.stop].clone()
            logits.fill_(float("-inf"))
            logits[self.stop] = keep
        else:
            logits[self.stop] = float("-inf")

    def commit(self, token):
        self.seen += 1

    def reset(self):
        self.seen = 0


class LogsTurns:
    """A mixin for a processor class that still looks ahead (``look_paths``): it logs its commits and counts
    the rows ``process`` processed in turn. The class that uses it sets ``commits`` and ``in_turn``."""

    commits: list[int]
    in_turn: int

    def process(self, logits, history):
        self.in_turn += 1
        return super().process(logits, history)

    def commit(self, token):
        self.commits.append(int(token))
        super().commit(token)


class RecordingRunner:
    """Delegates to a runner and logs the token feed of every forward."""

    def __init__(self, runner):
        self.runner = runner
        self.vocab_size = runner.vocab_size
        self.feeds: list[list[list[int]]] = []
        self.prefills: list[list[list[int]]] = []
        self.calls = 0
        self.rows = 0  # logits rows the forwards computed

    def new_state(self):
        return self.runner.new_state()

    def spare(self):
        return self.runner.spare()

    def forward(self, batch, *, logits=True):
        self.calls += 1
        wanted = [logits] * len(batch) if isinstance(logits, bool) else list(logits)
        for log, want in ((self.feeds, True), (self.prefills, False)):
            fed = [list(tokens) for (_, tokens), w in zip(batch, wanted) if (w is not False) == want]
            if fed:
                log.append(fed)
        out = self.runner.forward(batch, logits=logits)
        self.rows += sum(len(r) for r in out)
        return out

    def trim(self, state, length):
        self.runner.trim(state, length)

    def fork(self, state, length):
        return self.runner.fork(state, length)


# -- decoding ----------------------------------------------------------------------


def decode(
    runner,
    requests: Iterable[Request],
    *,
    spec: SpecConfig | None = None,
    streams: int = 1,
    params: SamplingParams = GREEDY,
    stops: Iterable[int] = STOPS,
) -> dict[str, Generation]:
    """Run a BatchDecoder and index the generations by request id."""
    out = {}
    for gen in BatchDecoder(runner, stops, params, spec, streams=streams).run(requests):
        assert gen.id not in out, f"request {gen.id} yielded twice"
        out[gen.id] = gen
    return out


def repetitive_prompt(tokenizer, k: int = 0) -> list[int]:
    """A prompt the n-gram drafter can copy from (k varies it per request)."""
    words = ["the cat sat on the mat", "red fox jumps over dogs", "one two three four five", "alpha beta gamma delta"]
    text = (words[k % len(words)] + ". ") * 3 + words[k % len(words)].split()[0]
    return tokenizer.encode(text)


def allowed_mask(processor: LogitProcessor, width: int = VOCAB) -> torch.Tensor:
    """Bool ``[width]``: which ids ``processor`` leaves selectable right now (the one it names, when it names one)."""
    row = torch.zeros(width)
    forced = processor.process(row, [])
    if forced is not None:
        return torch.arange(width) == forced
    return torch.isfinite(row)


# -- grammar walks (MaskBench protocol): the walk lives in fucina_jobs.eval.maskbench --------


def run_suite(files: Sequence[Path], tokenizer) -> dict:
    """Compile each schema and judge each instance with SmolLM2's stop token."""
    return _run_suite(files, tokenizer, stop_token=STOP)


# -- jobs ------------------------------------------------------------------------------


#: A prompt injection's invoice: what a document that says "answer exactly this" asks the model to copy.
FAKE_INVOICE = {
    "invoice_number": "PWNED",
    "invoice_date": "2025-01-01",
    "due_date": "2025-01-31",
    "vendor": "EVIL",
    "customer": "EVIL",
    "currency": "USD",
    "subtotal": 1,
    "tax": 0,
    "total": 1,
}


def job_dict(out: Path, **sections) -> dict:
    """The shipped invoice job as a raw config dict, with section overrides."""
    raw = {
        "name": "extract_invoices",
        "constraint": {"json_schema": "schemas/invoice.json"},
        "dataset": {"path": "jobs/invoices/inputs.jsonl", "limit": 4},
        "prompt": {"system": "@jobs/invoices/system.txt", "template": "@jobs/invoices/template.txt"},
        "decoding": {"max_tokens": 160},
        "runtime": {"replicas": 2, "streams": 2, "shard_size": 2},
        "output": {"dir": str(out)},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def read_dir(out: Path | str, kind: str) -> list[dict]:
    """Every row of one kind (records, rejects, stats) of output.dir's newest version, all run partitions (with ``run``)."""
    return RunDir.open(out).read(kind).to_pylist()


def shard_files(out: Path | str, kind: str) -> list[Path]:
    """The shard files of one kind in output.dir's newest version, every partition (no temporaries)."""
    return [Path(f.path) for f in RunDir.open(out).shard_files(kind) if f.key is not None]


def manifest(out: Path | str) -> dict | None:
    """The manifest of output.dir's newest version."""
    return RunDir.open(out).read_manifest()


def assert_exactly_once(out: Path | str, expected_ids: set[str]) -> None:
    ids = [r["row_id"] for r in read_dir(out, "records")] + [r["row_id"] for r in read_dir(out, "rejects")]
    assert sorted(ids) == sorted(expected_ids), "every input row must appear exactly once in records plus rejects"


def once_on_dispatch(on_dispatch_of: int, act):
    """An ``on_dispatch`` that acts once, when the shard ``on_dispatch_of`` is first sent (a retry sends it again)."""
    done = []

    def on_dispatch(shard, actor):
        if shard == on_dispatch_of and not done:
            done.append(shard)
            act()

    return on_dispatch


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def invoice_rows(ids: list[str]) -> list[dict]:
    """Real invoice texts under new ids (the k-th id gets the k-th invoice)."""
    return [{"id": i, "text": INVOICES[k]["text"]} for k, i in enumerate(ids)]


def small_job(out: Path, data: Path, **sections) -> dict:
    """The invoice job on the dataset file ``data``, tiny: 8 tokens per row, one replica, two streams (``sections`` update the job's)."""
    raw = job_dict(
        out, dataset={"path": str(data), "limit": None}, decoding={"max_tokens": 8}, runtime={"replicas": 1, "streams": 2, "shard_size": 2}
    )
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def ray_running() -> str | None:
    """Why a test of ``ray_address=auto`` without a cluster cannot run here: ``auto`` finds any Ray this machine runs
    (its GCS process), whatever a stale ``ray start`` left on disk."""
    from ray._private.services import find_gcs_addresses

    return "a Ray cluster runs on this machine: ray_address=auto joins it" if find_gcs_addresses() else None


def canned_job(out: Path, data: Path, answer: str, **sections) -> dict:
    """A job on ``data`` whose engine answers every row with ``answer`` at once (no model): the pipeline alone."""
    return small_job(out, data, engine={"name": "canned", "output": answer}, **sections)


def cli(*args: str, timeout: float = 900, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fucina_jobs", "run", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, **popen)


# -- evaluation --------------------------------------------------------------------


def make_run(path: Path, records: list[dict], rejects: list[dict], stats: list[dict] | None = None, manifest: dict | None = None) -> Path:
    """A hand-built run directory, laid out as runs were before versions and partitions (readers still read it)."""
    fill = lambda r: {"record_id": "r-" + r["row_id"], "finish_reason": "stop", "prompt_tokens": 10, "generated_tokens": 5, **r}  # noqa: E731
    write_table(path / "records" / "shard-00000.parquet", pa.Table.from_pylist([fill(r) for r in records], schema=pa.schema(META_FIELDS)))
    rej = [{"record_id": "r-" + r["row_id"], "text": "", "error": None, **r} for r in rejects]
    write_table(path / "rejects" / "shard-00000.parquet", pa.Table.from_pylist(rej, schema=REJECT_SCHEMA))
    for k, row in enumerate(stats or []):
        write_table(path / "stats" / f"shard-{k:05d}.parquet", pa.Table.from_pylist([row]))
    write_json(path / "manifest.json", manifest or {"name": "hand", "status": "complete", "fingerprint": "f"})
    return path


def no_ray() -> None:
    """Shut down the Ray that the ``local_ray`` fixture keeps up between modules, for a test that must start without one."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def tiny_model_dir(path: Path) -> Path:
    """``tiny_llama`` saved with the default model's tokenizer: a ``model.source`` for jobs that need a model, not
    its answers (context 1,024 tokens)."""
    from fucina_jobs.models.loading import load_tokenizer

    tiny_llama(VOCAB).save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return path


#: Sharpens the random model's logits (final RMSNorm weight) so that sampling at
#: temperature 0.8 is not uniform noise and n-gram drafts are accepted sometimes.
LOGIT_SCALE = 15.0


def tiny_llama(vocab_size: int = VOCAB, seed: int = 0, *, logit_scale: float = LOGIT_SCALE, dtype: torch.dtype = torch.float64):
    """A random 2-layer Llama over ``vocab_size`` ids, its logits scaled by ``logit_scale``; float64 by default
    (robust against fp32 near-ties)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=STOP,
        pad_token_id=STOP,
    )
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(logit_scale)
    return model
