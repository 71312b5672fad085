"""Issue 28: a document past the model's context is a reject at once, before its grounded grammar is built.

A 200,000-character invoice under the shipped (grounded) schema took 3.5 minutes
to build its per-row grammar, and only then was refused for its length. The
replica here is a ``ShardWorker`` in this process, on the real model.
"""

import logging

import pytest

import fucina_jobs.pipeline.replica as replica
from fucina_jobs.engines import resolve_source
from fucina_jobs.config import validate
from fucina_jobs.data.dataset import Row
from fucina_jobs.pipeline.driver import Job

from tests.helpers import REPO, job_dict

pytestmark = pytest.mark.slow


def test_the_context_is_checked_from_the_token_count_before_any_grammar_is_built(tmp_path, monkeypatch):
    job = Job(validate(job_dict(tmp_path / "out", decoding={"max_tokens": 8})), REPO)
    handlers = list(logging.getLogger().handlers)
    worker = replica.ShardWorker(
        job.cfg.model_dump(),
        constraint=job.constraint,
        model_path=resolve_source("default"),
        base=str(REPO),
        out=job.dir,
        run_id=job.run_id,
        replica=0,
    )
    for handler in set(logging.getLogger().handlers) - set(handlers):  # the replica's log file
        logging.getLogger().removeHandler(handler)
    built, real = [], replica.grounded_lark
    monkeypatch.setattr(replica, "grounded_lark", lambda schema, source, *rest: built.append(len(source)) or real(schema, source, *rest))
    long = Row("long", 0, {"id": "long", "text": "Invoice INV-1 from ACME, total 10 EUR. " * 5200})  # 202,800 characters
    prompt, problem, _, seconds = worker._prompt(long)
    assert prompt is None and seconds == 0.0 and built == []
    reason, message = problem
    assert reason == "error" and message.startswith("the prompt is ") and "exceeds the model's context of 8192 tokens" in message
    short = Row("short", 1, {"id": "short", "text": "Invoice INV-1 from ACME, issued 2025-03-01, due 2025-03-31, total 10 EUR."})
    prompt, problem, _, _ = worker._prompt(short)
    assert problem is None and prompt.constraint is not None and built == [len(short.fields["text"])]
