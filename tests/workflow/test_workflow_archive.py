"""The run archive for real on a tiny DAG: a finished tier is archived, its results folder and Snakemake's
records are removed (a fresh machine), the data is rebuilt with `--until data`, and `fp8rl archive
restore` puts the base and the runs back byte for byte, so the DAG plans no SFT, no training and no
evaluation, only the report; another tier with the same SFT sections takes the bases alone out of it
(`--bases-from`). A base built here that is not the one the runs were trained from keeps
them out (exit 1, naming it), an edited archive file is named (exit 2), and saving again keeps an
archived run the results folder lacks."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from test_workflow_run import TINY
from workflow_helpers import REPO, planned_jobs, snakemake, write_config

from fp8rl.io import loads_json

pytestmark = pytest.mark.slow

HELDOUT = ["eval.heldout={prompts: 16, samples: 1}"]


def fp8rl(workdir, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", *args], cwd=workdir, capture_output=True, text=True, timeout=300
    )


def run_files(tier) -> dict[str, bytes]:
    """Every file of every run directory except checkpoints, TensorBoard logs and the lock."""
    runs = tier / "runs"
    return {
        p.relative_to(runs).as_posix(): p.read_bytes()
        for p in sorted(runs.rglob("*"))
        if p.is_file()
        and not {"checkpoint", "checkpoints", "tb"} & set(p.relative_to(runs).parts)
        and p.name != "run.lock"
    }


def test_archived_runs_come_back_on_a_fresh_results_folder(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", "config/ci.yaml", "results_dir=results", *TINY, *HELDOUT)
    profile = ["--profile", str(REPO / "profiles" / "local"), "--cores", "1", "--configfile", str(cfg)]
    tier, archive = tmp_path / "results" / "smoke", tmp_path / "results" / "published" / "archive" / "smoke"
    snakemake(tmp_path, *profile)
    before = run_files(tier)
    assert {"grpo/tiny/bf16/none/seed0/summary.json", "grpo/tiny/bf16/none/seed1/eval/heldout.json"} <= set(
        before
    )

    def states() -> dict[str, str]:
        got = fp8rl(tmp_path, "archive", "status", "--config", str(cfg), "--json")
        assert got.returncode == 0, got.stderr
        return {r["run_id"]: r["state"] for r in loads_json(got.stdout.encode())["runs"]}

    assert set(states().values()) == {"evaluated"}  # trained and evaluated: what `save` takes
    saved = fp8rl(tmp_path, "archive", "save", "--config", str(cfg))
    assert saved.returncode == 0, saved.stderr
    manifest = loads_json((archive / "manifest.json").read_bytes())
    assert sorted(manifest["runs"]) == ["grpo/tiny/bf16/none/seed0", "grpo/tiny/bf16/none/seed1"]
    assert states() == dict.fromkeys(manifest["runs"], "archived")
    assert (archive / "runs/grpo/tiny/bf16/none/seed0/metrics.jsonl.gz").is_file()
    # the base travels whole; no run checkpoint does
    assert [p.relative_to(archive).as_posix() for p in archive.rglob("*.safetensors")] == [
        "base/tiny/model.safetensors"
    ]
    again = tmp_path / "again"
    shutil.copytree(archive, again)
    assert fp8rl(tmp_path, "archive", "save", "--config", str(cfg)).returncode == 0
    assert (archive / "runs/grpo/tiny/bf16/none/seed0/metrics.jsonl.gz").read_bytes() == (
        again / "runs/grpo/tiny/bf16/none/seed0/metrics.jsonl.gz"
    ).read_bytes()  # the same run stores the same bytes

    # Another tier whose SFT sections are these starts from these very bases (`--bases-from`): put back
    # out of this archive, so its DAG trains no SFT, and none of this tier's runs; a tier whose `sft`
    # differs gets no base from it (named, exit 1) and trains its own.
    for name, extra, code in (("other", [], 0), ("third", ["sft.lr=0.002"], 1)):
        other = write_config(tmp_path / f"{name}.yaml", "config/ci.yaml", "results_dir=results", f"tier={name}",
                             *TINY, *HELDOUT, *extra)  # fmt: skip
        other_profile = [*profile[:-1], str(other)]
        snakemake(tmp_path, *other_profile, "--until", "data")
        got = fp8rl(tmp_path, "archive", "restore", "--config", str(other), "--bases-from", "smoke")
        assert got.returncode == code, got.stdout + got.stderr
        plan = planned_jobs(tmp_path, *other_profile)
        other_base = tmp_path / "results" / name / "base" / "tiny"
        assert plan.get("train") == 2 and not (tmp_path / "results" / name / "runs").exists()
        if code == 0:
            assert "restored 1 base(s) and 0 run(s)" in got.stdout
            assert "sft" not in plan, plan
            assert {p.name: p.read_bytes() for p in other_base.iterdir() if p.is_file()} == {
                p.name: p.read_bytes() for p in (tier / "base" / "tiny").iterdir() if p.is_file()
            }
        else:
            assert "not restored base tiny: archived under SFT digest" in got.stdout
            assert plan.get("sft") == 1 and not other_base.exists()
    own = fp8rl(tmp_path, "archive", "restore", "--config", str(cfg), "--bases-from", "smoke")
    assert own.returncode == 2 and "this config's own tier" in own.stderr

    # A fresh machine: no results, no Snakemake records; the data is rebuilt, the base and runs restored.
    base_before = {p.name: p.read_bytes() for p in (tier / "base" / "tiny").iterdir() if p.is_file()}
    shutil.rmtree(tier)
    shutil.rmtree(tmp_path / ".snakemake")
    no_data = fp8rl(tmp_path, "archive", "restore", "--config", str(cfg))
    assert no_data.returncode == 2 and "--until data" in no_data.stderr
    snakemake(tmp_path, *profile, "--until", "data")
    assert planned_jobs(tmp_path, *profile).get("train") == 2
    restored = fp8rl(tmp_path, "archive", "restore", "--config", str(cfg))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "restored 1 base(s) and 2 run(s)" in restored.stdout
    assert run_files(tier) == before
    assert {p.name: p.read_bytes() for p in (tier / "base" / "tiny").iterdir() if p.is_file()} == base_before
    plan = planned_jobs(tmp_path, *profile)
    assert not {"sft", "train"} & set(plan) and not any(rule.startswith("eval") for rule in plan), plan
    snakemake(tmp_path, *profile)  # the report over the restored runs
    assert "grpo/tiny/bf16/none/seed1" in (tier / "tables" / "runs.csv").read_text()

    # A run whose eval result is missing is not archived from here (restored without a checkpoint, it
    # could never be evaluated): it is named and its archived copy stays; so does a run missing here.
    (tier / "runs/grpo/tiny/bf16/none/seed0/eval/heldout.json").unlink()
    resaved = fp8rl(tmp_path, "archive", "save", "--config", str(cfg))
    assert resaved.returncode == 0, resaved.stderr
    assert "not archived grpo/tiny/bf16/none/seed0: an eval result is missing" in resaved.stdout
    manifest = loads_json((archive / "manifest.json").read_bytes())
    assert set(manifest["runs"]) == {"grpo/tiny/bf16/none/seed0", "grpo/tiny/bf16/none/seed1"}
    assert "runs/grpo/tiny/bf16/none/seed0/eval/heldout.json" in manifest["files"]
    shutil.rmtree(tier / "runs/grpo/tiny/bf16/none/seed1")
    nothing = fp8rl(tmp_path, "archive", "save", "--config", str(cfg))
    assert (
        nothing.returncode == 2 and "no finished run (summary.json) with its eval results" in nothing.stderr
    )
    assert "grpo/tiny/bf16/none/seed1" in loads_json((archive / "manifest.json").read_bytes())["runs"]

    # A base built here that is another (one byte of its config.json): its run stays out, named.
    base_config = tier / "base" / "tiny" / "config.json"
    base_config.write_text(base_config.read_text() + " ")
    refused = fp8rl(tmp_path, "archive", "restore", "--config", str(cfg))
    assert refused.returncode == 1
    assert "not restored grpo/tiny/bf16/none/seed1" in refused.stdout
    assert "is not the base it was trained from" in refused.stdout
    assert not (tier / "runs/grpo/tiny/bf16/none/seed1").exists()

    # An edited archive file: named, nothing restored.
    summary = archive / "runs/grpo/tiny/bf16/none/seed1/summary.json"
    summary.write_text(summary.read_text().replace('"ok"', '"diverged"'))
    edited = fp8rl(tmp_path, "archive", "restore", "--config", str(cfg))
    assert edited.returncode == 2
    assert f"{summary.relative_to(tmp_path)}: its content is not the one" in edited.stderr
