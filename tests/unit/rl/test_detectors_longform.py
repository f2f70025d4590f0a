"""The gibberish and entropy-spike detectors on real text of the longform testbed (docs/longform.md).

The fixtures are the sample logs (`samples.jsonl`) and step metrics (`metrics.jsonl`) the trainer wrote
for two bf16 runs from the testbed's seed-0 base: a clean one (the tier's settings) and a deliberately
broken one (lr thirty times the tier's); tests/data/longform_detectors/README.md has the commands. The
detectors, at the thresholds of config/longform.yaml's `stability` section, must fire on the broken run
and stay quiet on the clean one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.config_loader import load_config
from fp8rl.engine import longform
from fp8rl.io import read_jsonl
from fp8rl.rl import StabilityMonitor, gibberish_rate, gibberish_reason

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "data" / "longform_detectors"
RUNS = ("clean", "broken")


@pytest.fixture(scope="module")
def stability():
    return load_config(ROOT / "config" / "longform.yaml").stability


def _samples(run: str) -> dict[int, list[dict]]:
    by_step: dict[int, list[dict]] = {}
    for row in read_jsonl(FIXTURES / run / "samples.jsonl"):
        by_step.setdefault(row["step"], []).append(row)
    return by_step


def _metrics(run: str) -> list[dict]:
    return read_jsonl(FIXTURES / run / "metrics.jsonl")


def _rates(run: str) -> dict[int, float]:
    """The gibberish rate of each step's logged samples, recomputed by the detector from the text."""
    return {
        step: gibberish_rate([r["text"] for r in rows], [longform.format_ok(r["text"]) for r in rows])
        for step, rows in _samples(run).items()
    }


@pytest.mark.parametrize("run", RUNS)
def test_the_logged_flags_are_the_detectors_own(run):
    for rows in _samples(run).values():
        for r in rows:
            assert r["format_ok"] == longform.format_ok(r["text"])
            assert r["gibberish"] == gibberish_reason(r["text"], r["format_ok"])


def test_the_gibberish_detector_fires_on_the_broken_run_and_stays_quiet_on_the_clean_one(stability):
    broken, clean = _rates("broken"), _rates("clean")
    late = [rate for step, rate in broken.items() if step > max(broken) // 2]
    assert min(late) > stability.gibberish_max  # every late step of the broken run is garbled
    assert max(clean.values()) <= stability.gibberish_max
    # and the step metric the monitor reads says the same
    assert max(m["gibberish/rate"] for m in _metrics("clean")) <= stability.gibberish_max
    assert max(m["gibberish/rate"] for m in _metrics("broken")) > stability.gibberish_max


def test_the_entropy_spike_detector_fires_on_the_broken_run_and_stays_quiet_on_the_clean_one(stability):
    def spike_only():
        return StabilityMonitor(
            entropy_spike_k=stability.entropy_spike_k,
            entropy_spike_m=stability.entropy_spike_m,
            baseline_steps=stability.baseline_steps,
        )

    found = {}
    for run in RUNS:
        monitor = spike_only()
        for m in _metrics(run):
            monitor.update(m["step"], m)
        found[run] = monitor.divergence
    assert found["clean"] is None
    assert found["broken"] is not None and found["broken"].kind == "entropy_spike", found["broken"]


def test_the_tiers_monitor_flags_the_broken_run_only(stability):
    found = {}
    for run in RUNS:
        monitor = StabilityMonitor.from_config(stability)
        for m in _metrics(run):
            monitor.update(m["step"], m)
        found[run] = monitor.divergence
    assert found["clean"] is None, found["clean"]
    assert found["broken"] is not None
