"""The mismatch calibration table: where each FP8 setting of a tier sits in the units real stacks report.

One row per setting (variant × granularity × format × condition, with the condition's noise scale or its
`fp8.target_kl`), from endpoints.csv's per-run mismatch columns (fp8rl.report.endpoints), averaged over
the setting's `ok` and `diverged` runs:

- trainer vs rollout (`mismatch_*`): per-token KL (k3), mean |Δlogp|, tmpe (mean exp|Δlogp|) and the
  signed mean Δlogp over the whole run, and the same at the runs' median step (`_median`: k3 and tmpe
  average exp(±Δlogp) per token, so a rare token with a large |Δlogp| can dominate a step's mean); the
  KL and |Δlogp| over the first and the last window, and their growth (last ÷ first);
- the FP8 trainer vs its BF16 shadow (`shadow_mismatch_*`): the same, where the run has a shadow pass;
- `kl_x_real_bf16`: the run-mean KL ÷ `REAL_BF16_KL`, the trainer-vs-rollout KL of a healthy BF16 RL
  stack (NeMo-RL's CI reference, 2e-3; public figures put BF16 at 1–2e-3 and end-to-end blockwise FP8 at
  0.7–1.6× that level; docs/mismatch.md lists the sources).
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.stats.intervals import finite_mean
from fp8rl.vocabulary import MISMATCH_ROLLOUT, MISMATCH_SHADOW, MISMATCH_UNITS, REAL_BF16_KL, VARIANT_SPECS

KEY_COLUMNS = ["variant", "granularity", "format", "condition", "noise", "target_kl"]
USED = ("ok", "diverged")


def _columns() -> list[str]:
    out = [*KEY_COLUMNS, "runs"]
    for prefix in (MISMATCH_ROLLOUT, MISMATCH_SHADOW):
        out += [f"{prefix}_{u}" for u in MISMATCH_UNITS]
        out += [f"{prefix}_{u}_median" for u in MISMATCH_UNITS]
        for u in ("kl_k3", "abs_dlogp"):
            out += [f"{prefix}_{u}_first", f"{prefix}_{u}_last", f"{prefix}_{u}_growth"]
    return [*out, "kl_x_real_bf16"]


COLUMNS = _columns()
NOTES = [
    "Per setting, means over its ok and diverged runs of each run's mismatch (endpoints.csv): `mismatch_*` "
    "the trainer vs the rollout engine, `shadow_mismatch_*` the FP8 trainer vs its BF16 shadow on the same "
    "tokens; units per token: `kl_k3` (KL, k3), `abs_dlogp` (mean |Δlogp|), `tmpe` (mean exp|Δlogp|), "
    "`dlogp` (signed mean Δlogp).",
    "`_first`/`_last`: over the first and the last window of the planned steps; `_growth` = last ÷ first; "
    "`_median`: the runs' median step (k3 and tmpe average heavy-tailed per-token terms, exp(±Δlogp): a "
    "single token with a large |Δlogp| can dominate a step's mean, and the median step is the typical one).",
    f"`kl_x_real_bf16`: the run-mean trainer-vs-rollout KL ÷ {REAL_BF16_KL:g}, a healthy real BF16 stack's "
    "(public figures: BF16 1–2e-3, end-to-end blockwise FP8 0.7–1.6× that; docs/mismatch.md).",
    "`noise`: the condition's noise scale, or (with `target_kl`) the mean of the scales the runs' searches found.",
]


def mismatch_table(endpoints: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """The table (module docstring) from endpoints.csv's frame, in first-seen setting order."""
    used = endpoints[endpoints["status"].isin(USED)].copy()
    used["format"] = [
        cfg.fp8_for(c or None).format if VARIANT_SPECS[v].fp8 else VARIANT_SPECS[v].precision
        for v, c in zip(used["variant"], used["condition"].fillna(""), strict=True)
    ]
    used["target_kl"] = used["target_kl"].astype(float)
    rows = []
    keys = ["variant", "granularity", "format", "condition", "target_kl"]
    for key, sub in used.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key, strict=True)) | {"noise": finite_mean(sub["noise"]), "runs": len(sub)}
        for prefix in (MISMATCH_ROLLOUT, MISMATCH_SHADOW):
            for u in MISMATCH_UNITS:
                row[f"{prefix}_{u}"] = finite_mean(sub[f"{prefix}_{u}"])
                row[f"{prefix}_{u}_median"] = finite_mean(sub[f"{prefix}_{u}_median"])
            for u in ("kl_k3", "abs_dlogp"):
                first, last = finite_mean(sub[f"{prefix}_{u}_first"]), finite_mean(sub[f"{prefix}_{u}_last"])
                row |= {f"{prefix}_{u}_first": first, f"{prefix}_{u}_last": last}
                row[f"{prefix}_{u}_growth"] = last / first if first > 0 else math.nan
        row["kl_x_real_bf16"] = row[f"{MISMATCH_ROLLOUT}_kl_k3"] / REAL_BF16_KL
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def mismatch_view(table: pd.DataFrame) -> pd.DataFrame:
    """The markdown view: the setting, then per pair KL, |Δlogp|, tmpe, signed Δlogp and KL growth."""
    from fp8rl.report.markdown import fmt

    view = table[["variant", "granularity", "format", "condition", "runs"]].copy()
    view["noise"] = table["noise"].map(lambda v: fmt(float(v)))
    view["target_kl"] = table["target_kl"].map(lambda v: "" if v != v else f"{v:.3g}")
    for prefix, label in ((MISMATCH_ROLLOUT, "rollout"), (MISMATCH_SHADOW, "shadow")):
        for u, name in (("kl_k3", "KL"), ("abs_dlogp", "|Δlogp|"), ("tmpe", "tmpe"), ("dlogp", "Δlogp")):
            view[f"{label} {name}"] = table[f"{prefix}_{u}"].map(lambda v: "" if v != v else f"{v:.3g}")
        for u, name in (("kl_k3", "KL"), ("tmpe", "tmpe")):
            view[f"{label} {name} (median step)"] = table[f"{prefix}_{u}_median"].map(
                lambda v: "" if v != v else f"{v:.3g}"
            )
        view[f"{label} KL growth"] = table[f"{prefix}_kl_k3_growth"].map(
            lambda v: "" if v != v else f"{v:.2f}×"
        )
    view["KL ÷ real bf16"] = table["kl_x_real_bf16"].map(lambda v: "" if v != v else f"{v:.3g}×")
    return view
