"""fp8rl.quiet.ProgressLines: a progress bar written to a log file becomes lines (its final state, and a
heartbeat of its state at most once per interval), with no carriage returns; other text is unchanged."""

from __future__ import annotations

import io
import sys

from tqdm import tqdm

from fp8rl.quiet import ProgressLines, progress_as_lines


def test_a_bar_is_one_line_with_its_final_state_and_plain_text_passes():
    out = io.StringIO()
    lines = ProgressLines(out)
    for _ in tqdm(range(50), desc="Running loglikelihood requests", file=lines, disable=False):
        pass
    lines.write("arith_gen done\n")
    for _ in tqdm(range(5), desc="cleared", file=lines, leave=False):
        pass
    lines.end()
    text = out.getvalue()
    assert "\r" not in text
    first, second = text.splitlines()
    assert first.startswith("Running loglikelihood requests: 100%") and "50/50" in first
    assert second == "arith_gen done"


def test_a_long_bar_writes_its_state_at_most_once_per_interval():
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(out, interval=60.0, clock=lambda: now[0])
    for step in range(1, 200):
        now[0] = step  # one redraw a second
        lines.write(f"\rstep {step}/300")
    assert out.getvalue().splitlines() == ["step 59/300", "step 119/300", "step 179/300"]
    lines.write("\n")
    assert out.getvalue().splitlines()[-1] == "step 199/300"


def test_on_a_terminal_nothing_changes(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with progress_as_lines():
        assert sys.stderr is tty
