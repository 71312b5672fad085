"""``pipeline/signals.py``: SIGTERM and SIGHUP stop a run as Ctrl-C does, and never cut its end in half."""

import os
import signal

import pytest

from fucina_jobs.pipeline.signals import Stopped, deferred, stop_of, stopping


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_stop_signal_raises_stopped_with_the_shells_exit_code(sig, code):
    with pytest.raises(Stopped) as err, stopping():
        os.kill(os.getpid(), sig)
    assert err.value.signum == sig and err.value.exit_code == code and isinstance(err.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is not None and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN


def test_the_handlers_are_put_back_afterwards():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with stopping():
        pass
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_during_the_end_of_a_run_waits_for_it_and_a_second_one_does_not():
    finished = []
    with pytest.raises(Stopped), stopping():
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            finished.append("manifest written")
    assert finished == ["manifest written"]
    with pytest.raises(Stopped), stopping():
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # the user insists
            finished.append("never")
    assert finished == ["manifest written"]


def test_a_plain_keyboard_interrupt_after_sigterm_stands_for_sigterm():
    """Ray turns an exception raised inside its waits into a plain KeyboardInterrupt: the signal behind it is remembered."""
    with stopping():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Stopped:
            pass
        assert stop_of(KeyboardInterrupt()).signum == signal.SIGTERM
    with stopping():
        assert stop_of(KeyboardInterrupt()).signum == signal.SIGINT  # a KeyboardInterrupt of code's own: Ctrl-C
