"""Engines that decode whole batches (``engines/base.py``'s ``BatchSession`` and ``drain``) and the canned engine."""

from fucina_jobs.engines import BatchSession, Prompt, drain
from fucina_jobs.engines.base import Completion
from fucina_jobs.engines.canned import CannedEngine
from fucina_jobs.config import validate

from tests.helpers import job_dict


def test_a_batch_session_decodes_everything_added_since_its_last_step_in_one_batch():
    batches: list[list[str]] = []

    def generate(prompts):
        batches.append([p.id for p in prompts])
        return [Completion(p.id, p.text.upper(), [], "stop") for p in prompts]

    session = BatchSession(generate)
    assert not session.busy and session.width is None
    session.add(Prompt("a", "x"))
    session.add(Prompt("b", "y"), first=True)  # a batch has no order to jump: it changes nothing
    assert session.busy
    assert [(c.id, c.text) for c in session.step()] == [("a", "X"), ("b", "Y")]
    assert not session.busy and session.step() == []
    assert batches == [["a", "b"], []]


def test_drain_feeds_a_session_once_and_steps_it_until_it_is_idle():
    prompts = [Prompt(str(i), "t") for i in range(3)]
    assert [c.id for c in drain(BatchSession(lambda batch: [Completion(p.id, "", [], "stop") for p in batch]), prompts)] == ["0", "1", "2"]


def test_the_canned_engine_answers_every_prompt_with_the_jobs_canned_output(tmp_path):
    cfg = validate(job_dict(tmp_path, engine={"name": "canned", "output": '{"total": 1}'}))
    engine = CannedEngine.from_job(cfg, model_path="unused: the canned engine loads no model")
    assert engine.constraint(json_schema={"type": "object"}) is None
    completions = list(drain(engine.session(), [Prompt("r1", "doc one"), Prompt("r2", "doc two")]))
    assert [(c.id, c.text, c.tokens, c.finish_reason) for c in completions] == [
        ("r1", '{"total": 1}', [], "stop"),
        ("r2", '{"total": 1}', [], "stop"),
    ]
