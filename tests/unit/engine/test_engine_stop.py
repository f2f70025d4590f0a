"""fp8rl.engine.stop: a SIGTERM only records the request, and the previous handler comes back."""

from __future__ import annotations

import os
import signal

from fp8rl.engine.stop import Interrupted, StopRequest


def test_sigterm_is_recorded_while_watched_and_the_old_handler_restored():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        stop = StopRequest()
        assert not stop.requested
        with stop.watch():
            os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread before kill() returns
            assert stop.requested and stop.signum == signal.SIGTERM
        assert seen == []
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_request_nobody_watches_never_fires():
    assert not StopRequest().requested


def test_interrupted_names_the_signal_and_the_step():
    exc = Interrupted(7, signal.SIGTERM)
    assert str(exc) == "stopped by SIGTERM after step 7" and exc.step == 7 and exc.signum == signal.SIGTERM
