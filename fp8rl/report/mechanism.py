"""The mechanism study's table and figures, for a matrix with FP8 conditions (`matrix.conditions`).

`mechanism_table(comparison, endpoints, cfg)` has one row per (algo, model, condition, granularity, FP8
variant: plain fp8, the mismatch corrections, calibration; `fp8rl.vocabulary.VARIANT_SPECS`), read off
the comparison table (comparison.py; same seeds, same intervals):

- the condition's FP8 settings from `cfg.fp8_for(condition)`: `format` (the configured recipe format),
  `gemm_format` (what the granularity's GEMMs really use: rowwise, blockwise and mxfp8 are e4m3
  whatever `format` says, fp8rl.fp8.get_recipe), `noise_scale` (the dose s: every quantized operand is
  x + s·(Q(x) − x)) and `kv_cache`;
- `excess_clip` = phantom/low_neg − phantom/missed_neg per step (A<0 shadow tokens clipped under the
  FP8 ratio but not under BF16, minus the converse), with `phantom_low_neg` and `phantom_missed_neg`;
- `clip_low_neg` of the variant and of bf16 (`bf16_clip_low_neg`), and `clip_low_neg delta` vs bf16;
- `mismatch_kl_k3` (trainer vs rollout log-probs);
- `excess_clip p`: two-sided one-sample t-test of the seeds' excess (their means over steps) against 0;
  `excess_clip p_holm`: that p adjusted with Holm over `HOLM_FAMILY`, the granularities of one (algo,
  model, condition, variant): a condition is one dose (and format and KV cache), so a verdict over the
  granularities at a dose is a family of tests;
- `calib_low`, `calib_high`: mean over steps and seeds of the calibrated bounds (fp8_calib only);
  `calib_floor_binds`: the share of the calibrated updates whose lower bound `calib.low_range`'s floor
  held up (the calibration did not complete there; `excess_clip` is what remained);
- `seeds` (runs that logged the paired metrics) and `ok/div/fail/miss`.
Each estimate has `ci_low`/`ci_high`: the t-interval over the seeds' means over steps (endpoints.csv's
per-run values; the seed is the unit), cut to the metric's range (stats.value_range).

`mechanism_plots` draws `excess_clip` and `mismatch_kl_k3` against the dose: one panel per variant
(columns) and per (algo/model, format, KV cache) setting (rows), one line per granularity, error bars
the 95 % intervals.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fp8rl.config import ExperimentConfig  # noqa: E402
from fp8rl.fp8.recipe import get_recipe  # noqa: E402
from fp8rl.report.comparison import USED_STATUSES  # noqa: E402
from fp8rl.report.figures import MECHANISM  # noqa: E402
from fp8rl.report.markdown import ci_cell, fmt  # noqa: E402
from fp8rl.report.methods import RANGE_METHOD, SEED_MEAN_METHOD, value_range  # noqa: E402
from fp8rl.report.plot_base import save_figure  # noqa: E402
from fp8rl.stats.intervals import one_sample_p, t_interval  # noqa: E402
from fp8rl.stats.multiplicity import holm  # noqa: E402
from fp8rl.vocabulary import CALIB_FLOOR_BINDS, CALIB_HIGH, CALIB_LOW, REFERENCE_VARIANT, VARIANT_SPECS  # noqa: E402

# Every FP8 variant the matrix runs has a row and a column of the figures, in the vocabulary's order.
FP8_VARIANTS = tuple(v for v, spec in VARIANT_SPECS.items() if spec.fp8)
SETTINGS = ["format", "gemm_format", "noise_scale", "kv_cache"]
# the family over which `excess_clip p_holm` adjusts: every granularity of one condition (a dose) and variant
HOLM_FAMILY = ["algo", "model", "condition", "variant"]
CALIB = (("calib_low", CALIB_LOW), ("calib_high", CALIB_HIGH), ("calib_floor_binds", CALIB_FLOOR_BINDS))
# each figure of `figures.MECHANISM`: the table column it draws and its y label
PLOT_COLUMNS = {
    "mechanism_excess_clip": ("excess_clip", "excess clipping"),
    "mechanism_mismatch_kl": ("mismatch_kl_k3", "mismatch KL k3"),
}
SUBTITLES = {
    "excess_clip": "phantom/low_neg − phantom/missed_neg",
    "mismatch_kl_k3": "trainer vs rollout log-probs",
}
MECHANISM_NOTES = [
    "One row per FP8 condition × granularity × variant; bf16 (condition `none`) is the reference.",
    "`noise_scale` s is the dose: every quantized operand (GEMM operands, optimizer moments, rollout "
    "weights, activations, KV cache) is x + s·(Q(x) − x); s = 1 is plain FP8.",
    "`format` is the condition's recipe format; `gemm_format` what the granularity's GEMMs use "
    "(rowwise, blockwise and mxfp8 are e4m3 throughout).",
    "`excess_clip` = phantom/low_neg − phantom/missed_neg: of the negative-advantage shadow tokens, those "
    "clipped (zero gradient) under the FP8 ratio but not under the BF16 ratio of the same tokens, minus "
    "the converse. > 0: FP8 zeroes more gradients than BF16 would.",
    "`clip_low_neg` vs `bf16_clip_low_neg`: the fraction of A<0 tokens below the lower bound in the run "
    "itself and in the bf16 runs; Δ is their difference.",
    "`excess p (Holm)`: two-sided one-sample t-test of the seeds' excess against 0, adjusted with Holm over "
    "the granularities of one condition (one dose, format and KV cache) and variant: the family a verdict "
    "over the granularities at a dose draws on (the CSV also has the unadjusted `excess_clip p`).",
    "`calib_low`/`calib_high`: the calibrated bounds (fp8_calib), mean over steps and seeds; "
    "`calib_floor_binds`: the share of calibrated updates whose lower bound the low_range floor held up.",
    SEED_MEAN_METHOD + ".",
    RANGE_METHOD + ".",
    "n = 1 seed gives no interval: its bounds are left blank.",
]


def gemm_format(granularity: str, fmt_name: str) -> str:
    """The FP8 format the recipe's GEMMs use: `hybrid` (e4m3 forward, e5m2 gradients) or one format."""
    recipe = get_recipe(granularity, fmt_name)
    fwd, grad = recipe.output.a.fmt, recipe.grad_input.a.fmt
    return fwd if fwd == grad else ("hybrid" if (fwd, grad) == ("e4m3", "e5m2") else f"{fwd}/{grad}")


