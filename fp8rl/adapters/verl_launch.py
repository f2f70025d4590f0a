"""The job script of one verl run: Ray across the Slurm allocation, verl's trainer, the HF checkpoint.

Run inside a Slurm job of `nodes` x `gpus_per_node` (the Slurm executor's `nodes` / `gpu` resources),
the script does what verl documents for multi-node training on Slurm: `ray start --head` on the first node
of `$SLURM_JOB_NODELIST`, `ray start --address` on the others (each through `srun --overlap` on that
node), waits until every GPU has joined, then runs `python -m verl.trainer.main_ppo` on the head with
`RAY_ADDRESS` set. Outside Slurm, or on one node, verl starts its own local Ray. With an image, each of
those processes runs under the given `apptainer exec` prefix (fp8rl.containers.apptainer_exec: the hub
cache bound, read offline). Before anything starts, the preflight (fp8rl.adapters.preflight) checks the
node and the image against the run's overrides and stops the job with a message when a known pitfall
would waste it. verl is told when the Slurm job ends (`MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`,
from `$SLURM_JOB_END_TIME`, `squeue`, or the start plus the rule's runtime), which only verl's legacy
trainer reads; the v1 trainer verl 0.9.1 runs saves on `trainer.save_freq`, which
fp8rl.adapters.verl_sizing derives so that a job killed at its time limit keeps the most steps. Finally, whatever verl's exit code (which the script then
exits with), the last save's Hugging Face model is exported to `{out}/checkpoint`
(fp8rl.adapters.verl_checkpoint, following verl's own `ckpt_contents.json`, with the base model's
tokenizer when `tokenizer` names its directory): a run verl stopped early on a divergence keeps its last
checkpoint for the evaluators. Once the run has all its steps the resumable
checkpoints, tens to hundreds of GB each, are removed.

verl's checkpoint manager keeps `trainer.max_actor_ckpt_to_keep` saves, but only among those its own
job wrote: a resumed job starts with an empty list, so each job of a run's chain would leave its last
saves behind. fp8rl.adapters.verl_retention makes the manager count the earlier jobs' saves, and the
script keeps the saves itself too (`prune_saves`): before verl starts (a job Slurm killed at its limit
never reached its end, and may have left a save half written) and after the export, only the one
`latest_checkpointed_iteration.txt` names and the one before it remain.

Each start of the script is one attempt with its own metrics log, `{out}/verl_logs/attempt-NNN.jsonl`:
verl's file logger truncates the file it is given, and a resubmitted job resumes from the last
checkpoint (`trainer.resume_mode: auto`), so earlier attempts' steps survive only in their own logs
(merged on import, fp8rl.adapters.verl_metrics.import_logs).
"""

from __future__ import annotations

import shlex

from fp8rl import numerics
from fp8rl.adapters.verl_overrides import RAY_ENV_VARS

RAY_PORT = 6379
RAY_JOIN_TIMEOUT_S = 600
LOG_DIR = "verl_logs"  # one file-logger log per attempt, attempt-001.jsonl, attempt-002.jsonl, ...
LOG_GLOB = "attempt-*.jsonl"
DIVERGENCE_FILE = "verl_divergence.json"  # written by fp8rl's loss when it stops verl (verl_loss)
OVERRIDES_FILE = "verl_overrides.json"  # written by fp8rl.adapters.verl_run, read by the preflight
# verl's legacy trainer checkpoints when this epoch time is closer than a step + a margin (verl_sizing)
DEADLINE_ENV = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"


def slurm_resources(nodes: int, gpus_per_node: int) -> dict[str, int | str]:
    """Snakemake resources of one verl training job for the Slurm executor: whole nodes, with the GPUs
    as a per-node `gres` (the executor's `gpu` resource is a job total, `--gpus`), one task per node."""
    return {"nodes": nodes, "gres": f"gpu:{gpus_per_node}", "tasks_per_node": 1}


