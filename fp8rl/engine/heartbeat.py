"""One progress line per step on stderr, for runs without a progress bar (under the DAG, `--no-progress`).

A DAG job's log is a file, where tqdm's bar would be one line rewritten in place and flushed at the
end. `Heartbeat.update(step, row)` instead writes a plain, flushed line such as

    [grpo/tiny/fp8/tensorwise/seed0] step 12/40 reward 0.531 entropy 1.234 clip/low_neg 0.0123
    2.10 s/step elapsed 0:00:25 ETA 0:00:59

for every step, except that steps faster than `min_interval_s` are thinned to one line per that many
seconds (the first and the last step always print). s/step is the mean over the steps this process ran
(a resumed run does not count the steps it skipped), elapsed their time; the ETA is s/step times the
steps left. A metric the step did not log (docs/architecture.md#metrics: absent, never 0) prints as
`-`. The metrics shown are `fields`: training's (`FIELDS`) by default, the loss for the SFT of a
base (`SFT_FIELDS`: `[sft tiny] step 40/300 loss 1.2345 0.31 s/step elapsed 0:00:12 ETA 0:01:21`).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any, TextIO

from fp8rl.vocabulary import CLIP_LOW_NEG, REWARD_MEAN

FIELDS = (
    (REWARD_MEAN, "reward", "{:.3f}"),
    ("entropy", "entropy", "{:.3f}"),
    (CLIP_LOW_NEG, CLIP_LOW_NEG, "{:.4f}"),
)
SFT_FIELDS = (("loss", "loss", "{:.4f}"),)


class Heartbeat:
    def __init__(
        self,
        run_id: str,
        total: int,
        *,
        start_step: int = 0,
        min_interval_s: float = 5.0,
        stream: TextIO | None = None,
        clock=time.monotonic,
        fields: tuple[tuple[str, str, str], ...] = FIELDS,
    ):
        self.run_id, self.total, self.min_interval_s = run_id, total, min_interval_s
        self.fields = fields
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start_step, self.t0 = start_step, clock()
        self.last_print: float | None = None

    def line(self, step: int, row: dict[str, Any]) -> str:
        parts = [f"[{self.run_id}] step {step}/{self.total}"]
        for key, label, fmt in self.fields:
            v = row.get(key)
            parts.append(f"{label} {fmt.format(v) if isinstance(v, int | float) else '-'}")
        done = step - self.start_step
        if done > 0:
            elapsed = self.clock() - self.t0
            per_step = elapsed / done
            eta = timedelta(seconds=round(per_step * (self.total - step)))
            parts.append(f"{per_step:.2f} s/step elapsed {timedelta(seconds=round(elapsed))} ETA {eta}")
        return " ".join(parts)

    def update(self, step: int, row: dict[str, Any]) -> bool:
        """Write the step's line unless the previous one is under `min_interval_s` old; True if written."""
        now = self.clock()
        due = self.last_print is None or step >= self.total or now - self.last_print >= self.min_interval_s
        if due:
            print(self.line(step, row), file=self.stream, flush=True)
            self.last_print = now
        return due
