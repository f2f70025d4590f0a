"""The cluster path: run the paper matrix through verl (Ray, Megatron/Transformer Engine, vLLM).

- `verl_overrides`: one matrix cell of the typed config -> verl's Hydra overrides (`ppo_megatron_trainer`).
- `verl_support`: what the verl backend can run of a config, refused by key before any job starts.
- `verl_fp8`: a run's Megatron / Transformer Engine FP8 recipe (`MEGATRON_RECIPES`).
- `verl_model`: a model's size and its parallel layout on the GPUs; `AdapterError`, the backend's refusal.
- `verl_sizing`: how long, how big and how often: the training jobs sized from the model and the schedule.
- `verl_policy`: what every fp8rl policy loss in verl shares (`verl_policy_loss`: verl's signature, checked
  inputs, `fp8rl.rl.policy_loss` under a loss's bounds and weights, DP-safe metrics).
- `verl_loss`: the `fp8rl_clip` and `calibrated_clip` policy losses, registered in verl's loss registry
  on import (every Ray worker imports it through `VERL_USE_EXTERNAL_MODULES`), built on `fp8rl.rl`.
- `verl_icepop`, `verl_qurl`: the `fp8rl_icepop_adaptive` and `fp8rl_qurl` policy losses (adaptive IcePop
  and QuRL's adaptive clip range on verl's untruncated ratios), registered when `verl_loss` is imported.
- `verl_metrics`: verl's file-logger JSONL -> `metrics.jsonl` with the names of docs/architecture.md#metrics.
- `verl_data`: the task's JSONL splits -> the parquet files verl's RL dataset reads.
- `verl_launch`: the Slurm job script that starts Ray across the allocation and runs verl.
- `verl_run`: one verl run's directory: its inputs and job script before, summary and throughput after.

Nothing here imports verl, Ray or torch at module level except the losses (`verl_loss` and the modules it
imports), which only the workers load.
"""
