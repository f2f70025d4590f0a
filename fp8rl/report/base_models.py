"""The tier's base models as a table (where every RL run started from), and the numerics its runs ran in.

One row per scratch base model (`{tier}/base/{model}/sft.json`, or `.../seed{seed}/sft.json` with
`sft.per_seed`): its SFT steps, final loss and greedy / sampled accuracy on the task's test split, and
the seed it was trained with. A tier whose base was trained per seed shows here how far the bases
differ, which the intervals over seeds then include; a shared base shows whether it reached a plateau.
Pretrained bases (`base.json`) get a row with their source and no SFT figures.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.io import loads_json

COLUMNS = [
    "model",
    "seed",
    "sft_seed",
    "steps",
    "loss/final",
    "acc/test_greedy",
    "acc/test_sampled",
    "n_test",
    "stop_met",
]
NOTES = [
    "one row per base model the tier's runs start from; seed: the RL seed it belongs to (sft.per_seed), "
    "blank for a base shared by every seed",
    "loss/final: mean SFT loss over the last 10 % of steps; acc/*: exact match on the task's test split, "
    "greedy and sampled at the tier's temperature",
    "stop_met: with sft.stop_at_accuracy, whether a check met it (False: the SFT ran to its step cap and the "
    "base was kept by sft.on_unmet_stop: keep); blank without the rule or for a base from before it was "
    "recorded (steps equal to the cap then mean it was not met)",
]


def base_model_table(tier_root: str | Path, problems: list[str] | None = None) -> pd.DataFrame:
    """The rows described in the module docstring, sorted by model and seed. An `sft.json` that is not a
    readable JSON object (a directory, damaged bytes) is left out and named in `problems`."""
    rows = []
    for path in sorted(Path(tier_root, "base").glob("**/sft.json")):
        try:
            info = loads_json(path.read_bytes())
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            why = (
                "a directory"
                if path.is_dir()
                else f"unreadable ({exc.strerror if isinstance(exc, OSError) else exc})"
            )
            if problems is not None:
                problems.append(f"{path}: {why}; base model left out of the base models table")
            continue
        rows.append({key: info.get(key) for key in COLUMNS})
    table = pd.DataFrame(rows, columns=COLUMNS)
    if table.empty:
        return table
    table["seed"] = table["seed"].astype("Int64")
    return table.sort_values(["model", "seed"], na_position="first").reset_index(drop=True)


def numerics_line(numerics: dict[str, list[str]]) -> str:
    """`runs_numerics`' record in words, as the report page's header and SUMMARY.md give it."""
    return "; ".join(f"{key}: {', '.join(vals) or 'none'}" for key, vals in numerics.items())


def runs_numerics(runs_dir: str | Path) -> dict[str, list[str]]:
    """The numerics modes, CPU models, MKL branches (`MKL_CBWR`, "auto" where unset: the CPU's own
    path) and GEMM kernels (the pinned OpenBLAS core, or "MKL") the tier's runs recorded (`summary.json`
    provenance, written by fp8rl.numerics): {"modes": [...], "cpus": [...], "mkl": [...], "gemms": [...]},
    each sorted and without repeats. Runs from before the numerics record count as mode "unrecorded" and
    add no branch."""
    modes, cpus, mkl, gemms = set(), set(), set(), set()
    for path in Path(runs_dir).glob("**/summary.json"):
        try:
            numerics = loads_json(path.read_bytes()).get("provenance", {}).get("numerics")
        except (OSError, ValueError, AttributeError):
            continue  # the report lists unreadable summaries under data problems
        modes.add((numerics or {}).get("mode", "unrecorded"))
        if numerics and numerics.get("cpu", {}).get("model"):
            cpus.add(numerics["cpu"]["model"])
        if numerics and "env" in numerics:
            mkl.add(numerics["env"].get("MKL_CBWR") or "auto")
            gemms.add(f"OpenBLAS {numerics['pinned_blas']['core']}" if "pinned_blas" in numerics else "MKL")
    return {"modes": sorted(modes), "cpus": sorted(cpus), "mkl": sorted(mkl), "gemms": sorted(gemms)}
