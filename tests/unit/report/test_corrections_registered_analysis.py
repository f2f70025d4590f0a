"""The corrections comparison's registered analysis, run before its results exist: `config/corrections.yaml`
as committed (only `results_dir` moved) reported by `build_report` on synthetic runs of its whole
matrix (9 arms x 8 bases), written by the writers the trainer and the held-out eval use (RunDir,
build_summary, throughput_record, write_eval), with metric keys those variants really log
(metric_keys.json, recorded from real tiny runs).

Every registered number is recomputed here from the values the fixture wrote, never from the report's
own tables: the seven planned contrasts against TIS (paired t over bases, scipy.stats.ttest_rel; Holm by
hand), the four exploratory ones unadjusted, the leaderboard's order, time to instability per arm, the
bf16 control's verdict, and the cost per step with its calibration share (the per-update arm and the
every-20-steps one apart); and the two README blocks that will quote the tier (its findings, its
leaderboard with the cost per step) read those tables. So a mistake in how the report reads this
config (an arm's cell, the second condition, the reference of the family) shows before the 72 runs
end, not after their results are read.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_fixtures import METRIC_KEYS, REPO
from scipy import stats

from fp8rl.config_loader import load_config
from fp8rl.evaluate.schema import TaskResult, write_eval
from fp8rl.report.build import build_report
from fp8rl.report.paths import ReportPaths
from fp8rl.run_files import RunDir, runs_dir
from fp8rl.run_records import build_summary, throughput_record

CONFIG = REPO / "config" / "corrections.yaml"
BASES = 8
BASE_LEVEL = [0.30, 0.42, 0.36, 0.50, 0.28, 0.46, 0.33, 0.40]  # bases differ more than the arms do
# each arm's held-out shift from TIS: some far past the registered min_effect, some inside the noise
SHIFT = {"bf16": 0.20, "tis": 0.0, "tis_calib": 0.06, "tis_calib_every20": 0.05, "scorecenter": 0.01,
         "tis_scorecenter": 0.12, "qurl": -0.02, "icepop": 0.03, "icepop_adaptive": 0.04}  # fmt: skip
# run -> (kind, step) of its first divergence; the runs train on (`stability.on_divergence: continue`)
DIVERGED = {("tis", 2): ("gibberish", 120), ("scorecenter", 5): ("entropy_spike", 40),
            ("scorecenter", 6): ("gibberish", 90), ("icepop", 1): ("reward_collapse", 200)}  # fmt: skip
FAILED = ("qurl", 6)  # stopped at step 10 by an error: no endpoint, no throughput, its base unpaired
# seconds per step of (rollout, logprob, train, calib): the calibrated arms' shadow pass, every update or
# every 20 steps, shows in the calib phase
PHASE_S = {"bf16": (2.0, 0.4, 1.0, 0.0), "scorecenter": (3.0, 0.6, 1.6, 0.3),
           "tis_scorecenter": (3.0, 0.6, 1.6, 0.3), "tis_calib": (2.2, 0.4, 1.1, 0.9)}  # fmt: skip
FP8_PHASE_S = (2.2, 0.4, 1.1, 0.3)


def heldout(arm: str, base: int) -> float:
    """A run's held-out sampled reward: its base's level, the arm's shift and a jitter of the pair."""
    i = list(SHIFT).index(arm)
    return round(BASE_LEVEL[base] + SHIFT[arm] + 0.03 * math.sin(1.7 * base + 2.3 * i), 6)


def base_heldout(base: int) -> float:
    return BASE_LEVEL[base] - 0.1


def phase_s(arm: str, step: int) -> tuple[float, float, float, float]:
    if arm == "tis_calib_every20":  # the full shadow pass on recalibration steps, the diagnostic's between
        return (2.2, 0.4, 1.1, 0.9 if step % 20 == 1 else 0.3)
    return PHASE_S.get(arm, FP8_PHASE_S)


def reward(arm: str, base: int, step: int) -> float:
    """The training reward: bf16 learns (about 0.2 over the run, more on some bases), the FP8 arms drift."""
    slope = 0.2 + 0.01 * base if arm == "bf16" else 0.02
    return BASE_LEVEL[base] + slope * step / 300 + 0.01 * math.sin(step)


