"""The stability report of a tier whose FP8 conditions are a noise-dose axis (the stress tier).

One row per run (`run_stability`), read from the tidy `RunSet` and each run's `summary.json`
(`divergence`: the first detection's kind and step, fp8rl.rl.stability):
- `diverged`: the run's status is `diverged`; `div_step` and `div_kind` its first detection;
- `final_acc`: mean `acc/mean` over the last `ACC_WINDOW` steps; `best_acc`: the best `ACC_WINDOW`-step
  moving mean of `acc/mean`;
- `peak_rel_entropy`: max entropy / the median entropy of the first `baseline_steps` steps (the
  detectors' baseline); `gibberish`: mean `gibberish/rate` over the run.

Per (algo, model, variant, granularity, dose) group (`stability_table`): runs diverged / total with a
Wilson 95 % interval of the fraction; time to divergence as the Kaplan-Meier median (runs that did not
diverge are censored at their last step; blank while fewer than half the runs have diverged) and the
range of the divergence steps; final and best accuracy, peak relative entropy and gibberish as seed means
with 95 % t-intervals (fp8rl.report.stats).

`breaking_dose_table`: per FP8 variant with more than one dose, the smallest dose at which at least half
the runs diverged (blank: none in the sweep) and the dose where the diverged fraction crosses 1/2 by
linear interpolation in log2(dose).

Figures: `survival` (Kaplan-Meier curves, fraction of runs not yet diverged vs step, per group),
`stability_curves` (entropy, reward and `clip/low_neg` vs step, seed mean with a min–max band; top row
every variant at dose 1, bottom row the dose sweep), `breaking_dose` (diverged fraction vs dose).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.matrix import RunSpec
from fp8rl.report.load import RunSet
from fp8rl.report.stats import t_interval
from fp8rl.rundir import RunDir

ACC_WINDOW = 5
GROUP = ["algo", "model", "variant", "granularity", "noise"]
CURVES = (("entropy", "entropy"), ("reward/mean", "reward"), ("clip/low_neg", "clip/low_neg"))
STABILITY_NOTES = [
    "`diverged/total`: runs whose status is diverged; `[low, high]`: Wilson 95% interval of the fraction.",
    "`median_div_step`: Kaplan-Meier median step of the first divergence (runs that did not diverge are "
    "censored at their last step); blank while fewer than half the runs diverged. `div_steps`: the range.",
    f"`final_acc`: mean acc/mean over the last {ACC_WINDOW} steps; `best_acc`: best {ACC_WINDOW}-step moving "
    "mean; seed means with 95% Student t-intervals (blank with one seed).",
    "`peak_rel_entropy`: max entropy / median entropy of the first baseline steps; `gibberish`: mean "
    "gibberish/rate over the run.",
    "`kinds`: how the runs first diverged (fp8rl.rl.stability kinds), with counts.",
]
BREAKING_NOTES = [
    "`d50`: the smallest fp8.noise_scale dose at which at least half the runs diverged (blank: none did).",
    "`d50_interp`: where the diverged fraction crosses 1/2, interpolated linearly in log2(dose).",
]


def _divergence(runs_dir: Path, run_id: str) -> dict:
    path = RunDir.of(runs_dir, run_id).summary
    try:
        d = json.loads(path.read_text()).get("divergence")
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def run_stability(runset: RunSet, runs_dir: str | Path, cfg: ExperimentConfig) -> pd.DataFrame:
    """One row per run that trained (status ok or diverged); see the module docstring. A run's dose is
    its condition's `fp8.noise_scale` (1 for bf16 runs: nothing is quantized)."""
    baseline_steps = cfg.stability.baseline_steps
    train = runset.metric("train")
    rows = []
    for _, r in runset.runs.iterrows():
        if r["status"] not in ("ok", "diverged"):
            continue
        spec = RunSpec.parse(r["run_id"])
        m = train[train["run_id"] == r["run_id"]].pivot_table(index="step", columns="metric", values="value")
        acc = m["acc/mean"].dropna() if "acc/mean" in m else pd.Series(dtype=float)
        ent = m["entropy"].dropna() if "entropy" in m else pd.Series(dtype=float)
        base = float(ent.iloc[:baseline_steps].median()) if len(ent) else math.nan
        div = _divergence(Path(runs_dir), r["run_id"]) if r["status"] == "diverged" else {}
        last = float(m.index.max()) if len(m) else math.nan
        rows.append(
            {
                "run_id": r["run_id"],
                **{k: r[k] for k in ("algo", "model", "variant", "granularity", "seed")},
                "noise": cfg.fp8_for(spec.condition).noise_scale if spec.spec.fp8 else 1.0,
                "diverged": r["status"] == "diverged",
                "div_step": float(div.get("step", r["step"])) if r["status"] == "diverged" else math.nan,
                "div_kind": div.get("kind", "unknown") if r["status"] == "diverged" else "",
                "last_step": last,
                "final_acc": float(acc.iloc[-ACC_WINDOW:].mean()) if len(acc) else math.nan,
                "best_acc": float(acc.rolling(ACC_WINDOW, min_periods=1).mean().max())
                if len(acc)
                else math.nan,
                "peak_rel_entropy": float(ent.max() / base) if len(ent) and base > 0 else math.nan,
                "gibberish": float(m["gibberish/rate"].mean()) if "gibberish/rate" in m else math.nan,
            }
        )
    cols = ["run_id", *GROUP[:4], "seed", "noise", "diverged", "div_step", "div_kind", "last_step"]
    cols += ["final_acc", "best_acc", "peak_rel_entropy", "gibberish"]
    return pd.DataFrame(rows, columns=cols)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial fraction k/n (NaN for n = 0)."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


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


