"""The DAG of a tier with `sft.bases` trains B bases, not one per seed, and starts run seed s from base
s % B; a condition's `calib` override enters the train rule's digest of its calibrated runs only."""

from __future__ import annotations

import re

from workflow_helpers import planned_jobs, snakemake, write_config

from fp8rl.config import TRAIN_SECTIONS
from fp8rl.config_loader import load_config

SEEDS = "matrix.seeds=[0,1,2,3]"


def test_b_bases_are_trained_and_each_run_starts_from_its_own(tmp_path):
    cfg_file = write_config(tmp_path / "cfg.yaml", "config/smoke.yaml", SEEDS, "sft.bases=2")
    cfg = load_config(cfg_file)
    jobs = planned_jobs(tmp_path, "--configfile", str(cfg_file))
    assert jobs["sft"] == 2 and jobs["train"] == len(cfg.runs())
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg_file)).stdout
    sft = [b for b in out.split("\n\n") if "rule sft:" in b]
    assert sorted(re.search(r"--seed '?(\d+)", b).group(1) for b in sft) == ["0", "1"]
    trains = [b for b in out.split("\n\n") if "rule train:" in b]
    assert len(trains) == len(cfg.runs())
    for block in trains:
        seed = int(re.search(r"/seed(\d+)/summary.json", block).group(1))
        assert f"--base results/smoke/base/tiny/seed{seed % 2} " in block, block


def test_a_calib_override_reaches_the_train_digest_of_calibrated_runs(tmp_path):
    conditions = (
        "matrix.conditions=[{name: s4, fp8: {noise_scale: 4.0}},"
        " {name: s4_fixed, fp8: {noise_scale: 4.0}, calib: {upper: fixed}}]"
    )
    cfg_file = write_config(
        tmp_path / "cfg.yaml", "config/ci.yaml", conditions, "matrix.variants=[bf16,fp8,fp8_tis_calib]"
    )
    cfg = load_config(cfg_file)
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg_file)).stdout
    trains = [b for b in out.split("\n\n") if "rule train:" in b]
    digests = {}
    for block in trains:
        run = re.search(r"runs/(\S+)/summary.json", block).group(1)
        digests[run] = re.search(r"printf '%s\\n' '?([0-9a-f]{16})", block).group(1)
    assert digests, out
    for run, digest in digests.items():
        spec = next(r for r in cfg.runs() if r.run_id == run)
        want = cfg.section_digest(
            *TRAIN_SECTIONS, model=spec.model, condition=spec.condition, variant=spec.variant
        )
        assert digest == want, run
    fixed, prop = (digests[f"grpo/tiny/fp8_tis_calib/tensorwise/{c}/seed0"] for c in ("s4_fixed", "s4"))
    assert fixed != prop
    assert digests["grpo/tiny/fp8/tensorwise/s4_fixed/seed0"] == digests["grpo/tiny/fp8/tensorwise/s4/seed0"]


def test_the_held_out_endpoint_scores_every_run_and_each_base_once(tmp_path):
    """`eval.heldout`: each run's final checkpoint scored (in the run's one `eval` job, beside lm-eval and
    the agent benchmark) and one `eval_heldout_base` per base the runs start from, both inputs of the
    report; turning it on retrains nothing (the train rule's digest leaves the eval section out)."""
    plain = write_config(tmp_path / "plain.yaml", "config/smoke.yaml", SEEDS, "sft.bases=2")
    cfg_file = write_config(
        tmp_path / "cfg.yaml", "config/smoke.yaml", SEEDS, "sft.bases=2", "eval.heldout={prompts: 600}"
    )
    cfg = load_config(cfg_file)
    jobs = planned_jobs(tmp_path, "--configfile", str(cfg_file))
    assert jobs["eval"] == jobs["train"] == len(cfg.runs()) and jobs["eval_heldout_base"] == 2
    assert "eval_heldout_base" not in planned_jobs(tmp_path, "--configfile", str(plain))
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg_file)).stdout
    evals = [b for b in out.split("\n\n") if "rule eval:" in b]
    assert len(evals) == len(cfg.runs()) and all("fp8rl eval run lm_eval agent heldout " in b for b in evals)
    assert all("/eval/heldout.json" in b.split("output:")[1].split("\n")[0] for b in evals)
    plain_out = snakemake(tmp_path, "-n", "-p", "--configfile", str(plain)).stdout
    assert "heldout" not in plain_out
    bases = [b for b in out.split("\n\n") if "rule eval_heldout_base:" in b]
    assert sorted(re.search(r"--checkpoint '?(\S+?)'? ", b).group(1) for b in bases) == [
        "results/smoke/base/tiny/seed0", "results/smoke/base/tiny/seed1"
    ]  # fmt: skip
    assert cfg.section_digest(*TRAIN_SECTIONS) == load_config(plain).section_digest(*TRAIN_SECTIONS)