def metrics_row(variant: str, arm: str, base: int, step: int, diverged: tuple | None) -> dict:
    """One metrics.jsonl line with the keys a real run of `variant` logs (metric_keys.json)."""
    roll, logp, train, calib = phase_s(arm, step)
    after = diverged is not None and step >= diverged[1]
    named = {
        "step": step, "reward/mean": reward(arm, base, step), "acc/mean": reward(arm, base, step),
        "entropy": 3.0 if after and diverged[0] == "entropy_spike" else 0.8,
        "gibberish/rate": 0.5 if after and diverged[0] == "gibberish" else 0.0,
        "time/rollout_s": roll, "time/logprob_s": logp, "time/train_s": train, "time/calib_s": calib,
        "time/step_s": roll + logp + train + calib, "tok/rollout": 6000, "tok/logprob": 6000,
        "tok/train": 6000, "tok/calib": 1500, "mismatch/kl_k3": 0.0 if variant == "bf16" else 0.01,
    }  # fmt: skip
    return {k: named.get(k, 0.5) for k in METRIC_KEYS["metrics"]["grpo"][variant]}


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corrections")
    cfg = load_config(CONFIG, [f"results_dir={tmp}"])
    arm_of = {cell: arm for arm, cell in cfg.study.arms.items()}
    runs = runs_dir(cfg.results_dir, cfg.tier)
    steps = cfg.schedule.steps
    for b in range(BASES):
        base = runs.parent / "base" / "story" / f"seed{b}"
        write_eval(base / "eval" / "heldout.json", base, "heldout",
                   [TaskResult("heldout", "sampled_reward", base_heldout(b), 0.01, 1024)], {})  # fmt: skip
    for spec in cfg.runs():
        arm = arm_of[spec.run_id.rsplit("/", 1)[0]]
        div = DIVERGED.get((arm, spec.seed))
        failed = (arm, spec.seed) == FAILED
        n = 10 if failed else steps
        run = RunDir.of(runs, spec.run_id)
        run.claim(spec.run_id)
        run.write_config(cfg.model_dump(mode="json"))
        rows = [metrics_row(spec.variant, arm, spec.seed, s, div) for s in range(1, n + 1)]
        for row in rows:
            run.append_metrics(row)
        status = "failed" if failed else "diverged" if div else "ok"
        divergence = {"kind": div[0], "step": div[1], "reason": f"{div[0]} at step {div[1]}"} if div else None
        reason = "RuntimeError: boom" if failed else divergence and divergence["reason"]
        base = {"name": cfg.base_of(spec.model, spec.seed), "seed": spec.seed, "sft_seed": None}
        provenance = {"git_commit": "abc123", "packages": {}, "machine": {}}
        final = {"reward/mean": rows[-1]["reward/mean"]}
        run.write_summary(
            build_summary(
                spec.run_id, status, reason, n, steps, final, provenance, divergence=divergence, base=base
            )
        )
        if failed:
            continue
        run.write_throughput(throughput_record(rows, emulated=True, device="cpu",
                                               fp8_backend="none" if arm == "bf16" else "emulated"))  # fmt: skip
        write_eval(run.eval_file("heldout"), run.checkpoint, "heldout",
                   [TaskResult("heldout", "sampled_reward", heldout(arm, spec.seed), 0.01, 1024)], {})  # fmt: skip
    build_report(cfg)
    return cfg, ReportPaths.for_config(cfg)


def _close(got, want, what):
    np.testing.assert_allclose(
        np.asarray(got, float), np.asarray(want, float), rtol=2e-5, atol=1e-7, err_msg=what
    )  # csv: 6 digits


def _paired(arm: str, reference: str) -> tuple[np.ndarray, np.ndarray]:
    """Each base's held-out value in both arms, over the bases where both have one."""
    bases = [b for b in range(BASES) if FAILED not in ((arm, b), (reference, b))]
    return np.array([heldout(arm, b) for b in bases]), np.array([heldout(reference, b) for b in bases])


