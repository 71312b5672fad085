"""One continuous decoder per replica, fed by every shard the replica holds.

A replica holds more than one shard at a time (``runtime.shards_in_flight``).
Each shard's thread hands its prompts to this loop and waits; the loop adds
them to one running engine session, so a stream freed by the last rows of one
shard takes the first row of the next at once, and the decoder never drains
at a shard boundary. A shard is done when its last row is.

Occupancy is measured per shard: over the steps that decoded any of its rows,
the mean number of live streams divided by the streams the engine has.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import KW_ONLY, dataclass, field

from ..engines import Completion, Engine, Prompt

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One shard's prompts and, once it is done, their completions."""

    prompts: list[Prompt]
    _: KW_ONLY
    first: bool = False  # decoded before the prompts waiting when it comes (``DecodeLoop.submit``)
    completions: list[Completion] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    steps: int = 0  # steps taken while the batch was in the loop (none counted where the engine cannot tell its width)
    width: int = 0  # live streams, summed over ``steps``

    def result(self, streams: int) -> tuple[list[Completion], float | None]:
        """Wait for every completion; return them with the occupancy (None where the engine cannot tell)."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.completions, (self.width / self.steps / streams if self.steps else None)


class DecodeLoop:
    def __init__(self, engine: Engine, streams: int):
        self.engine = engine
        self.streams = streams
        self.inbox: queue.Queue[Batch] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="decode-loop", daemon=True)
        self.thread.start()

    def decode(self, prompts: list[Prompt], first: bool = False) -> tuple[list[Completion], float | None]:
        """The prompts' completions (in finishing order) and the shard's occupancy; blocks until all are done."""
        return self.submit(prompts, first).result(self.streams)

    def submit(self, prompts: list[Prompt], first: bool = False) -> Batch:
        """Hand a shard's prompts to the running decoder; ``Batch.result`` waits for them. ``first``: before the
        prompts waiting, as for a shard's repairs, which its commit waits on while their rows' prompts may still
        be in the prefix cache."""
        batch = Batch(prompts, first=first)
        if prompts:
            self.inbox.put(batch)
        else:
            batch.done.set()
        return batch

    def _run(self) -> None:
        session = self.engine.session()
        held: list[Batch] = []  # taken and not done, oldest first
        owners: dict[str, Batch] = {}  # row id -> its batch
        while True:
            for batch in self._take(block=not session.busy):
                held.append(batch)
                for prompt in batch.prompts:
                    owners[prompt.id] = batch
                    session.add(prompt, batch.first)
            try:
                finished = session.step()
            except Exception as err:  # the shards held fail (the pool retries them); a fresh session takes the next ones
                log.exception("the decoder failed; failing the %d shard(s) it held", len(held))
                for batch in held:
                    batch.error = err
                    batch.done.set()
                held, owners, session = [], {}, self.engine.session()
                continue
            if session.width is not None:
                for batch in held:  # every batch held saw this step, decoding or waiting for a stream
                    batch.steps += 1
                    batch.width += session.width
            for completion in finished:
                batch = owners.pop(completion.id)
                batch.completions.append(completion)
                if len(batch.completions) == len(batch.prompts):
                    held.remove(batch)
                    batch.done.set()

    def _take(self, block: bool) -> list[Batch]:
        """The batches waiting in the inbox; when the session is idle, wait for one."""
        batches = [self.inbox.get()] if block else []
        while True:
            try:
                batches.append(self.inbox.get_nowait())
            except queue.Empty:
                return batches