def mechanism_table(comparison: pd.DataFrame, endpoints: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """The mechanism table as numbers (module docstring), from the comparison and, for the calibrated
    bounds and the excess's test, the per-run values of endpoints.csv's frame; empty without conditions."""
    if comparison.empty or "condition" not in comparison:
        return pd.DataFrame()
    used = endpoints[endpoints["status"].isin(USED_STATUSES)]
    rows = []
    for _, r in comparison[comparison["variant"].isin(FP8_VARIANTS)].iterrows():
        fp8 = cfg.fp8_for(r["condition"])
        ref = comparison[
            (comparison["algo"] == r["algo"])
            & (comparison["model"] == r["model"])
            & (comparison["granularity"] == r["granularity"])
            & (comparison["condition"] == r["condition"])
            & (comparison["variant"] == REFERENCE_VARIANT)
        ]
        row = {
            "algo": r["algo"],
            "model": r["model"],
            "condition": r["condition"],
            "format": fp8.format,
            "gemm_format": gemm_format(r["granularity"], fp8.format),
            "noise_scale": fp8.noise_scale,
            "kv_cache": fp8.kv_cache,
            "granularity": r["granularity"],
            "variant": r["variant"],
            "seeds": int(r["excess_clip n"]),
            "ok/div/fail/miss": f"{r['ok']}/{r['diverged']}/{r['failed']}/{r['missing']}",
        }
        for col in ("excess_clip", "phantom_low_neg", "phantom_missed_neg", "clip_low_neg", "mismatch_kl_k3"):
            row |= {col: r[col], f"{col} ci_low": r[f"{col} ci_low"], f"{col} ci_high": r[f"{col} ci_high"]}
        b = ref.iloc[0] if not ref.empty else None
        for suffix in ("", " ci_low", " ci_high"):
            row[f"bf16_clip_low_neg{suffix}"] = b[f"clip_low_neg{suffix}"] if b is not None else math.nan
        for suffix in ("delta", "delta_ci_low", "delta_ci_high"):
            row[f"clip_low_neg {suffix}"] = r[f"clip_low_neg {suffix}"]
        runs = used[
            (used["algo"] == r["algo"])
            & (used["model"] == r["model"])
            & (used["variant"] == r["variant"])
            & (used["granularity"] == r["granularity"])
            & (used["condition"] == r["condition"])
        ]
        for col, metric in CALIB:
            ci = t_interval(runs[col], bounds=value_range(metric))
            row |= {col: ci.estimate, f"{col} ci_low": ci.low, f"{col} ci_high": ci.high}
        row["excess_clip p"] = one_sample_p(runs["excess_clip"])
        rows.append(row)
    table = pd.DataFrame(rows)
    if not table.empty:
        table["excess_clip p_holm"] = table.groupby(HOLM_FAMILY, sort=False)["excess_clip p"].transform(
            lambda p: holm(p.tolist())
        )
    return table


def mechanism_view(table: pd.DataFrame) -> pd.DataFrame:
    """The mechanism table with formatted cells (estimate [95% interval])."""
    rows = []
    for _, r in table.iterrows():
        row = {c: r[c] for c in ("algo", "model", "condition", "format", "gemm_format")}
        row |= {"noise_scale": fmt(float(r["noise_scale"]), 2), "kv_cache": "on" if r["kv_cache"] else "off"}
        row |= {c: r[c] for c in ("granularity", "variant", "seeds", "ok/div/fail/miss")}
        row["excess_clip"] = ci_cell(r, "excess_clip", signed=True)
        row["excess p (Holm)"] = fmt(r.get("excess_clip p_holm", math.nan))
        row["phantom_low_neg"] = fmt(r["phantom_low_neg"], 4)
        row["phantom_missed_neg"] = fmt(r["phantom_missed_neg"], 4)
        row["clip_low_neg"] = ci_cell(r, "clip_low_neg")
        row["bf16_clip_low_neg"] = ci_cell(r, "bf16_clip_low_neg")
        row["Δ clip_low_neg"] = ci_cell(r, "clip_low_neg", delta=True)
        row["mismatch_kl_k3"] = ci_cell(r, "mismatch_kl_k3")
        row["calib_low"] = ci_cell(r, "calib_low")
        row["calib_high"] = ci_cell(r, "calib_high")
        row["calib_floor_binds"] = ci_cell(r, "calib_floor_binds")
        rows.append(row)
    return pd.DataFrame(rows)


def _settings(table: pd.DataFrame) -> list[tuple]:
    """The plot rows: (algo, model, format, kv_cache) in table order."""
    return list(
        dict.fromkeys(zip(table["algo"], table["model"], table["format"], table["kv_cache"], strict=True))
    )


def dose_figure(table: pd.DataFrame, column: str, ylabel: str) -> plt.Figure:
    """`column` (with its 95% interval) against the noise dose; see the module docstring."""
    settings = _settings(table) or [("", "", "", True)]
    present = set(table["variant"]) if not table.empty else set()
    variants = [v for v in FP8_VARIANTS if v in present] or ["fp8", "fp8_calib"]
    fig, axes = plt.subplots(
        len(settings), len(variants), figsize=(5.0 * len(variants), 3.4 * len(settings)),
        squeeze=False, layout="constrained", sharey="row",
    )  # fmt: skip
    doses = sorted(set(table["noise_scale"])) if not table.empty else [1.0]
    grans = list(dict.fromkeys(table["granularity"])) if not table.empty else []
    for i, (algo, model, fmt_name, kv) in enumerate(settings):
        for j, variant in enumerate(variants):
            ax = axes[i, j]
            sub = table[
                (table["algo"] == algo)
                & (table["model"] == model)
                & (table["format"] == fmt_name)
                & (table["kv_cache"] == kv)
                & (table["variant"] == variant)
            ]
            for k, gran in enumerate(grans):
                g = sub[sub["granularity"] == gran].sort_values("noise_scale")
                g = g[np.isfinite(g[column].to_numpy(dtype=float))]
                if g.empty:
                    continue
                x = g["noise_scale"].to_numpy(dtype=float) * (1 + 0.03 * (k - (len(grans) - 1) / 2))
                y = g[column].to_numpy(dtype=float)
                lo = np.nan_to_num(y - g[f"{column} ci_low"].to_numpy(dtype=float), nan=0.0)
                hi = np.nan_to_num(g[f"{column} ci_high"].to_numpy(dtype=float) - y, nan=0.0)
                ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=gran)
            if column == "excess_clip":
                ax.axhline(0.0, color="grey", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_xticks(doses, [fmt(float(d), 2) for d in doses])
            ax.set_xlim(min(doses) / 1.25, max(doses) * 1.25)  # a single-dose series stays off the edge
            ax.minorticks_off()
            ax.set_xlabel("noise dose s (x + s·(Q(x) − x))")
            ax.set_ylabel(ylabel if j == 0 else "")
            ax.set_title(
                f"{algo}/{model} {variant}: format {fmt_name}, KV cache {'on' if kv else 'off'}", fontsize=9
            )
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, title="granularity", title_fontsize=7)
            elif not ax.has_data():
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    what = SUBTITLES.get(column, column)
    fig.suptitle(f"{ylabel} ({what}) vs noise dose; bars: 95% t-intervals over seeds", fontsize=10)
    return fig


def mechanism_plots(table: pd.DataFrame, out_dir: Path) -> dict[str, list[Path]]:
    """Draw and save the mechanism figures (PNG and SVG); returns name → [png, svg]."""
    return {name: save_figure(dose_figure(table, *PLOT_COLUMNS[name]), out_dir, name) for name in MECHANISM}