def test_the_seven_planned_contrasts_are_against_tis_paired_over_bases_with_holm(tier):
    cfg, paths = tier
    planned = pd.read_csv(paths.table("planned", "csv")).set_index("contrast")
    registered = [c.name for c in cfg.study.planned]
    assert list(planned.index) == registered and len(registered) == 7
    assert set(planned["reference"]) == {"tis"}
    p = {}
    for c in cfg.study.planned:
        a, b = _paired(c.arm, c.reference)
        res = stats.ttest_rel(a, b)
        ci = res.confidence_interval(0.95)
        row = planned.loc[c.name]
        _close([row["difference"], row["low"], row["high"], row["p"]], [(a - b).mean(), ci.low, ci.high, res.pvalue],
               c.name)  # fmt: skip
        assert row["bases"] == len(a)
        p[c.name] = res.pvalue
    assert planned.loc["qurl_vs_tis", "bases"] == BASES - 1  # the failed run's base is unpaired, not imputed
    running = 0.0
    for rank, name in enumerate(sorted(p, key=p.get)):
        running = max(running, min(1.0, (len(p) - rank) * p[name]))
        _close(planned.loc[name, "p_adjusted"], running, f"{name}: Holm over the seven")
        want = "reject H0: no difference" if running < cfg.study.alpha else "not rejected"
        assert planned.loc[name, "decision"] == want, name
    # both decisions occur: the largest shift (0.12) is found, the smallest ones (0.01, -0.02) are not
    rejected = set(planned.index[planned["decision"].str.startswith("reject")])
    assert "tis_scorecenter_vs_tis" in rejected and not rejected & {"scorecenter_vs_tis", "qurl_vs_tis"}


def test_the_exploratory_contrasts_are_unadjusted(tier):
    cfg, paths = tier
    exploratory = pd.read_csv(paths.table("exploratory", "csv")).set_index("contrast")
    assert list(exploratory.index) == [c.name for c in cfg.study.exploratory]
    for c in cfg.study.exploratory:
        a, b = _paired(c.arm, c.reference)
        res = stats.ttest_rel(a, b)
        _close([exploratory.loc[c.name, "difference"], exploratory.loc[c.name, "p"]], [(a - b).mean(), res.pvalue],
               c.name)  # fmt: skip


