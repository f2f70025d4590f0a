"""The paper tier on a cluster, without verl: the job script (deadline, TE's blockwise scale
setting, preflight, checkpoint export), the job chain's sizing, the preflight's checks against the paper
models' real module names, and a transformers-5 config read by the bfcl image's transformers 4.51.3."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from fp8rl.adapters import preflight
from fp8rl.adapters.verl_checkpoint import CheckpointError, compat_config, compat_tokenizer_config, export
from fp8rl.adapters.verl_launch import DEADLINE_ENV, render_script
from fp8rl.adapters.verl_overrides import VerlPaths, verl_overrides
from fp8rl.adapters.verl_sizing import (
    attempts_needed,
    checkpoint_bytes,
    esi_margin_s,
    ray_cpus_needed,
    save_every,
    steps_per_job,
)
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.validation import CONFIG_CHECKS

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
PATHS = VerlPaths("/m", "/d/train.parquet", "/d/test.parquet", "/out")
TF4 = ROOT / "build" / "tf4-venv" / "bin" / "python"


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER, checks=CONFIG_CHECKS)


def _ov(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_overrides_fix_the_first_forward_and_reward(paper):
    ov = _ov(verl_overrides(paper, RunSpec("dapo", "qwen3-8b", "fp8", "blockwise", 2), PATHS))
    te = "actor_rollout_ref.actor.megatron.override_transformer_config"
    assert ov[f"{te}.attention_backend"] == "fused"  # verl's default flash needs flash-attn
    assert ov[f"{te}.recompute_granularity"] == "full" and ov[f"{te}.recompute_num_layers"] == "1"
    assert ov["+reward.reward_kwargs.overlong_buffer_cfg.log"] == "false"
    assert ov["actor_rollout_ref.rollout.seed"] == "2"  # not verl's 42 for every seed
    assert int(ov["trainer.esi_redundant_time"]) == esi_margin_s(paper.model("qwen3-8b"))


def test_the_job_chain_reaches_500_steps(paper):
    runtime = paper.resources_for("train").runtime
    retries = paper.resources_for("train").retries
    for name in paper.matrix.models:
        model = paper.model(name)
        need = attempts_needed(paper, model)
        assert need is not None and need <= retries + 1
        # verl's v1 trainer saves on save_freq only: every step here (a 32B save takes ~7.5 of its 90 min)
        every = save_every(paper, model)
        assert every == 1 and steps_per_job(paper, model, every) == {"qwen2.5-32b": 7}.get(name, 11)
        assert runtime > 20 + 2 * model.step_minutes
    with pytest.raises(ConfigError, match=r"resources\.train\.retries: 12 allow 13 jobs, .* needs 72 "):
        load_config(PAPER, ["resources.train.retries=12"], checks=CONFIG_CHECKS)
    with pytest.raises(ConfigError, match=r"resources\.train\.runtime: .*no job would reach a checkpoint"):
        load_config(PAPER, ["resources.train.runtime=90"], checks=CONFIG_CHECKS)
    # storage: a 32B checkpoint with fp32 moments is ~450 GB, two kept while a run trains
    assert 4.0e11 < checkpoint_bytes(paper.model("qwen2.5-32b"), fp8_moments=False) < 5.0e11


def _script(tmp_path: Path, steps: int = 3) -> Path:
    script = tmp_path / "verl_launch.sh"
    script.write_text(render_script(run_id="grpo/m/bf16/none/seed0", overrides=["a=1"], out=str(tmp_path),
                                    nodes=1, gpus_per_node=8, python="python3", runtime_min=60, steps=steps))  # fmt: skip
    return script


def test_the_job_script_sets_the_deadline_and_exports_the_checkpoint(tmp_path):
    """The script run with stand-ins for nvidia-smi, the preflight, verl and the export: verl gets the
    job's end, TE's blockwise scale setting follows the GPU, checkpoints go once the run is complete."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 9.0\n")
    # python3 stand-in: records its arguments and the environment it got, plays verl's checkpoint
    (bin_dir / "python3").write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
