"""The trainer's heartbeat: a flushed progress line per step, thinned for fast steps."""

from __future__ import annotations

import io

from fp8rl.engine.heartbeat import SFT_FIELDS, Heartbeat


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_slow_steps_each_print_a_line_with_rate_and_eta():
    out, clock = io.StringIO(), Clock()
    beat = Heartbeat("grpo/tiny/fp8/tensorwise/seed0", 10, min_interval_s=5.0, stream=out, clock=clock)
    for step in (1, 2, 3):
        clock.t += 6.0
        assert beat.update(step, {"reward/mean": 0.5, "entropy": 1.25, "clip/low_neg": 0.0123})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[-1] == (
        "[grpo/tiny/fp8/tensorwise/seed0] step 3/10 reward 0.500 entropy 1.250 clip/low_neg 0.0123 "
        "6.00 s/step elapsed 0:00:18 ETA 0:00:42"
    )


def test_an_sft_heartbeat_shows_the_loss():
    out, clock = io.StringIO(), Clock()
    beat = Heartbeat("sft tiny", 300, stream=out, clock=clock, fields=SFT_FIELDS)
    clock.t = 12.4
    beat.update(40, {"loss": 1.23456})
    assert out.getvalue() == "[sft tiny] step 40/300 loss 1.2346 0.31 s/step elapsed 0:00:12 ETA 0:01:21\n"


def test_fast_steps_are_thinned_but_first_and_last_always_print():
    out, clock = io.StringIO(), Clock()
    beat = Heartbeat("r", 20, min_interval_s=5.0, stream=out, clock=clock)
    printed = []
    for step in range(1, 21):
        clock.t += 1.0
        if beat.update(step, {"reward/mean": 0.1}):
            printed.append(step)
    assert printed == [1, 6, 11, 16, 20]
    assert "entropy - clip/low_neg -" in out.getvalue()  # absent metrics, not 0


def test_a_resumed_run_times_only_the_steps_it_ran():
    out, clock = io.StringIO(), Clock()
    beat = Heartbeat("r", 10, start_step=8, stream=out, clock=clock)
    clock.t = 4.0
    beat.update(9, {})
    assert "4.00 s/step elapsed 0:00:04 ETA 0:00:04" in out.getvalue()
