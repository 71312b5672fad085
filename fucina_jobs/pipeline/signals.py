"""Stop signals: SIGTERM and SIGHUP (what cron, systemd and Kubernetes send) stop a run as Ctrl-C does.

Inside ``stopping()`` each of SIGINT, SIGTERM and SIGHUP raises ``Stopped`` (a
``KeyboardInterrupt``) in the main thread, so the driver ends the manifest
``interrupted`` and a rerun resumes. Ray's ``init`` puts handlers of its own on
SIGTERM (one that exits, and a native one that aborts with a stack dump), so the
replica pool calls ``reclaim()`` once Ray is up. Inside ``deferred()`` (the end of
a run: the last manifest, the replicas' shutdown) a stop waits until the block
has finished, so a run's end is never cut in half; a second signal stops at once.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``exit_code`` is the shell's convention, 128 + the signal."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {self.name}")

    @property
    def name(self) -> str:
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_active = False
_held = 0  # depth of deferred() blocks
_pending: int | None = None  # a signal that arrived while held
_received: int | None = None  # the last stop signal, for stop_of()


def _handle(signum: int, frame: Any) -> None:
    global _pending, _received
    _received = signum
    if _held and _pending is None:
        _pending = signum
        return
    raise Stopped(signum)


def stop_of(err: KeyboardInterrupt) -> Stopped:
    """The stop ``err`` stands for: Ray turns a ``Stopped`` raised inside its waits into a plain ``KeyboardInterrupt``."""
    return err if isinstance(err, Stopped) else Stopped(_received or signal.SIGINT)


@contextmanager
def stopping() -> Iterator[None]:
    """Turn stop signals into ``Stopped`` while the block runs (main thread only; elsewhere a no-op)."""
    global _active, _received
    if threading.current_thread() is not threading.main_thread() or _active:
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _active, _received = True, None
    reclaim()
    try:
        yield
    finally:
        _active = False
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def reclaim() -> None:
    """Put our handlers back where a library (Ray) replaced them; a no-op outside ``stopping()``."""
    if _active and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handle)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals until the block ends, then raise the first one that arrived."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            signum, _pending = _pending, None
            raise Stopped(signum)
