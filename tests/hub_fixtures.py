"""A local directory standing in for the Hugging Face hub (`$FP8RL_HUB_MIRROR`), as the tests use it:
fp8rl.adapters.rehearsal_stand_ins' stand-in hub with a one-line placeholder per eval set and a few
placeholder files per model (DAPO-Math-17k shaped exactly like the published parquet either way)."""

from __future__ import annotations

from pathlib import Path

from fp8rl.adapters.rehearsal_stand_ins import DAPO, INSTRUCTION, dapo_rows, stand_in_hub

__all__ = ["DAPO", "INSTRUCTION", "dapo_rows", "make_hub"]


def make_hub(root: Path, *, n_problems: int = 12, repeats: int = 3, models: tuple[str, ...] = ()) -> Path:
    """Write the stand-in hub under `root` and return it."""
    return stand_in_hub(
        root, n_problems=n_problems, repeats=repeats, models=models, eval_sets="placeholder",
        model_files="placeholder",
    )  # fmt: skip
