"""The stability report of a tier whose FP8 conditions are a noise axis: a noise-dose sweep
(`fp8.noise_scale`, the stress tier) or a mismatch sweep (`fp8.target_kl`, the longform tier's failure
search); fp8rl.report.paths `noise_axis` says which. Below, "dose" is the axis's value: the noise scale,
or the target per-token KL (bf16 runs: dose 1 on a dose axis; on a KL axis 0, and bf16 is then the
reference of plain fp8 at every KL, since nothing of it depends on the FP8 setting).

One row per run that trained (`run_stability`), its values taken from the per-run endpoints
(endpoints.csv, fp8rl.report.endpoints; `PER_RUN`):
- `diverged`: the run's status is `diverged`; `div_step` and `div_kind` its first detection (summary.json's
  `divergence`, fp8rl.rl.stability); `last_step`: the last step its summary.json records;
- `final_acc`: mean `acc/mean` over the last `ACC_WINDOW` steps; `best_acc`: the best `ACC_WINDOW`-step
  moving mean of `acc/mean`;
- `peak_rel_entropy`: the highest entropy after the first `baseline_steps` steps / their median (the
  detectors' baseline; the baseline steps are left out of the peak, so a run whose entropy only falls
  reads below 1: endpoints.csv's `peak_entropy_rel`); `gibberish`: mean `gibberish/rate` over the run.

Per (algo, model, variant, granularity, dose) group (`stability_table`): runs diverged / total with an
exact Clopper-Pearson 95 % interval of the fraction, and Fisher's exact test against the variant's
reference at the same dose (`REFERENCE`: fp8 against bf16, a fixed FP8 variant against plain fp8;
fp8rl.stats.exact); time to divergence as the Kaplan-Meier median (runs that did not diverge are
censored at their last step; blank while fewer than half the runs have diverged) and the range of the
divergence steps; final and best accuracy, peak relative entropy and gibberish as seed means with 95 %
t-intervals (fp8rl.stats.intervals), those of proportions cut to [0, 1].

`breaking_dose_table`: per FP8 variant with more than one dose, the ED50, the dose at which half the runs
diverge, from a logistic fit of divergence on log2(dose) over all its runs, with a profile-likelihood
95 % interval; `fit` says where the data separate (no run diverged below a dose, all above it), which
makes the slope unbounded and the interval one-sided or bounded by the doses run
(binomial.dose_response).

Figures: `survival` (Kaplan-Meier curves, fraction of runs not yet diverged vs step, per group),
`stability_curves` (entropy, reward and `clip/low_neg` vs step, seed mean with a band over the middle half of the seeds; top row
every variant at dose 1, bottom row the dose sweep), `breaking_dose` (diverged fraction vs dose with
its exact intervals, the ED50 interval at one half).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fp8rl.config import ExperimentConfig, RunSpec, resolve_run
from fp8rl.report.endpoints import ACC_WINDOW
from fp8rl.report.methods import BINOMIAL_METHOD, CI_METHOD, FISHER_METHOD, RANGE_METHOD, value_range
from fp8rl.stats.dose_response import ED50_METHOD, dose_response
from fp8rl.stats.exact import clopper_pearson, fisher_p
from fp8rl.stats.intervals import t_interval
from fp8rl.vocabulary import ACC_MEAN, CLIP_LOW_NEG, GIBBERISH_RATE, REFERENCE_VARIANT, REWARD_MEAN

GROUP = ["algo", "model", "variant", "granularity", "noise"]
CURVES = (("entropy", "entropy"), (REWARD_MEAN, "reward"), (CLIP_LOW_NEG, CLIP_LOW_NEG))
# per-run columns with a t-interval over seeds, and the metric whose range (stats.value_range) they share
SEED_COLUMNS = {
    "final_acc": ACC_MEAN,
    "best_acc": ACC_MEAN,
    "peak_rel_entropy": "entropy",
    "gibberish": GIBBERISH_RATE,
}
# the variant each variant's divergence count is tested against at the same dose (others: plain fp8)
REFERENCE = {REFERENCE_VARIANT: None, "fp8": REFERENCE_VARIANT}
# run_stability's columns taken from endpoints.csv (fp8rl.report.endpoints): column -> endpoints column
PER_RUN = {
    "div_step": "div_step", "div_kind": "div_kind", "last_step": "last_step", "final_acc": "final_acc",
    "best_acc": "best_acc", "peak_rel_entropy": "peak_entropy_rel", "gibberish": "gibberish_rate",
}  # fmt: skip
STABILITY_NOTES = [
    f"`diverged/total`: runs whose status is diverged, `= fraction [low, high]`: {BINOMIAL_METHOD}.",
    f"`vs`, `p`: {FISHER_METHOD}, against `vs` at the same dose (fp8 against bf16, fixed FP8 variants "
    "against fp8).",
    "`median_div_step`: Kaplan-Meier median step of the first divergence (runs that did not diverge are "
    "censored at their last step); blank while fewer than half the runs diverged. `div_steps`: the range.",
    f"`final_acc`: mean acc/mean over the last {ACC_WINDOW} steps; `best_acc`: best {ACC_WINDOW}-step moving "
    f"mean; seed means with the {CI_METHOD} (blank with one seed).",
    RANGE_METHOD + ".",
    "`peak_rel_entropy`: max entropy after the first baseline steps / their median; `gibberish`: mean "
    "gibberish/rate over the run.",
    "`kinds`: how the runs first diverged (fp8rl.rl.stability kinds), with counts.",
]
KL_AXIS_NOTE = (
    "The axis is the target KL (`fp8.target_kl`: the per-token KL between trainer and rollout that each "
    "run's noise scale was searched for at its base): `doses` and the ED50 are target KLs, bf16 runs sit "
    "at 0 and are the reference of plain fp8 at every KL."
)
BREAKING_NOTES = [
    f"`ED50 [95% CI]`: {ED50_METHOD}.",
    "An estimate without a value: the data separate and no point estimate exists; `inf` or a 0 bound: the "
    "interval is open on that side. `fit` says which case the variant is in.",
    "Overlapping ED50 intervals do not show that two variants break at the same dose; at 3 runs per dose "
    "they cannot tell apart much at all (see `p` in the stability table).",
]


def _axis_value(cfg: ExperimentConfig, run_id: str, axis: str) -> float:
    """A run's place on the noise axis: its condition's `fp8.noise_scale` (1 for bf16 runs: nothing is
    quantized), not the scale a `target_kl` search found; or its `fp8.target_kl` (0 for bf16 runs)."""
    run = resolve_run(cfg, RunSpec.parse(run_id))
    if axis == "noise_scale":
        return run.noise_scale
    return float(run.fp8.target_kl) if run.variant.fp8 else 0.0


def run_stability(endpoints: pd.DataFrame, cfg: ExperimentConfig, axis: str = "noise_scale") -> pd.DataFrame:
    """One row per run that trained (status ok or diverged), from endpoints.csv's frame (module
    docstring); `noise`: the run's value on `axis` (`_axis_value`)."""
    used = endpoints[endpoints["status"].isin(("ok", "diverged"))]
    out = used[["run_id", *GROUP[:4], "seed"]].reset_index(drop=True)
    out["noise"] = [_axis_value(cfg, run_id, axis) for run_id in used["run_id"]]
    out["diverged"] = (used["status"] == "diverged").to_numpy()
    for col, source in PER_RUN.items():
        out[col] = used[source].to_numpy()
    return out


