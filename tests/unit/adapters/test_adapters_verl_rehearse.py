"""The job script against the real upstream code on a CPU: `ray.init` with the runtime_env the script
builds (verl's own `run_ppo`, a local Ray), and the rehearsal (fp8rl.adapters.verl_rehearse) of a paper
job up to its first GPU point, which a defect like an int in the runtime_env must fail.

Runs in the verl environment (test_adapters_verl_env.py); Ray starts a local CPU instance (seconds)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from fp8rl.adapters.verl_overrides import CONFIG_NAME
from fp8rl.adapters.verl_run import verl_paths, write_run_files
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
CALIB_TIS = RunSpec.parse("dapo/qwen2.5-32b/fp8_tis_calib/blockwise/seed0")

# A `python3` first on the script's PATH: records the arguments of verl's entry point and stops there
# (the preflight passes; anything else runs the real interpreter).
SHIM = f"""#!{sys.executable}
import json, os, sys
if sys.argv[1:3] == ["-m", "verl.trainer.main_ppo"]:
    json.dump(sys.argv[3:], open(os.environ["ARGV_OUT"], "w"))
    sys.exit(0)
if sys.argv[1:3] == ["-m", "fp8rl.adapters.preflight"]:
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _trainer_argv(tmp_path: Path, cfg, spec: RunSpec, env: dict[str, str]) -> list[str]:
    """The arguments the job script really passes to `python -m verl.trainer.main_ppo` (bash expands
    them: the deadline and the attempt's log path)."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text(json.dumps({"id": "x", "prompt": "1+1?", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "metrics.jsonl").write_text('{"step": 1, "clip/low_neg": 0.02, "clip/high_pos": 0.01}\n')
    script = write_run_files(cfg, spec, verl_paths(cfg, spec, out, None), data=data, reference=ref)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(SHIM)
    (bin_dir / "python3").chmod(stat.S_IRWXU)
    argv_out = tmp_path / "argv.json"
    run_env = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "ARGV_OUT": str(argv_out)}  # fmt: skip
    subprocess.run(["bash", str(script)], cwd=out, env=run_env, capture_output=True, timeout=120)
    argv = json.loads(argv_out.read_text())
    assert argv[:2] == ["--config-name", CONFIG_NAME]
    return argv[2:]


def test_ray_init_takes_the_runtime_env_the_job_script_builds(tmp_path, verl_site):
    """verl's `run_ppo` on the config Hydra composes from the script's real arguments: ray.init with the
    merged runtime_env on a local CPU Ray, and a Ray worker sees the job's variables as strings. Before
    the fix ray.init raised TypeError on the deadline (an epoch time Hydra reads as an int) and on
    MLflow's `MLFLOW_ALLOW_FILE_STORE=true` (a bool)."""
    import ray
    from hydra import compose, initialize_config_dir
    from ray import cloudpickle
    from verl.trainer.main_ppo import run_ppo

    cfg = load_config(PAPER, ["containers.mode=none", "tracking.mlflow.enabled=true"])
    argv = _trainer_argv(tmp_path, cfg, CALIB_TIS, {"SLURM_JOB_END_TIME": "1796330911"})
    config_dir = Path(sys.modules["verl"].__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name=CONFIG_NAME, overrides=argv)
    seen = tmp_path / "worker_env.json"

    @ray.remote(num_cpus=0)
    class EnvProbe:  # stands in for verl's TaskRunner: what a Ray worker of the job sees
        def run(self, config):
            keys = config.ray_kwargs.ray_init.runtime_env.env_vars.keys()
            Path(os.environ["FP8RL_PROBE_OUT"]).write_text(json.dumps({k: os.environ.get(k) for k in keys}))

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ["FP8RL_PROBE_OUT"] = str(seen)
    config.ray_kwargs.ray_init.num_cpus = 1
    try:
        run_ppo(config, task_runner_class=EnvProbe)
    finally:
        ray.shutdown()
        os.environ.pop("FP8RL_PROBE_OUT")
    env = json.loads(seen.read_text())
    assert env["MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"] == "1796330911"
    assert env["VERL_FILE_LOGGER_PATH"].endswith("verl_logs/attempt-001.jsonl")
    assert env["MLFLOW_ALLOW_FILE_STORE"] == "true"
    assert env["VERL_USE_EXTERNAL_MODULES"] == "fp8rl.adapters.verl_loss"