def test_the_leaderboard_ranks_the_nine_arms_by_their_held_out_mean(tier):
    _, paths = tier
    means = {arm: np.mean([heldout(arm, b) for b in range(BASES) if (arm, b) != FAILED]) for arm in SHIFT}
    page = paths.summary.read_text()
    section = page.split("## The arms", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert [r[1].strip("`") for r in rows] == sorted(means, key=means.get, reverse=True)
    diverged = {arm: sum(a == arm for a, _ in DIVERGED) for arm in SHIFT}
    for r in rows:
        assert r[5].startswith(f"{diverged[r[1].strip('`')]} of {BASES}"), r


def test_time_to_instability_counts_each_arms_first_divergences(tier):
    _, paths = tier
    survival = pd.read_csv(paths.table("study_survival", "csv")).set_index("arm")
    assert list(survival.index) == list(SHIFT)
    for arm in SHIFT:
        steps = sorted(s for (a, _), (_, s) in DIVERGED.items() if a == arm)
        assert survival.loc[arm, "diverged"] == len(steps), arm
        if steps:
            assert (survival.loc[arm, "div_step_min"], survival.loc[arm, "div_step_max"]) == (
                steps[0],
                steps[-1],
            )
    assert survival.loc["qurl", "trained"] == BASES - 1


def test_the_bf16_control_learned_and_the_report_says_so(tier):
    _, paths = tier
    control = pd.read_csv(paths.table("control", "csv"))
    assert len(control) == 1 and control["verdict"].iloc[0] == "learned"
    assert "**learned**" in paths.summary.read_text()


def test_the_cost_per_step_counts_the_shadow_passes_per_arm(tier):
    cfg, paths = tier
    table = pd.read_csv(paths.table("throughput", "csv"))
    arm_of = {tuple(cell.split("/")[2:]): arm for arm, cell in cfg.study.arms.items()}
    cells = zip(table["variant"], table["granularity"], table["condition"].fillna("none"), strict=True)
    table["arm"] = [arm_of[cell] for cell in cells]
    table = table.set_index("arm")
    assert sorted(table.index) == sorted(SHIFT)
    for arm in SHIFT:
        per_step = [phase_s(arm, s) for s in range(1, cfg.schedule.steps + 1)]
        _close(table.loc[arm, "step_time_s"], np.mean([sum(x) for x in per_step]), arm)
        if arm != "bf16":
            share = 100 * sum(x[3] for x in per_step) / sum(sum(x[:3]) for x in per_step)
            _close(table.loc[arm, "calib_overhead_pct"], share, arm)
    assert (
        table.loc["tis_calib", "step_time_s"]
        > table.loc["tis_calib_every20", "step_time_s"]
        > table.loc["tis", "step_time_s"]
    )


def test_the_leaderboard_quote_ranks_the_arms_and_prices_their_steps_from_the_tables(tier):
    """The README's quoted leaderboard (`corrections-leaderboard`) read from the tier's tables as the report
    wrote them: the arms in the leaderboard's order, then each arm's step against TIS's and bf16's and the
    shadow's share, each recomputed from the phase times the fixture wrote."""
    import fp8rl.quotes.studies  # noqa: F401  (registers the block)
    from fp8rl.quotes.registry import BLOCKS
    from fp8rl.report.formats import g, num

    cfg, _ = tier
    text = BLOCKS["corrections-leaderboard"](Path(cfg.results_dir))
    board, cost = text.split("Cost per step", 1)
    means = {arm: np.mean([heldout(arm, b) for b in range(BASES) if (arm, b) != FAILED]) for arm in SHIFT}
    ranked = [
        line.split(" | ")[1].strip("`")
        for line in board.splitlines()
        if line.startswith("| ") and "`" in line
    ]
    assert ranked == sorted(means, key=means.get, reverse=True)
    assert "execution: emulated" in cost

    def mean_step(arm):
        return np.mean([sum(phase_s(arm, s)) for s in range(1, cfg.schedule.steps + 1)])

    rows = {r[0].strip("| `"): [c.strip(" |") for c in r[1:]] for r in
            (line.split(" | ") for line in cost.splitlines() if line.startswith("| `"))}  # fmt: skip
    assert list(rows) == list(cfg.study.arms)  # the study's order
    for arm, cells in rows.items():
        per_step = [phase_s(arm, s) for s in range(1, cfg.schedule.steps + 1)]
        share = 100 * sum(x[3] for x in per_step) / sum(sum(x[:3]) for x in per_step)
        assert cells == [
            num(mean_step(arm), 2), f"{num(mean_step(arm) / mean_step('tis'), 2)}×",
            f"{num(mean_step(arm) / mean_step('bf16'), 2)}×", g(share) if arm != "bf16" else "–",
        ], arm  # fmt: skip


def test_the_findings_quote_gives_each_planned_decision_holm_makes_and_each_arms_divergences(tier):
    """The README's quoted findings (`corrections-findings`): the control's verdict, the seven planned
    contrasts in the registered order with the decision Holm makes over paired t-tests recomputed here,
    the exploratory ones marked unadjusted, and each arm's divergences as the fixture wrote them."""
    import fp8rl.quotes.studies  # noqa: F401  (registers the block)
    from fp8rl.quotes.registry import BLOCKS

    cfg, _ = tier
    lines = BLOCKS["corrections-findings"](Path(cfg.results_dir)).splitlines()
    assert lines[0].startswith("- bf16 control") and lines[0].endswith("**learned**.")
    p = {c.name: stats.ttest_rel(*_paired(c.arm, c.reference)).pvalue for c in cfg.study.planned}
    rejected, running = set(), 0.0
    for rank, name in enumerate(sorted(p, key=p.get)):
        running = max(running, min(1.0, (len(p) - rank) * p[name]))
        rejected |= {name} if running < cfg.study.alpha else set()
    planned = lines[1 : 1 + len(p)]
    assert [line.split(" ", 2)[1] for line in planned] == [c.name for c in cfg.study.planned]
    for c, line in zip(cfg.study.planned, planned, strict=True):
        assert "(held-out sampled reward, bf16 sampler, paired t over bases, Holm)" in line
        assert line.endswith("reject H0: no difference." if c.name in rejected else "not rejected."), line
    assert sum("Exploratory, not a planned test" in line and "unadjusted" in line for line in lines) == len(
        cfg.study.exploratory
    )
    survival = lines[-1]
    for arm in SHIFT:
        trained = BASES - (arm == FAILED[0])
        assert f" {arm} {sum(a == arm for a, _ in DIVERGED)}/{trained}" in survival, arm
