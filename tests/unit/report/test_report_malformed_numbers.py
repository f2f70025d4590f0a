"""One malformed number never crashes the report nor exhausts its memory: a number too large for a float,
too long for Python to parse, nested past the parser's recursion, a step of 10^8, or an eval task name
that matplotlib would read as mathtext is a named data problem, and the report completes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fixtures import DIVERGED, FAILED, MALFORMED, MISSING, NO_KL, write_tier

from fp8rl.report.build import build_report
from fp8rl.report.load import load_tier

HUGE = "9" * 400  # a JSON integer no float holds (OverflowError in float())
LONG = "9" * 5000  # past Python's 4300-digit limit for int parsing (ValueError, not a JSONDecodeError)
DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError in json.loads


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _metrics_line(run: Path, lineno: int, text: str) -> None:
    lines = _lines(run / "metrics.jsonl")
    lines[lineno - 1] = text + "\n"
    (run / "metrics.jsonl").write_text("".join(lines))


def _huge_value(run: Path) -> None:
    _metrics_line(run, 4, f'{{"step": 4, "reward/mean": {HUGE}}}')


def _long_value(run: Path) -> None:
    _metrics_line(run, 4, f'{{"step": 4, "reward/mean": {LONG}}}')


def _deep_value(run: Path) -> None:
    _metrics_line(run, 4, f'{{"step": 4, "reward/mean": {DEEP}}}')


def _far_step(run: Path) -> None:
    (run / "metrics.jsonl").write_text("".join(_lines(run / "metrics.jsonl")) + '{"step": 100000000}\n')


def _huge_step(run: Path) -> None:
    (run / "metrics.jsonl").write_text("".join(_lines(run / "metrics.jsonl")) + f'{{"step": {HUGE}}}\n')


def _deep_summary(run: Path) -> None:
    (run / "summary.json").write_text(f'{{"status": "ok", "final": {DEEP}}}')


def _huge_final(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    text = json.dumps(summary | {"final": {"reward/mean": 0}}).replace(
        '"reward/mean": 0', f'"reward/mean": {HUGE}'
    )
    (run / "summary.json").write_text(text)


def _huge_eval(run: Path) -> None:
    path = run / "eval" / "lm_eval.json"
    obj = json.loads(path.read_text())
    obj["results"][0]["value"] = 0.123456789
    path.write_text(json.dumps(obj).replace("0.123456789", HUGE))


def _mathtext_task(run: Path) -> None:
    path = run / "eval" / "lm_eval.json"
    obj = json.loads(path.read_text())
    obj["results"][0]["task"] = r"$\frac{$"
    obj["results"][1]["task"] = "arith\x1b[31m_mc"
    path.write_text(json.dumps(obj))


def _huge_throughput(run: Path) -> None:
    path = run / "throughput.json"
    obj = json.loads(path.read_text())
    obj["step_time_s"] = 0.123456789
    path.write_text(json.dumps(obj).replace("0.123456789", HUGE))


def _deep_checkpoint_state(run: Path) -> None:
    (run / "checkpoint").mkdir(exist_ok=True)
    (run / "checkpoint" / "state.json").write_text(DEEP)


# kind of damage -> (what it does to a run directory, what the problem line then says)
DAMAGE = {
    "huge_value": (_huge_value, "metrics.jsonl:4: non-numeric value for 'reward/mean'"),
    "long_value": (_long_value, "metrics.jsonl:4: malformed JSON (a number too long"),
    "deep_value": (_deep_value, "metrics.jsonl:4: malformed JSON (nested too deeply"),
    "far_step": (_far_step, "step 100000000 is past the most steps a run takes"),
    "huge_step": (_huge_step, "step 9999... (400 digits) is past the most steps a run takes"),
    "deep_summary": (_deep_summary, "summary.json: unreadable JSON (nested too deeply"),
    "huge_final": (_huge_final, "final has non-numeric values for 'reward/mean'"),
    "huge_eval": (_huge_eval, "results[0] lacks task/metric/numeric value"),
    "mathtext_task": (_mathtext_task, "is not a name (printable, no '$'"),
    "deep_checkpoint": (_deep_checkpoint_state, "state.json: unreadable checkpoint state"),
}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("numbers")
    cfg = write_tier(tmp)
    runs_dir = tmp / "results" / cfg.tier / "runs"
    special = {DIVERGED, FAILED, MISSING, NO_KL, MALFORMED}
    normal = [s.run_id for s in cfg.runs() if s.run_id not in special]
    victims = dict(zip(DAMAGE, normal, strict=False))
    assert len(victims) == len(DAMAGE)
    for kind, run_id in victims.items():
        DAMAGE[kind][0](runs_dir / run_id)
    _huge_throughput(runs_dir / normal[len(DAMAGE)])
    return cfg, victims, normal[len(DAMAGE)]


def test_each_malformed_number_is_a_named_problem(damaged):
    cfg, victims, odd = damaged
    rs = load_tier(cfg)
    for kind, run_id in victims.items():
        says = DAMAGE[kind][1]
        assert any(run_id in p and says in p for p in rs.problems), (
            kind,
            says,
            [p for p in rs.problems if run_id in p],
        )
    runs = rs.runs.set_index("run_id")
    for kind in ("far_step", "huge_step", "huge_value"):  # a skipped line: tolerated, counted
        assert runs.loc[victims[kind], "malformed_lines"] == 1, kind
    assert runs.loc[victims["deep_summary"], "status"] == "missing"
    assert runs.loc[victims["huge_final"], "status"] == "missing"
    names = set(rs.metric("lm_eval")["metric"])
    assert not any("$" in n or "\x1b" in n for n in names)
    assert rs.metric("throughput").query("run_id == @odd and metric == 'step_time_s'").empty


def test_the_report_completes(damaged):
    cfg, victims, _ = damaged
    manifest = build_report(cfg)
    for run_id in victims.values():
        assert any(run_id in p for p in manifest["problems"]), run_id


def test_a_tier_whose_fp8_runs_mix_gemm_backends_is_a_data_problem(tmp_path, monkeypatch):
    """FP8RL_FP8_BACKEND=scaled_mm changes a run's numbers: its provenance records the variable, and the
    report names a tier whose FP8 runs mix paths (bf16 runs' `none` is no path); a tier on one path has
    no such problem."""
    import fp8rl.numerics

    monkeypatch.setenv("FP8RL_FP8_BACKEND", "scaled_mm")
    assert fp8rl.numerics.state()["fp8_backend"] == "scaled_mm"
    monkeypatch.delenv("FP8RL_FP8_BACKEND")
    assert fp8rl.numerics.state()["fp8_backend"] == "auto"
    cfg = write_tier(tmp_path)
    runs_dir = tmp_path / "results" / "smoke" / "runs"
    assert not [p for p in load_tier(cfg, runs_dir).problems if "GEMM backends" in p]
    path = next(p for p in sorted(runs_dir.glob("**/throughput.json")) if "/fp8/" in p.as_posix())
    path.write_text(json.dumps(json.loads(path.read_text()) | {"fp8_backend": "scaled_mm"}))
    (mix,) = [p for p in load_tier(cfg, runs_dir).problems if "GEMM backends" in p]
    assert "emulated: " in mix and "scaled_mm: 1 runs" in mix and "none" not in mix