env | grep -E '^(NVTE_|{DEADLINE_ENV})' >> {tmp_path}/env
case "$*" in *main_ppo*) mkdir -p {tmp_path}/verl_checkpoints/global_step_3 && \
echo 3 > {tmp_path}/verl_checkpoints/latest_checkpointed_iteration.txt ;; esac
""")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_END_TIME": "1900000000"}
    env.pop("SLURM_JOB_ID", None)
    res = subprocess.run(["bash", str(_script(tmp_path))], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("-m fp8rl.adapters.preflight job") and "main_ppo" in calls[1]
    assert f"{DEADLINE_ENV}='1900000000'" in calls[1]  # quoted: a string to Hydra, as Ray requires
    assert (
        calls[2].startswith("-m fp8rl.adapters.verl_checkpoint export") and "global_step_3/actor" in calls[2]
    )
    assert "NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1" in (tmp_path / "env").read_text()
    assert not list((tmp_path / "verl_checkpoints").glob("global_step_*"))  # complete: only checkpoint/ stays


def test_the_cpu_numerics_pin_stays_out_of_the_gpu_jobs_processes(tmp_path):
    """`fp8rl verl train` imports fp8rl, which pins the CPU math libraries in its environment; the job
    script's processes (preflight, Ray, verl, the export) run without the pin, in `fast` mode, and keep
    a value the user set themselves."""
    from fp8rl import numerics

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 9.0\n")
    (bin_dir / "python3").write_text(f"#!/bin/sh\nenv >> {tmp_path}/env.$$\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = numerics.environment("reproducible", {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    env["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE"  # the user's own choice, not the pin's
    env.pop("SLURM_JOB_ID", None)
    res = subprocess.run(["bash", str(_script(tmp_path))], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    seen = list(tmp_path.glob("env.*"))
    assert len(seen) == 2  # the preflight and verl
    for path in seen:
        got = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        assert got[numerics.ENV_MODE] == "fast"
        pinned = {k: got[k] for k in {**numerics.PINNED_ENV, **numerics.REPRODUCIBLE_RUNTIME_ENV} if k in got}
        assert pinned == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}


# python3 stand-in playing verl across a run's chain of jobs: resumes from latest_checkpointed_iteration.txt,
# saves three steps, and (as verl's checkpoint manager, max_actor_ckpt_to_keep=2) removes only the saves
# this job wrote; notes the saves it found; with FAKE_KILL=1 Slurm's time limit kills the job after them.
CHAIN_PYTHON = """#!/usr/bin/env bash
case " $* " in
  *" verl.trainer.main_ppo "*)
    ckpt={ckpt}
    mkdir -p "$ckpt"
    ls "$ckpt" | grep global_step_ | sed 's/global_step_//' | sort -n | tr '\\n' ' ' >> {found}; echo >> {found}
    last=$(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0)
    mine=()
    for s in $(seq $((last + 1)) $((last + 3))); do
      mkdir -p "$ckpt/global_step_$s/actor" && echo "$s" > "$ckpt/latest_checkpointed_iteration.txt"
      mine+=("$s")
      if [ "${{#mine[@]}}" -gt 2 ]; then rm -rf "$ckpt/global_step_${{mine[0]}}"; mine=("${{mine[@]:1}}"); fi
    done
    if [ "${{FAKE_KILL:-0}}" = 1 ]; then kill -KILL $PPID; fi ;;
esac
exit 0
"""


def test_a_runs_chain_of_jobs_keeps_two_saves(tmp_path):
    """verl's checkpoint manager forgets the saves of earlier jobs; the job script keeps only the latest
    save and the one before it, also after a job Slurm killed at its limit (pruned by the next job)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ckpt, found = tmp_path / "verl_checkpoints", tmp_path / "found"
    (bin_dir / "python3").write_text(CHAIN_PYTHON.format(ckpt=ckpt, found=found))
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("SLURM_JOB_ID", None)
    script = _script(tmp_path, steps=100)

    def saves() -> list[int]:
        return sorted(int(p.name.removeprefix("global_step_")) for p in ckpt.glob("global_step_*"))

    for kill in ("0", "1", "0"):
        subprocess.run(["bash", str(script)], env={**env, "FAKE_KILL": kill}, capture_output=True)
    assert found.read_text().splitlines() == ["", "2 3 ", "5 6 "]  # what each job's verl found
    assert saves() == [8, 9]


def test_export_refuses_what_is_not_a_verl_save(tmp_path):
    with pytest.raises(CheckpointError, match="not a verl save"):
        export(tmp_path, tmp_path / "checkpoint")