def unpin_numerics() -> str:
    """Shell lines that take the CPU numerics pin (fp8rl.numerics) out of the job's environment: `import
    fp8rl` in the process that starts the script (`fp8rl verl train`) set it, and every process of the
    job (preflight, Ray, verl's workers, the export; srun and apptainer pass the environment on) would
    inherit its CPU kernel caps. `FP8RL_NUMERICS=fast` keeps the job's own `import fp8rl` from setting it
    again; a variable the user set to another value is kept."""
    pins = {**numerics.PINNED_ENV, **numerics.REPRODUCIBLE_RUNTIME_ENV}
    q = shlex.quote
    lines = [f'[ "${{{k}-}}" != {q(v)} ] || unset {k}' for k, v in pins.items()]
    return "\n".join([f"export {numerics.ENV_MODE}=fast", *lines]) + "\n"


def render_script(
    *,
    run_id: str,
    overrides: list[str],
    out: str,
    nodes: int,
    gpus_per_node: int,
    prefix: str = "",
    env: dict[str, str] | None = None,
    python: str = "python3",
    config_name: str = "ppo_megatron_trainer",
    runtime_min: int = 720,
    steps: int | None = None,
    tokenizer: str | None = None,
) -> str:
    """The bash script that trains one run through verl (see the module docstring); `prefix` runs a
    command in the image (empty: on the host), `env` is exported first (e.g. HF_HOME, offline flags)."""
    q = shlex.quote
    # Hydra reads a bare epoch time as an int, which ray.init refuses in runtime_env: quoted, a string
    trainer = " \\\n    ".join(
        [f"{prefix}{python} -m verl.trainer.main_ppo --config-name {config_name}"]
        + [q(o) for o in overrides]
        + [
            f"\"{RAY_ENV_VARS}.VERL_FILE_LOGGER_PATH='$VERL_FILE_LOGGER_PATH'\"",
            f"\"{RAY_ENV_VARS}.{DEADLINE_ENV}='$DEADLINE'\"",
        ]
    )
    ckpt = f"{out}/verl_checkpoints"
    # once the run has all its steps only the exported checkpoint is kept (storage: verl_sizing)
    cleanup = (
        f'if [ "$VERL_RC" -eq 0 ] && [ "$STEP" -ge {steps} ]; then rm -rf {q(ckpt)}/global_step_*; fi'
        if steps
        else ""
    )
    exports = "".join(f"export {k}={q(v)}\n" for k, v in (env or {}).items())
    logs = f"{out}/{LOG_DIR}"
    tokenizer_arg = f" \\\n        --tokenizer {q(tokenizer)}" if tokenizer else ""
    return f"""#!/usr/bin/env bash
# fp8rl: verl training of {run_id} (written by `fp8rl verl train`; DO NOT EDIT, it is rewritten each run).
set -euo pipefail
export VERL_USE_EXTERNAL_MODULES=fp8rl.adapters.verl_loss
export FP8RL_VERL_LOSS={q(out + "/verl_loss.json")}
export HYDRA_FULL_ERROR=1
# the CPU numerics pin is for the reference trainer's CPU runs, not a GPU job's processes
{unpin_numerics()}{exports}mkdir -p {q(logs)}
ATTEMPT=$(( $(find {q(logs)} -maxdepth 1 -name {q(LOG_GLOB)} | wc -l) + 1 ))
export VERL_FILE_LOGGER_PATH={q(logs)}/attempt-$(printf %03d "$ATTEMPT").jsonl
GPUS_PER_NODE={gpus_per_node}
WANT_NODES={nodes}

# keep the save verl resumes from and the one before it; earlier jobs' saves and a newer, unfinished one go
prune_saves() {{
    [ -f {q(ckpt)}/latest_checkpointed_iteration.txt ] || return 0
    local latest prev d
    latest=$(cat {q(ckpt)}/latest_checkpointed_iteration.txt)
    prev=$(find {q(ckpt)} -maxdepth 1 -name 'global_step_*' -printf '%f\n' | sed 's/^global_step_//' \
        | sort -n | awk -v s="$latest" '$1 < s' | tail -n 1)
    for d in {q(ckpt)}/global_step_*; do
        [ -e "$d" ] || continue
        case "${{d##*/global_step_}}" in "$latest"|"$prev") ;; *) rm -rf "$d" ;; esac
    done
}}
prune_saves

# the job's end (epoch seconds; verl's legacy trainer saves before it): Slurm's, else start + runtime
DEADLINE="${{SLURM_JOB_END_TIME:-}}"
if [ -z "$DEADLINE" ] && [ -n "${{SLURM_JOB_ID:-}}" ] && command -v squeue >/dev/null; then
    END=$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null || true)
    case "$END" in ""|N/A|Unknown) ;; *) DEADLINE=$(date -d "$END" +%s 2>/dev/null || true) ;; esac
fi
DEADLINE="${{DEADLINE:-$(( $(date +%s) + {runtime_min * 60} ))}}"
export {DEADLINE_ENV}="$DEADLINE"

# Transformer Engine's blockwise FP8 recipe reads this when it is imported: fp32 scales on Hopper,
# power-of-two scales (MXFP8) on Blackwell. Exported before Ray starts, so every worker inherits it.
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || true)
case "$CAP" in
    9.*) export NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 ;;
    1[0-9].*) export NVTE_FP8_BLOCK_SCALING_FP32_SCALES=0 ;;
esac

# the pitfalls that would waste the allocation (CUDA, TE's FP8 recipe settings, FP8 exclusions, vLLM)
{prefix}{python} -m fp8rl.adapters.preflight job {q(out + "/" + OVERRIDES_FILE)}

if [ -n "${{SLURM_JOB_NODELIST:-}}" ] && [ "$WANT_NODES" -gt 1 ]; then
    mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    if [ "${{#NODES[@]}}" -lt "$WANT_NODES" ]; then
        echo "error: the Slurm job has ${{#NODES[@]}} node(s), this run needs $WANT_NODES" >&2
        exit 2
    fi
    HEAD="${{NODES[0]}}"
    HEAD_IP=$(srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" hostname --ip-address | awk '{{print $1}}')
    export RAY_ADDRESS="$HEAD_IP:{RAY_PORT}"
    srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" {prefix}ray start --head --node-ip-address="$HEAD_IP" \\
        --port={RAY_PORT} --num-gpus="$GPUS_PER_NODE" --block &
    sleep 10
    for node in "${{NODES[@]:1:$((WANT_NODES - 1))}}"; do
        srun --overlap --nodes=1 --ntasks=1 -w "$node" {prefix}ray start --address="$RAY_ADDRESS" \\
            --num-gpus="$GPUS_PER_NODE" --block &
    done
    trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
    want=$((WANT_NODES * GPUS_PER_NODE))
    for _ in $(seq 1 {RAY_JOIN_TIMEOUT_S // 5}); do
        have=$({prefix}python3 -c "import ray; ray.init(address='auto'); print(int(ray.cluster_resources().get('GPU', 0)))" 2>/dev/null || echo 0)
        [ "$have" -ge "$want" ] && break
        sleep 5
    done
    [ "$have" -ge "$want" ] || {{ echo "error: only $have of $want GPUs joined the Ray cluster" >&2; exit 1; }}
fi

# verl's exit code is the job's, once the last save is exported: a run verl stopped early (a divergence
# fp8rl's loss recorded, a crash) keeps its last checkpoint for the evaluators
set +e
{trainer}
VERL_RC=$?
set -e

if [ -f {q(ckpt)}/latest_checkpointed_iteration.txt ]; then
    STEP=$(cat {q(ckpt)}/latest_checkpointed_iteration.txt)
    {prefix}{python} -m fp8rl.adapters.verl_checkpoint export {q(ckpt)}/global_step_"$STEP"/actor \\
        {q(out + "/checkpoint")}{tokenizer_arg}
    prune_saves
    {cleanup}
fi
exit "$VERL_RC"
"""