def kaplan_meier(times: np.ndarray, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Survival curve S(t) at each distinct event time: (times, survival). `events` 1 = diverged at
    `times`, 0 = censored there (did not diverge by its last step)."""
    order = np.argsort(times, kind="stable")
    times, events = times[order], events[order]
    at_risk, surv = len(times), 1.0
    out_t, out_s = [0.0], [1.0]
    for t in np.unique(times):
        here = times == t
        d = int(events[here].sum())
        if d:
            surv *= 1 - d / at_risk
            out_t.append(float(t))
            out_s.append(surv)
        at_risk -= int(here.sum())
    return np.asarray(out_t), np.asarray(out_s)


def km_median(times: np.ndarray, events: np.ndarray) -> float:
    """The first step where the Kaplan-Meier survival falls to 1/2 or below; NaN if it never does."""
    t, s = kaplan_meier(times, events)
    hit = np.nonzero(s <= 0.5)[0]
    return float(t[hit[0]]) if len(hit) else math.nan


def _group_times(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    times = np.where(g["diverged"], g["div_step"], g["last_step"]).astype(float)
    return times, g["diverged"].to_numpy().astype(int)


def diverged_fraction(g: pd.DataFrame) -> dict:
    """Of a group of `run_stability` rows: runs diverged, their fraction and its exact interval (the
    stability and study_survival tables' columns)."""
    k, n = int(g["diverged"].sum()), len(g)
    lo, hi = clopper_pearson(k, n)
    return {"diverged": k, "diverged_frac": k / n if n else math.nan, "diverged_low": lo, "diverged_high": hi}


def divergence_steps(g: pd.DataFrame) -> dict:
    """Of a group of `run_stability` rows: the Kaplan-Meier median step of the first divergence, the range
    of the divergence steps and how the runs diverged, with counts."""
    steps = g.loc[g["diverged"], "div_step"]
    times, events = _group_times(g)
    return {
        "median_div_step": km_median(times, events) if len(g) else math.nan,
        "div_step_min": float(steps.min()) if len(steps) else math.nan,
        "div_step_max": float(steps.max()) if len(steps) else math.nan,
        "kinds": ", ".join(
            f"{kind}: {c}" for kind, c in g.loc[g["diverged"], "div_kind"].value_counts().items()
        ),
    }


def _reference_counts(
    per_run: pd.DataFrame, axis: str, algo, model, variant: str, gran, noise
) -> tuple[str, int, int]:
    """(reference variant, its diverged count, its runs) at the same dose (bf16 at every target KL);
    ("", 0, 0) without one."""
    ref = REFERENCE.get(variant, "fp8")
    if ref is None:
        return "", 0, 0
    same = (per_run["algo"] == algo) & (per_run["model"] == model) & (per_run["variant"] == ref)
    if not (axis == "target_kl" and ref == REFERENCE_VARIANT):
        same &= per_run["noise"] == noise
    if ref != REFERENCE_VARIANT:
        same &= per_run["granularity"] == gran
    g = per_run[same]
    return (ref, int(g["diverged"].sum()), len(g)) if len(g) else ("", 0, 0)


def stability_table(per_run: pd.DataFrame, axis: str = "noise_scale") -> pd.DataFrame:
    """One row per (algo, model, variant, granularity, dose); see the module docstring."""
    rows = []
    for key, g in per_run.groupby(GROUP, sort=False):
        k, n = int(g["diverged"].sum()), len(g)
        ref, ref_k, ref_n = _reference_counts(per_run, axis, *key)
        row = dict(zip(GROUP, key, strict=True)) | {"runs": n} | diverged_fraction(g)
        row |= {
            "vs": ref,
            "vs_diverged": f"{ref_k}/{ref_n}" if ref else "",
            "fisher_p": fisher_p(k, n, ref_k, ref_n) if ref else math.nan,
        }
        row |= divergence_steps(g)
        for col, metric in SEED_COLUMNS.items():
            ci = t_interval(g[col], bounds=value_range(metric))
            row |= {col: ci.estimate, f"{col}_low": ci.low, f"{col}_high": ci.high}
        rows.append(row)
    return pd.DataFrame(rows)


BREAKING_COLUMNS = [
    *GROUP[:4],
    "doses",
    "diverged_by_dose",
    "ed50",
    "ed50_low",
    "ed50_high",
    "slope",
    "fit",
    "note",
]


def breaking_dose_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per FP8 variant swept over more than one dose: the logistic ED50 with its profile-likelihood
    interval (module docstring; binomial.dose_response)."""
    rows = []
    for key, g in table.groupby(GROUP[:4], sort=False):
        if g["noise"].nunique() < 2:
            continue
        g = g.sort_values("noise")
        fit = dose_response(g["noise"].to_numpy(float), g["diverged"].to_numpy(int), g["runs"].to_numpy(int))
        rows.append(
            dict(zip(GROUP[:4], key, strict=True))
            | {
                "doses": ", ".join(f"{d:g}" for d in g["noise"]),
                "diverged_by_dose": ", ".join(
                    f"{k}/{n}" for k, n in zip(g["diverged"], g["runs"], strict=True)
                ),
                "ed50": fit.ed50,
                "ed50_low": fit.low,
                "ed50_high": fit.high,
                "slope": fit.slope,
                "fit": fit.fit,
                "note": fit.note,
            }
        )
    return pd.DataFrame(rows, columns=BREAKING_COLUMNS)


def _ed50_cell(r: pd.Series) -> str:
    """`ed50 [low, high]` formatted alike; `– [low, high]` without a point estimate."""
    from fp8rl.report.markdown import figures

    if math.isnan(r["ed50_low"]) or math.isnan(r["ed50_high"]):
        return ""
    est, low, high = figures([r["ed50"], r["ed50_low"], r["ed50_high"]])
    return f"{est or '–'} [{low}, {high}]"


def breaking_view(breaking: pd.DataFrame) -> pd.DataFrame:
    """The breaking-dose table with the ED50 and its interval in one cell, for Markdown and HTML."""
    rows = []
    for _, r in breaking.iterrows():
        row = {k: r[k] for k in [*GROUP[:4], "doses", "diverged_by_dose"]}
        row["ED50 [95% CI]"] = _ed50_cell(r)
        row["fit"] = r["note"]
        rows.append(row)
    return pd.DataFrame(rows, columns=[*GROUP[:4], "doses", "diverged_by_dose", "ED50 [95% CI]", "fit"])


def stability_view(table: pd.DataFrame, axis: str = "noise_scale") -> pd.DataFrame:
    """The table with intervals folded into cells, for Markdown and HTML; the axis column is `dose`, or
    `target_kl` on a KL axis."""
    from fp8rl.report.markdown import fmt, fmt_ci

    column = "dose" if axis == "noise_scale" else axis
    rows = []
    for _, r in table.iterrows():
        row = {k: r[k] for k in GROUP[:4]} | {column: f"{r['noise']:g}"}
        frac = fmt_ci(r["diverged_frac"], r["diverged_low"], r["diverged_high"], "no runs")
        row["diverged/total"] = f"{r['diverged']}/{r['runs']} = {frac}"
        row["vs"] = f"{r['vs']} {r['vs_diverged']}" if r["vs"] else ""
        row["p"] = fmt(r["fisher_p"], 2)
        row["median_div_step"] = fmt(r["median_div_step"], 0)
        row["div_steps"] = (
            "" if math.isnan(r["div_step_min"]) else f"{r['div_step_min']:.0f}-{r['div_step_max']:.0f}"
        )
        for col in SEED_COLUMNS:
            row[col] = fmt_ci(r[col], r[f"{col}_low"], r[f"{col}_high"], "n=1, no CI")
        row["kinds"] = r["kinds"]
        rows.append(row)
    return pd.DataFrame(rows)
