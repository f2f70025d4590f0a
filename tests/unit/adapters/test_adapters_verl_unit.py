"""The verl adapter without verl: overrides and their refusals, metric import, data, job script, CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fp8rl.adapters.verl_data import verl_rows, write_parquet
from fp8rl.adapters.verl_launch import render_script
from fp8rl.adapters.verl_metrics import convert_row, import_log, import_rows, run_status
from fp8rl.adapters.verl_model import AdapterError, parallelism
from fp8rl.adapters.verl_overrides import VerlPaths, deviations, loss_spec, verl_overrides
from fp8rl.adapters.verl_support import check_verl_support
from fp8rl.commands.config import CONFIG_CHECKS
from fp8rl.config import StabilityConfig
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.vocabulary import CalibReference

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
PATHS = VerlPaths("/m", "/d/train.parquet", "/d/test.parquet", "/out dir")


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER, ["calib.reference=run"])


def _ov(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_parallelism_per_model_size(paper):
    got = {m.name: parallelism(m) for m in paper.models}
    assert [(p.tp, p.pp, p.rollout_tp) for p in got.values()] == [(2, 1, 1), (4, 1, 2), (8, 1, 4)]
    with pytest.raises(AdapterError, match="gpus_per_node"):
        parallelism(paper.models[0].model_copy(update={"gpus_per_node": 0}))
    with pytest.raises(AdapterError, match="params"):
        parallelism(paper.models[0].model_copy(update={"params": None}))


def test_refusals_name_the_key(paper):
    spec = RunSpec("grpo", "qwen3-8b", "fp8", "rowwise", 0)
    with pytest.raises(AdapterError, match="matrix.granularities.*rowwise"):
        check_verl_support(paper, spec)
    e5m2 = paper.model_copy(update={"fp8": paper.fp8.model_copy(update={"format": "e5m2"})})
    with pytest.raises(AdapterError, match="fp8.format"):
        check_verl_support(e5m2, RunSpec("grpo", "qwen3-8b", "fp8", "tensorwise", 0))
    check_verl_support(e5m2, RunSpec("grpo", "qwen3-8b", "fp8", "blockwise", 0))  # block recipes are e4m3
    # config validation rejects a shadow reference on verl; the adapter refuses it too if handed one
    shadow = paper.model_copy(
        update={"calib": paper.calib.model_copy(update={"reference": CalibReference("shadow")})}
    )
    with pytest.raises(AdapterError, match="calib.reference"):
        check_verl_support(shadow, RunSpec("dapo", "qwen3-8b", "fp8_calib", "blockwise", 0))
    check_verl_support(shadow, RunSpec("dapo", "qwen3-8b", "fp8_tis", "blockwise", 0))


def test_shadow_reference_in_a_verl_config_fails_validation():
    from fp8rl.config_loader import ConfigError

    with pytest.raises(ConfigError, match="calib.reference"):
        load_config(PAPER, ["calib.reference=shadow"], checks=CONFIG_CHECKS)


def test_rowwise_in_a_verl_config_fails_validation():
    from fp8rl.config_loader import ConfigError

    with pytest.raises(ConfigError, match="rowwise"):
        load_config(PAPER, ["matrix.granularities=[rowwise]"], checks=CONFIG_CHECKS)


def test_grpo_bf16_vs_dapo_fp8_overrides(paper):
    bf16 = _ov(verl_overrides(paper, RunSpec("grpo", "qwen3-14b", "bf16", "none", 1), PATHS))
    assert bf16["actor_rollout_ref.rollout.quantization"] == "null"
    assert bf16["algorithm.rollout_correction.rollout_is"] == "null"
    assert not any("override_transformer_config.fp8" in k or "filter_groups" in k for k in bf16)
    assert bf16["actor_rollout_ref.actor.clip_ratio_high"] == "0.2"
    assert "actor_rollout_ref.actor.clip_ratio_c" not in bf16  # grpo: no dual clip (clip_c None)
    assert (
        bf16["trainer.nnodes"] == "2"
        and bf16["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == "4"
    )
    assert bf16["trainer.default_local_dir"] == "'/out dir/verl_checkpoints'"  # quoted for Hydra
    dapo = _ov(verl_overrides(paper, RunSpec("dapo", "qwen3-8b", "fp8_tis_calib", "tensorwise", 0), PATHS))
    assert dapo["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    assert dapo["actor_rollout_ref.actor.clip_ratio_c"] == "10.0"
    assert dapo["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert dapo["algorithm.filter_groups.enable"] == "true"
    assert dapo["+reward.reward_kwargs.overlong_buffer_cfg.len"] == "4096"
    assert dapo["+actor_rollout_ref.actor.megatron.override_transformer_config.fp8"] == "hybrid"
    assert dapo["+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_recipe"] == "tensorwise"
    assert dapo["actor_rollout_ref.rollout.quantization"] == "fp8"
    assert dapo["algorithm.rollout_correction.rollout_is"] == "token"
    assert dapo["algorithm.rollout_correction.rollout_is_threshold"] == "2.0"
    assert dapo["actor_rollout_ref.actor.policy_loss.loss_mode"] == "calibrated_clip"


@pytest.mark.parametrize("model", ["qwen3-8b", "qwen3-14b", "qwen2.5-32b"])
def test_the_actor_waits_in_host_memory_while_vllm_generates(paper, model):
    """The sync trainer colocates the actor and vLLM: the actor's weights, gradients and optimizer state
    are offloaded while vLLM holds its share of each GPU."""
    ov = _ov(verl_overrides(paper, RunSpec("dapo", model, "fp8_tis_calib", "blockwise", 0), PATHS))
    assert ov["actor_rollout_ref.actor.megatron.param_offload"] == "true"
    assert ov["actor_rollout_ref.actor.megatron.optimizer_offload"] == "true"
    assert ov["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.5"


def test_loss_spec_and_deviations(paper):
    spec = RunSpec("dapo", "qwen3-8b", "fp8_calib", "blockwise", 2)
    ls = loss_spec(paper, spec, targets={2: (0.03, None), 1: (0.02, 0.01)})
    assert ls["clip_c"] == 10.0 and ls["calib"]["reference"] == "run"
    assert ls["calib"]["targets"] == {"1": [0.02, 0.01], "2": [0.03, None]}
    assert loss_spec(paper, RunSpec("grpo", "qwen3-8b", "bf16", "none", 0)) == {
        "run_id": "grpo/qwen3-8b/bf16/none/seed0", "clip_c": None, "calib": None,
    }  # fmt: skip
    assert any("bf16" in d for d in deviations(paper, spec))
    assert any("filter_groups.metric acc" in d for d in deviations(paper, spec))  # DAPO: acc vs shaped
    assert not any(
        "filter_groups" in d
        for d in deviations(paper, RunSpec("grpo", "qwen3-8b", "fp8_calib", "blockwise", 2))
    )
    assert deviations(paper, RunSpec("grpo", "qwen3-8b", "bf16", "none", 0)) == []


def test_metric_import_names_and_absence():
    row = convert_row(3, {
        "critic/score/mean": 0.5, "actor/entropy": 1.2, "rollout_corr/kl": 0.01, "rollout_corr/k3_kl": float("nan"),
        "actor/clip/low_neg": 0.02, "calib/low": 0.7, "timing_s/gen": 12.0, "perf/mfu": 0.4, "actor/pg_loss": 0.1,
    })  # fmt: skip
    assert row == {"step": 3, "reward/mean": 0.5, "entropy": 1.2, "mismatch/kl_k1": 0.01, "time/rollout_s": 12.0,
                   "clip/low_neg": 0.02, "calib/low": 0.7}  # fmt: skip
    rows = import_rows(
        [{"step": 2, "data": {"actor/entropy": 1.0}}, {"step": 1, "data": {"actor/entropy": 2.0}}]
    )
    assert [r["step"] for r in rows] == [1, 2]
    with pytest.raises(ValueError, match="row 1"):
        import_rows([{"data": {}}])


def test_import_log_and_status(tmp_path):
    log = tmp_path / "verl_log.jsonl"
    entropies = [1.0, 1.0, 1.0, 1.1, 5.0, 5.0, 5.0, 5.0]
    log.write_text(
        "".join(
            json.dumps({"step": i + 1, "data": {"actor/entropy": e}}) + "\n" for i, e in enumerate(entropies)
        )
    )
    rows = import_log(log, tmp_path / "metrics.jsonl")
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 8
    st = StabilityConfig(entropy_spike_k=3.0, entropy_spike_m=3, baseline_steps=3)
    outcome = run_status(rows, steps_planned=8, exit_code=0, stability=st)
    assert outcome.status == "diverged" and outcome.step == 8 and "entropy" in outcome.reason
    assert outcome.divergence["kind"] == "entropy_spike" and outcome.divergence["step"] == 7
    calm = rows[:4]
    assert run_status(calm, steps_planned=4, exit_code=0, stability=st) == ("ok", None, 4, None)
    assert run_status(calm, steps_planned=10, exit_code=0, stability=st)[0] == "failed"
    assert run_status(calm, steps_planned=4, exit_code=137, stability=st)[1] == "verl exited with code 137"


def test_verl_status_sees_every_detector(tmp_path):
    """A verl run is judged by the same detectors as a reference run: a reward that collapses after
    learning, with a calm entropy, is a divergence too."""
    rewards = [0.1, 0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    log = tmp_path / "verl_log.jsonl"
    log.write_text("".join(
        json.dumps({"step": i + 1, "data": {"actor/entropy": 1.0, "critic/score/mean": r}}) + "\n"
        for i, r in enumerate(rewards)
    ))  # fmt: skip
    rows = import_log(log, tmp_path / "metrics.jsonl")
    st = StabilityConfig(reward_collapse_frac=0.5, reward_window=3, patience=2)
    outcome = run_status(rows, steps_planned=len(rewards), exit_code=0, stability=st)
    assert outcome.status == "diverged" and outcome.divergence["kind"] == "reward_collapse"
    assert outcome.step == len(rewards) and outcome.divergence["step"] < len(rewards)


def test_data_rows_to_verl_parquet(tmp_path):
    import pandas as pd

    src = tmp_path / "train.jsonl"
    src.write_text(json.dumps({"id": "a-1", "level": "all", "prompt": "1+1?", "answer": "2"}) + "\n")
    out = write_parquet(src, tmp_path / "verl" / "train.parquet", task="dapo-math-17k", split="train")
    df = pd.read_parquet(out)
    row = df.iloc[0]
    assert row["data_source"] == "math_dapo" and row["reward_model"]["ground_truth"] == "2"
    assert list(row["prompt"][0].values()) == ["user", "1+1?"]
    with pytest.raises(ValueError, match="answer"):
        verl_rows([{"prompt": "x"}], task="gsm8k", split="test")


@pytest.mark.parametrize("image", [None, "/img/train.sif"])
def test_job_script_is_valid_bash(tmp_path, image, paper):
    from fp8rl.containers import apptainer_exec

    prefix = apptainer_exec(paper, image) if image else ""
    text = render_script(run_id="dapo/m/fp8/blockwise/seed0", overrides=["a.b=1", "c='x y'"], out="/r/run",
                         nodes=4, gpus_per_node=8, prefix=prefix, env={"HF_HOME": "/s/hf"})  # fmt: skip
    script = tmp_path / "s.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert (
        "ray start --head" in text
        and "ray start --address" in text
        and "fp8rl.adapters.verl_checkpoint export" in text
    )
    assert (
        "-m verl.trainer.main_ppo --config-name ppo_megatron_trainer" in text
        and "'c='\"'\"'x y'\"'\"''" in text
    )
    assert ("apptainer exec --nv" in text) == (image is not None)
    if image:  # every process in the image sees the shared hub cache
        assert f"--bind {Path(paper.hub.home).resolve()}" in text and "HF_HUB_OFFLINE=1" in text
    assert "export HF_HOME=/s/hf" in text


def test_each_attempt_of_the_job_script_logs_to_its_own_file(tmp_path):
    """verl's file logger truncates its file: a resubmitted job must not overwrite the last attempt's."""
    text = render_script(run_id="grpo/m/bf16/none/seed0", overrides=[], out=str(tmp_path), nodes=1,
                         gpus_per_node=8, python="echo")  # fmt: skip
    text = text.split("VERL_RC=$?")[0]  # up to verl's (here echoed) command, without the model merger
    script = tmp_path / "s.sh"
    script.write_text(text + 'echo "$VERL_FILE_LOGGER_PATH"\n')
    logs = []
    for _ in range(2):
        out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout
        path = Path(out.strip().splitlines()[-1])
        assert f"VERL_FILE_LOGGER_PATH='{path}'" in out  # handed to verl's Ray workers as well
        path.write_text("{}\n")  # what verl would log
        logs.append(path.name)
    assert logs == ["attempt-001.jsonl", "attempt-002.jsonl"]


def test_slurm_resources_per_model(paper):
    from fp8rl.adapters.verl_launch import slurm_resources

    m = paper.model("qwen2.5-32b")
    assert slurm_resources(m.nodes, m.gpus_per_node) == {"nodes": 4, "gres": "gpu:8", "tasks_per_node": 1}


def test_verl_plugins_entry_point_names_the_loss_module():
    """verl loads every `verl.plugins` entry point when it is imported (VERL_USE_EXTERNAL_PLUGINS=auto)."""
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("fp8rl") == "fp8rl.adapters.verl_loss"


def test_config_trackers_join_verls_own_logger(paper):
    spec = RunSpec("grpo", "qwen3-14b", "bf16", "none", 1)
    env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    paper = paper.model_copy(deep=True)  # the module's config stays as loaded for the other tests
    default = _ov(verl_overrides(paper, spec, PATHS))
    assert default["trainer.logger"] == "[console,file,tensorboard]"  # TensorBoard is on by default
    assert default[f"{env}.TENSORBOARD_DIR"] == "'/out dir/verl_tb'"
    assert not any(k.startswith(f"{env}.WANDB") or k.startswith(f"{env}.MLFLOW") for k in default)
    paper.tracking.tensorboard = False
    paper.tracking.wandb.enabled = paper.tracking.mlflow.enabled = True
    ov = _ov(verl_overrides(paper, spec, PATHS))
    assert ov["trainer.logger"] == "[console,file,wandb,mlflow]"
    assert ov[f"{env}.WANDB_MODE"] == "'offline'" and ov[f"{env}.WANDB_DIR"] == "'/out dir'"
    uri = ov[f"{env}.MLFLOW_TRACKING_URI"]
    assert uri.startswith("'file:///") and uri.endswith("/paper/mlruns'")
    # Ray's runtime_env takes strings only: every value quoted, so Hydra never reads a bool or an int
    assert ov[f"{env}.MLFLOW_ALLOW_FILE_STORE"] == "'true'"
    assert f"{env}.TENSORBOARD_DIR" not in ov


def test_verls_project_is_the_configured_wandb_project_or_mlflow_experiment(paper):
    """verl's loggers take `trainer.project_name` as the W&B project and the MLflow experiment: the
    config's names reach them, and a clash of the two is a recorded deviation."""
    spec = RunSpec("grpo", "qwen3-14b", "bf16", "none", 1)
    paper = paper.model_copy(deep=True)
    assert _ov(verl_overrides(paper, spec, PATHS))["trainer.project_name"] == "fp8rl"
    paper.tracking.mlflow.enabled, paper.tracking.mlflow.experiment = True, "fp8-sweep"
    assert _ov(verl_overrides(paper, spec, PATHS))["trainer.project_name"] == "fp8-sweep"
    assert deviations(paper, spec) == []
    paper.tracking.wandb.enabled, paper.tracking.wandb.project = True, "fp8-wandb"
    assert _ov(verl_overrides(paper, spec, PATHS))["trainer.project_name"] == "fp8-wandb"
    assert deviations(paper, spec) == [
        "MLflow experiment 'fp8-wandb', not tracking.mlflow.experiment 'fp8-sweep': verl names the W&B "
        "project and the MLflow experiment alike (trainer.project_name)"
    ]