def stability_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per (algo, model, variant, granularity, dose); see the module docstring."""
    rows = []
    for key, g in per_run.groupby(GROUP, sort=False):
        k, n = int(g["diverged"].sum()), len(g)
        lo, hi = wilson(k, n)
        times, events = _group_times(g)
        steps = g.loc[g["diverged"], "div_step"]
        row = dict(zip(GROUP, key, strict=True)) | {
            "runs": n,
            "diverged": k,
            "diverged_frac": k / n,
            "diverged_low": lo,
            "diverged_high": hi,
            "median_div_step": km_median(times, events),
            "div_step_min": float(steps.min()) if k else math.nan,
            "div_step_max": float(steps.max()) if k else math.nan,
            "kinds": ", ".join(
                f"{kind}: {c}" for kind, c in g.loc[g["diverged"], "div_kind"].value_counts().items()
            ),
        }
        for col in ("final_acc", "best_acc", "peak_rel_entropy", "gibberish"):
            ci = t_interval(g[col])
            row |= {col: ci.estimate, f"{col}_low": ci.low, f"{col}_high": ci.high}
        rows.append(row)
    return pd.DataFrame(rows)


def _d50(doses: np.ndarray, frac: np.ndarray) -> tuple[float, float]:
    hit = np.nonzero(frac >= 0.5)[0]
    if not len(hit):
        return math.nan, math.nan
    i = int(hit[0])
    if i == 0:
        return float(doses[0]), float(doses[0])
    x0, x1 = math.log2(doses[i - 1]), math.log2(doses[i])
    f0, f1 = frac[i - 1], frac[i]
    x = x0 + (0.5 - f0) / (f1 - f0) * (x1 - x0)
    return float(doses[i]), float(2**x)


def breaking_dose_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per FP8 variant swept over more than one dose: `d50` and `d50_interp` (module docstring)."""
    rows = []
    for key, g in table.groupby(GROUP[:4], sort=False):
        if g["noise"].nunique() < 2:
            continue
        g = g.sort_values("noise")
        d50, interp = _d50(g["noise"].to_numpy(float), g["diverged_frac"].to_numpy(float))
        rows.append(
            dict(zip(GROUP[:4], key, strict=True))
            | {
                "doses": ", ".join(f"{d:g}" for d in g["noise"]),
                "diverged_by_dose": ", ".join(
                    f"{k}/{n}" for k, n in zip(g["diverged"], g["runs"], strict=True)
                ),
                "d50": d50,
                "d50_interp": interp,
            }
        )
    cols = [*GROUP[:4], "doses", "diverged_by_dose", "d50", "d50_interp"]
    return pd.DataFrame(rows, columns=cols)


def stability_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table with intervals folded into cells, for Markdown and HTML."""
    from fp8rl.report.markdown import fmt, fmt_ci

    rows = []
    for _, r in table.iterrows():
        row = {k: r[k] for k in GROUP[:4]} | {"dose": f"{r['noise']:g}"}
        row["diverged/total"] = (
            f"{r['diverged']}/{r['runs']} [{fmt(r['diverged_low'], 2)}, {fmt(r['diverged_high'], 2)}]"
        )
        row["median_div_step"] = fmt(r["median_div_step"])
        row["div_steps"] = (
            "" if math.isnan(r["div_step_min"]) else f"{r['div_step_min']:.0f}-{r['div_step_max']:.0f}"
        )
        for col in ("final_acc", "best_acc", "peak_rel_entropy", "gibberish"):
            row[col] = fmt_ci(r[col], r[f"{col}_low"], r[f"{col}_high"], "n=1, no CI")
        row["kinds"] = r["kinds"]
        rows.append(row)
    return pd.DataFrame(rows)