# ---------------------------------------------------------------------------------------- preflight

BLOCK = ["+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_recipe=blockwise",
         "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused",
         "actor_rollout_ref.rollout.quantization=fp8"]  # fmt: skip
GOOD = {"cuda": "13.0", "capability": (9, 0), "vllm": preflight.VLLM_PIN, "flash_attn": False,
        "environ": {"NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1"}, "modules": None}  # fmt: skip


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"cuda": "12.8"}, "CUDA >= 12.9"),
        ({"environ": {}}, "NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1"),
        ({"capability": (10, 0)}, "must be 0 or unset"),
        ({"vllm": "0.25.0"}, "verl's patch of vLLM"),
        (
            {"environ": {"NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1", "NVTE_FUSED_ATTN": "0"}},
            "NVTE_FUSED_ATTN=0",
        ),
        ({"capability": (8, 0)}, "compute capability >= 8.9"),
        ({"modules": ["lm_head", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.gate"]}, None),
        ({"modules": ["model.layers.0.mlp.gate_proj", "model.layers.0.block_sparse_moe.gate"]}, "moe.gate"),
        ({"modules": ["model.layers.0.mlp.router"]}, "mlp.router"),
        ({"modules": ["model.layers.0.mlp.shared_expert_gate"]}, "shared_expert_gate"),
    ],
)
def test_preflight_names_each_pitfall(change, needle):
    assert preflight.problems(BLOCK, GOOD) == []
    found = preflight.problems(BLOCK, {**GOOD, **change})
    if needle is None:  # router and lm_head are not FP8 modules, gate_proj is
        assert found == []
    else:
        assert any(needle in p for p in found), found


def test_preflight_rejects_verls_default_attention_without_flash_attn():
    found = preflight.problems(BLOCK[:1] + BLOCK[2:], GOOD)
    assert any("flash-attn" in p for p in found)


# The paper models' shapes (hub config.json): layers and the fields that name modules.
PAPER_MODELS = {
    "qwen3-8b": ("Qwen3Config", 36),
    "qwen3-14b": ("Qwen3Config", 40),
    "qwen2.5-32b": ("Qwen2Config", 64),
}


@pytest.mark.parametrize("name", PAPER_MODELS)
def test_fp8_stays_off_router_gate_lm_head_of_each_paper_model(name, tmp_path):
    """The real module names of each paper model (its transformers class, on the meta device): FP8 takes
    the block linears and nothing else; lm_head, embeddings, norms stay high precision."""
    import transformers

    cls, layers = PAPER_MODELS[name]
    config = getattr(transformers, cls)(vocab_size=128, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    config.save_pretrained(tmp_path)
    names = preflight.meta_weight_modules(str(tmp_path))
    fp8 = preflight.fp8_modules(names)
    assert preflight.exclusion_problems(names) == []
    assert "lm_head" in names and "lm_head" not in fp8 and "model.embed_tokens" not in fp8
    assert len(fp8) == layers * 7  # q, k, v, o, gate_proj, up_proj, down_proj per layer
    assert not any(
        n.endswith("mlp.gate") for n in names
    )  # dense: verl's vLLM router exclusions match nothing


def test_the_fp8_exclusion_check_fails_where_vllm_would_quantize_a_gate(tmp_path):
    """A model whose gate verl's vLLM FP8 config does not ignore fails the check (Qwen2-MoE's
    shared_expert_gate, a linear layer outside `model.layers.N.mlp.gate`); its router, which verl ignores,
    and its LM head do not."""
    import transformers

    config = transformers.Qwen2MoeConfig(vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=32, num_experts=4, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    config.save_pretrained(tmp_path)
    names = preflight.meta_weight_modules(str(tmp_path))
    assert "model.layers.0.mlp.gate" in names  # the router: a 2-D weight, not an nn.Linear in transformers 5
    found = preflight.exclusion_problems(names)
    assert [p.split()[4] for p in found] == [f"model.layers.{i}.mlp.shared_expert_gate" for i in range(2)]


# --------------------------------------------------------------------- RoPE base for the bfcl image


def test_a_transformers_5_checkpoint_reads_with_rope_base_1e6_in_transformers_4(tmp_path):
    if not TF4.is_file():
        pytest.skip(f"needs transformers 4.51.3 (the bfcl image's): run scripts/upstream_src.sh (no {TF4})")
    import transformers

    config = transformers.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1_000_000.0)  # fmt: skip
    config.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    read = "import sys, transformers; print(transformers.AutoConfig.from_pretrained(sys.argv[1]).rope_theta)"
    if "rope_theta" not in raw:  # what transformers 5 writes: 4.51.3 falls back to its default base
        before = subprocess.run(
            [str(TF4), "-c", read, str(tmp_path)], capture_output=True, text=True, check=True
        )
        assert float(before.stdout) == 10000.0
    (tmp_path / "config.json").write_text(json.dumps(compat_config(raw)))
    after = subprocess.run([str(TF4), "-c", read, str(tmp_path)], capture_output=True, text=True, check=True)
    assert float(after.stdout) == 1_000_000.0


# A Qwen2-style BPE tokenizer with chat special tokens saved by transformers 4 (argv[2]: the
# vocabulary's directory, argv[1]: where to save): a hub snapshot's tokenizer.
SAVE_TOKENIZER = """
import json, sys
from transformers import Qwen2Tokenizer
d = sys.argv[2]
json.dump({t: i for i, t in enumerate(["a", "b", "c", "1", "2", "\u0120", "\u0120a", "ab"])},
          open(d + "/vocab.json", "w"))
open(d + "/merges.txt", "w").write("#version: 0.2\\n\u0120 a\\na b\\n")
tok = Qwen2Tokenizer(vocab_file=d + "/vocab.json", merges_file=d + "/merges.txt", eos_token="<|endoftext|>",
                     pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
tok.save_pretrained(sys.argv[1])
"""

# What verl's checkpoint manager does with the base model's tokenizer: loaded and saved again by the train
# image's transformers 5 (argv[1]: the snapshot, argv[2]: the save's Hugging Face directory).
RESAVE_TOKENIZER = """
import sys
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
"""

# What the bfcl image's handler does first: load the checkpoint's tokenizer (its chat template,
# special tokens and encoding printed to compare).
LOAD_TOKENIZER = """
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(tok.chat_template, sorted(tok.all_special_tokens), tok("<|im_start|>ab a<|im_end|>")["input_ids"])
"""


@pytest.mark.parametrize("base", [True, False])
def test_the_exported_tokenizer_loads_in_transformers_4(tmp_path, base):
    """verl's save holds a tokenizer written by transformers 5 (`extra_special_tokens` as a list), which
    the bfcl image's transformers 4.51.3 cannot load; the export gives the checkpoint the base snapshot's
    tokenizer (with --tokenizer, as the job script passes it) or a converted config (without)."""
    import sys

    if not TF4.is_file():
        pytest.skip(f"needs transformers 4.51.3 (the bfcl image's): run scripts/upstream_src.sh (no {TF4})")
    vocab = tmp_path / "vocab"
    vocab.mkdir()
    snapshot, actor = tmp_path / "snapshot", tmp_path / "actor"
    hf = actor / "model" / "huggingface"
    subprocess.run(
        [str(TF4), "-c", SAVE_TOKENIZER, str(snapshot), str(vocab)], check=True, capture_output=True
    )
    subprocess.run(
        [sys.executable, "-c", RESAVE_TOKENIZER, str(snapshot), str(hf)], check=True, capture_output=True
    )
    (hf / "config.json").write_text(json.dumps({"model_type": "qwen3", "rope_theta": 1_000_000.0}))
    (hf / "model.safetensors").write_bytes(b"w")

    def load(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(TF4), "-c", LOAD_TOKENIZER, str(path)], capture_output=True, text=True)

    verls = load(hf)
    assert verls.returncode != 0 and "'list' object has no attribute 'keys'" in verls.stderr
    target = tmp_path / "checkpoint"
    export(actor, target, tokenizer=snapshot if base else None)
    exported, want = load(target), load(snapshot)
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert exported.stdout == want.stdout and "<|im_start|>" in want.stdout
    if base:
        for name in ("tokenizer_config.json", "vocab.json", "merges.txt"):
            assert (target / name).read_bytes() == (snapshot / name).read_bytes()


def test_the_job_script_exports_with_the_base_snapshots_tokenizer(tmp_path):
    from fp8rl.adapters.verl_run import verl_paths, write_run_files

    cfg = load_config(PAPER)
    spec = RunSpec.parse("grpo/qwen3-8b/fp8_tis/tensorwise/seed1")
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text(json.dumps({"id": "x", "prompt": "2+2?", "answer": "4"}) + "\n")
    script = write_run_files(cfg, spec, verl_paths(cfg, spec, tmp_path / "run", base), data=data)
    export_call = script.read_text().split("verl_checkpoint export", 1)[1].split("\n    if", 1)[0]
    assert f"--tokenizer {base}" in export_call


def test_the_cost_table_is_the_sizings(paper):
    """docs/cluster.md, "How long, how big": jobs per run as verl_sizing plans them, node-hours = jobs x 12 h x nodes."""
    table = {}
    for line in (ROOT / "docs" / "cluster.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and re.fullmatch(r"Qwen[\d.]+-\d+B", cells[0]):
            table[cells[0].lower()] = cells
    assert set(table) == set(paper.matrix.models)
    for name, cells in table.items():
        model = paper.model(name)
        jobs = attempts_needed(paper, model)
        assert int(cells[4]) == jobs, name
        node_hours = jobs * paper.resources_for("train").runtime / 60 * model.nodes
        assert abs(int(cells[5].lstrip("~").replace(",", "")) - node_hours) / node_hours < 0.01, name


def test_the_one_node_smokes_evals_run_where_lm_eval_and_vllm_are():
    """config/verl_smoke.yaml runs each rule in the paper tier's image: its evals in the eval image, which
    holds lm-eval and the vLLM of the train image's rollout (the train image has no lm-eval), so the smoke
    proves that vLLM loads each run's exported checkpoint; scripts/gpu_checks.sh fails it unless every
    lm-eval result scored."""
    from fp8rl.containers import run_prefix

    smoke = load_config(ROOT / "config" / "verl_smoke.yaml", checks=CONFIG_CHECKS)
    assert smoke.containers == load_config(PAPER).containers
    assert "apptainer exec --nv" in run_prefix(smoke, "eval") and "containers/eval.sif" in run_prefix(
        smoke, "eval"
    )
    assert run_prefix(smoke, "train") == ""  # the job script enters the train image itself

    def pins(image: str) -> dict[str, str]:
        lock = (ROOT / "containers" / image / "requirements.lock").read_text()
        return dict(re.findall(r"^([a-z0-9_.-]+)==([^\s\\]+)", lock, flags=re.M))

    train, evals = pins("train"), pins("eval")
    assert "lm-eval" not in train and "lm-eval" in evals
    assert evals["vllm"] == train["vllm"] == preflight.VLLM_PIN
    assert "lm_eval.json" in (ROOT / "scripts" / "gpu_checks.sh").read_text()


def test_a_job_has_the_cpus_verl_reserves_before_its_first_step():
    """verl's task runner and TransferQueue take 10 Ray CPUs, its worker pool 3 per GPU: the one-node smoke
    with 8 CPUs waited in TransferQueue's start until its limit (its rehearsal timed out), with 16 it
    reaches the GPU point; `fp8rl config validate` refuses fewer."""
    assert (
        ray_cpus_needed(load_config(PAPER).model("qwen2.5-32b"))
        == 34
        <= load_config(PAPER).resources_for("train").threads
    )
    smoke = ROOT / "config" / "verl_smoke.yaml"
    assert load_config(smoke, checks=CONFIG_CHECKS).resources_for("train").threads >= 13
    with pytest.raises(ConfigError, match=r"resources\.train\.threads: 8 CPUs per job, but verl reserves 13"):
        load_config(smoke, ["resources.train.threads=8"], checks=CONFIG_CHECKS)


def test_a_converted_tokenizer_config_names_its_class_as_transformers_4_does():
    """transformers 5 writes a tokenizer.json-backed tokenizer's class as `TokenizersBackend`, which 4.x
    does not have; the export's conversion (used without --tokenizer) names 4.x's class for it."""
    out = compat_tokenizer_config({"tokenizer_class": "TokenizersBackend", "extra_special_tokens": ["<a>"]})
    assert out["tokenizer_class"] == "PreTrainedTokenizerFast" and out["additional_special_tokens"] == ["<a>"]
    assert (
        compat_tokenizer_config({"tokenizer_class": "Qwen2Tokenizer"})["tokenizer_class"] == "Qwen2Tokenizer"
    )
