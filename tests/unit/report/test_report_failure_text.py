"""The text at failure (fp8rl.report.failure_text): a diverged run's samples at step 1 and at its
divergence, read from samples.jsonl as the trainer writes it (GeneratedSamples.log_rows, then
RunDir.append_samples), through build_report."""

from __future__ import annotations

import pandas as pd
import torch

from fp8rl.config import ExperimentConfig
from fp8rl.engine import tasks
from fp8rl.engine.collect import GeneratedSamples
from fp8rl.report.build import build_report
from fp8rl.report.failure_text import WIDTH, _cut, failure_text_table
from fp8rl.report.paths import ReportPaths
from fp8rl.run_files import RunDir

# a sample of the longform tier's bf16 run (base 0, step 1): well formed
CLEAN = (
    "Tom has 54 stamps at the start. Now by giving 19 to Leo, he counts 54 - 19 = 35 stamps. And then when "
    "he sold 9, he keeps 35 - 9 = 26 stamps. The answer is 26."
)
GARBLED = "marbles " * 60


def _cfg(tmp_path, log_samples: int) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "tier": "longform", "results_dir": str(tmp_path),
            "models": [{"name": "m", "source": "scratch"}],
            "matrix": {"algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8"], "seeds": [0]},
            "schedule": {"steps": 6, "log_samples": log_samples},
        }
    )  # fmt: skip


def _write_run(paths: ReportPaths, run_id: str, div_step: int | None, log_samples: int) -> None:
    run = RunDir.of(paths.runs_dir, run_id)
    run.root.mkdir(parents=True)
    for step in range(1, 7):
        broken = div_step is not None and step >= div_step
        texts = [GARBLED if broken else CLEAN] * 3
        samples = GeneratedSamples(
            acc=[torch.tensor([0.0 if broken else 1.0] * 3)],
            texts=texts,
            format_ok=[tasks.format_fn("longform")(t) for t in texts],
        )
        if log_samples:
            run.append_samples(step, samples.log_rows(log_samples))
        run.append_metrics(
            {"step": step, "entropy": 9.0 if broken else 1.0, "acc/mean": 0.5, "reward/mean": 0.5}
        )
    summary = {"run_id": run_id, "status": "diverged" if div_step else "ok", "reason": "r", "step": 6,
               "steps_planned": 6, "final": {}}  # fmt: skip
    if div_step:
        summary["divergence"] = {"kind": "gibberish", "step": div_step, "reason": "gibberish: x"}
    run.write_summary(summary)


def test_a_diverged_runs_text_at_step_1_and_at_its_failure(tmp_path):
    cfg = _cfg(tmp_path, log_samples=3)
    paths = ReportPaths.for_config(cfg)
    assert paths.samples and paths.table("failure_text", "md") in paths.outputs()
    _write_run(paths, "grpo/m/bf16/none/seed0", None, 3)
    _write_run(paths, "grpo/m/fp8/tensorwise/seed0", 4, 3)
    build_report(cfg)
    table = pd.read_csv(paths.table("failure_text", "csv"), keep_default_na=False)
    assert set(table["run_id"]) == {"grpo/m/fp8/tensorwise/seed0"}  # the bf16 run did not diverge
    assert list(table["when"]) == ["start", "start", "failure", "failure"] and list(table["step"]) == [
        1,
        1,
        4,
        4,
    ]
    start, failure = table.iloc[0], table.iloc[2]
    assert start["text"] == CLEAN and start["gibberish"] == "" and start["reward"] == 1.0
    assert failure["text"].startswith("marbles marbles") and failure["text"].endswith("…")
    assert len(failure["text"]) == WIDTH and failure["gibberish"] != ""  # the detector's reason
    md = paths.table("failure_text", "md").read_text()
    assert "marbles marbles" in md and "Text at failure" in paths.html.read_text()


def test_no_diverged_run_and_missing_samples_are_said(tmp_path):
    cfg = _cfg(tmp_path, log_samples=2)
    paths = ReportPaths.for_config(cfg)
    _write_run(paths, "grpo/m/bf16/none/seed0", None, 2)
    _write_run(paths, "grpo/m/fp8/tensorwise/seed0", None, 2)
    build_report(cfg)
    assert "No run diverged" in paths.table("failure_text", "md").read_text()
    endpoints = pd.DataFrame({"run_id": ["grpo/m/fp8/tensorwise/seed1"], "status": ["diverged"],
                              "div_kind": ["entropy_spike"], "div_step": [3.0]})  # fmt: skip
    (row,) = failure_text_table(endpoints, paths.runs_dir).to_dict("records")
    assert row["text"].startswith("(no samples.jsonl")
    assert not ReportPaths.for_config(_cfg(tmp_path, log_samples=0)).samples


def test_at_the_failure_the_samples_judged_gibberish_come_first(tmp_path):
    """A failure step whose first logged sample is still clean (a rate of 2 in 3): the table shows the
    garbled ones, in logged order, and the start's first samples as logged."""
    from fp8rl.report.failure_text import run_failure_text

    cfg = _cfg(tmp_path, log_samples=3)
    runs_dir = ReportPaths.for_config(cfg).runs_dir
    run = RunDir.of(runs_dir, "grpo/m/fp8/tensorwise/seed0")
    run.root.mkdir(parents=True)
    fmt = tasks.format_fn("longform")
    for step, texts in ((1, [CLEAN, GARBLED, CLEAN]), (2, [CLEAN, GARBLED, "x " * 80])):
        samples = GeneratedSamples(
            acc=[torch.tensor([1.0, 0.0, 1.0])], texts=texts, format_ok=[fmt(t) for t in texts]
        )
        run.append_samples(step, samples.log_rows(3))
    rows = run_failure_text(runs_dir, "grpo/m/fp8/tensorwise/seed0", "gibberish", 2)
    start, failure = rows[:2], rows[2:]
    assert [r["text"] for r in start] == [CLEAN, _cut(GARBLED)]  # as logged
    assert [r["text"] for r in failure] == [_cut(GARBLED), _cut("x " * 80)] and all(
        r["gibberish"] for r in failure
    )