def test_fp8rl_verl_rehearse_takes_a_paper_job_to_its_first_gpu_point(tmp_path, verl_site, capsys):
    """The DAPO, TIS, calibrated, blockwise-FP8 cell of the 32B model (4 nodes): its job script with
    the real verl, Hydra and Ray, up to the trainer's GPU resource pools."""
    from fp8rl.cli import main

    rc = main(["verl", "rehearse", "--config", str(PAPER), "--run", CALIB_TIS.run_id, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert (
        f"{CALIB_TIS.run_id}: reached the first GPU point "
        "(verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync asks for 32 GPUs)"
    ) in out
    log = (tmp_path / CALIB_TIS.run_id.replace("/", "-") / "rehearsal.log").read_text()
    assert "preflight: ok" in log and "Started a local Ray instance" in log
    assert "train and validate dataloader initialized" in log
    for step in ("megatron_config", "dp_update", "import_metrics", "tokenizer", "checkpoint"):
        assert f"after the GPU point, {step}: passed" in out, out
    assert "on 2 gloo ranks (the job's DP: 4), 2 mini-batches of 128 sequences per rank" in out
    assert "Megatron checkpoint manager" in out  # the checkpoint chain in the paper's layout


def test_past_the_marker_a_calibrated_paper_jobs_update_gathers_its_metrics_over_dp_ranks(
    tmp_path, verl_site
):
    """The rehearsal's DP step with the 32B calibrated job's own overrides and loss spec: verl's update on
    two gloo ranks, its metrics through verl's FileLogger and the import. Before the fix the loss raised
    on `calib/floor_binds` (a metric the calibration logs when low_range's floor holds its bound up, which
    the verl loss's fixed key set did not list) in the first micro-batch, and the import dropped it."""
    from fp8rl.adapters.rehearsal_stand_ins import HUB_SHAPES
    from fp8rl.adapters.verl_rehearse import after_marker, stand_in_model

    cfg = load_config(PAPER, ["containers.mode=none"])
    # the 32B model's heads, KV heads and layers: its job's tensor-parallel size must divide them
    base = stand_in_model(tmp_path / "base", "qwen2", HUB_SHAPES["Qwen/Qwen2.5-32B"])
    argv = _trainer_argv(tmp_path, cfg, CALIB_TIS, {})  # writes the run's files under tmp_path/run
    assert "actor_rollout_ref.actor.use_dynamic_bsz=true" in argv
    steps = {s.name: s for s in after_marker(tmp_path / "run", base, checkpoint=False)}
    assert steps["megatron_config"].ok and not steps["megatron_config"].skipped, steps[
        "megatron_config"
    ].detail
    assert (
        "'fp8_recipe': 'blockwise'" in steps["megatron_config"].detail
    )  # the Qwen2 bridge, the job's recipe
    assert steps["dp_update"].ok, steps["dp_update"].detail
    assert "TIS weights" in steps["dp_update"].detail  # the loss got verl's rollout_is_weights
    assert steps["import_metrics"].ok, steps["import_metrics"].detail
    rows = [json.loads(line) for line in (tmp_path / "run" / "rehearsal_import" / "metrics.jsonl").open()]
    assert {"calib/floor_binds", "calib/low", "clip/low_neg", "clip/high_pos"} <= set(rows[0])


def test_a_runtime_env_defect_fails_the_rehearsal(tmp_path, verl_site, monkeypatch):
    """The job script as it was before the fix (the deadline unquoted): the rehearsal stops in ray.init."""
    from fp8rl.adapters import verl_rehearse, verl_run

    render = verl_run.render_script
    monkeypatch.setattr(
        verl_run, "render_script", lambda **kw: render(**kw).replace("='$DEADLINE'", "=$DEADLINE")
    )
    cfg = load_config(PAPER)
    spec = RunSpec.parse("grpo/qwen3-8b/bf16/none/seed0")
    result = verl_rehearse.rehearse_run(cfg, spec, tmp_path, timeout_s=300)
    assert not result.reached_gpu and result.exit_code != 0
    assert "runtime_env['env_vars'] must be of type Dict[str, str]" in result.log.read_text()
