"""The harness checks its own control: did the bf16 runs learn?

A comparison of FP8 against bf16 says what FP8 does to learning only where bf16 learns. Per (algo,
model, condition) of the bf16 runs, `control_table` takes each run's reward rise (`reward_rise` of
endpoints.csv: mean reward/mean over the last 20 % of the planned steps minus that over the first 10 %),
averages it per base model where the runs start from more than one base (the base is then the unit:
seeds are nested in it), and gives the mean with a 95 % Student t-interval over the units
(scipy.stats.t, df = n − 1). With a single base for every run the seed is the unit and the verdict is
conditional on that base. The verdict (`VERDICTS`):

- `learned`: the interval lies above 0;
- `flat`: it includes 0;
- `fell`: it lies below 0;
- `no interval`: fewer than two units, or units that all gave one value (a zero-width interval
  measures no spread).

Runs that are `ok` or `diverged` enter (a diverged control is part of what the check sees, and is
counted in `diverged`); failed and missing ones are counted only. A tier whose every control group
`learned` has a comparison; otherwise `VOID` (or `UNCHECKED`, where no bf16 run of a group that did
not learn finished: an all-failed tier's control never ran) is printed wherever the report draws a comparison verdict
(report.html's banner, the notes of the comparison, planned, exploratory, mechanism and stability
tables, `control` in report.json).
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.endpoints import FIRST_FRAC, LAST_FRAC
from fp8rl.report.methods import CI_METHOD
from fp8rl.stats.intervals import t_interval
from fp8rl.vocabulary import REFERENCE_VARIANT

VERDICTS = ("learned", "flat", "fell", "no interval")
VOID = "the comparison is void: the bf16 control did not learn"
# every control group that did not learn had no run to check, and no group had one: it never ran
UNCHECKED = "the comparison is void: no bf16 control run finished, so whether it learns is unknown"
# some group's control ran (and learned), another group's never did
UNCHECKED_SOME = (
    "the comparison is void: the bf16 control of some groups has no finished run, so whether it learns "
    "there is unknown"
)
GROUP = ["algo", "model", "condition"]
COLUMNS = [
    *GROUP, "runs", "used", "diverged", "unit", "n", "reward_first", "reward_last", "rise", "low", "high",
    "verdict",
]  # fmt: skip
NOTES = [
    f"Did the bf16 control learn? Per run, `reward_rise` = mean reward/mean over the last {100 * LAST_FRAC:.0f} % "
    f"of the planned steps − that over the first {100 * FIRST_FRAC:.0f} % (endpoints.csv).",
    "`unit`: `base` where the runs start from several base models (each base's mean rise is one value), "
    "`seed (one base)` where every run shares one base (the verdict is then conditional on it); `n`: "
    f"units. `rise` [low, high]: mean over the units, {CI_METHOD}.",
    "`verdict`: learned (interval above 0), flat (includes 0), fell (below 0), no interval (n < 2, or a "
    "zero-width interval: every unit gave one value).",
    "`used`: runs ok or diverged of `runs`; `diverged`: bf16 runs flagged diverged.",
]


def never_ran(groups) -> bool:
    """Whether every control group (`control_table`'s frame or its records, or report.json's `groups`;
    None: no control table) that did not learn had no run to check (`n` 0): the tier's control failed to
    run rather than to learn."""
    groups = groups.to_dict("records") if isinstance(groups, pd.DataFrame) else groups or []
    failing = [g for g in groups if g["verdict"] != "learned"]
    return bool(failing) and all(not g["n"] for g in failing)


def void_text(groups) -> str:
    """The void notice that fits the control groups: UNCHECKED where `never_ran` and no group ran at all,
    UNCHECKED_SOME where another group's control did run, else VOID."""
    if not never_ran(groups):
        return VOID
    return UNCHECKED_SOME if any_ran(groups) else UNCHECKED


def any_ran(groups) -> bool:
    """Whether some control group had a run to check (`n` > 0)."""
    groups = groups.to_dict("records") if isinstance(groups, pd.DataFrame) else groups or []
    return any(g["n"] for g in groups)


def verdict(low: float, high: float) -> str:
    """`learned` / `flat` / `fell` from a rise's interval; `no interval` when it has no bounds or no
    width."""
    if not (math.isfinite(low) and math.isfinite(high)) or low == high:
        return "no interval"  # a zero-width interval: units that all gave one value measure no spread
    return "learned" if low > 0 else ("fell" if high < 0 else "flat")


def control_table(endpoints: pd.DataFrame) -> pd.DataFrame:
    """One row per (algo, model, condition) of the bf16 runs of `endpoints` (endpoints.csv's frame)."""
    bf16 = endpoints[endpoints["variant"] == REFERENCE_VARIANT]
    rows = []
    for key, sub in bf16.groupby(GROUP, sort=False, dropna=False):
        used = sub[sub["status"].isin(("ok", "diverged"))]
        used = used[pd.to_numeric(used["reward_rise"], errors="coerce").notna()]
        several = used["base"].nunique() > 1
        units = used.groupby("base", sort=False)[["reward_first", "reward_last", "reward_rise"]].mean()
        values = units if several else used[["reward_first", "reward_last", "reward_rise"]]
        ci = t_interval(values["reward_rise"])
        rows.append(
            dict(zip(GROUP, key, strict=True))
            | {
                "runs": len(sub),
                "used": len(used),
                "diverged": int((sub["status"] == "diverged").sum()),
                "unit": "base" if several else "seed (one base)",
                "n": ci.n,
                "reward_first": float(values["reward_first"].mean()) if len(values) else math.nan,
                "reward_last": float(values["reward_last"].mean()) if len(values) else math.nan,
                "rise": ci.estimate,
                "low": ci.low,
                "high": ci.high,
                "verdict": verdict(ci.low, ci.high),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def control_summary(table: pd.DataFrame) -> dict:
    """report.json's `control`: whether every control group learned, the statement, and the groups.
    A matrix without bf16 runs has no control to check (`learned` None, the comparison not void)."""
    if table.empty:
        return {"learned": None, "comparison_void": False, "statement": "no bf16 control in the matrix",
                "windows": _windows(), "groups": []}  # fmt: skip
    learned = bool((table["verdict"] == "learned").all())
    groups = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]
    return {
        "learned": learned,
        "comparison_void": not learned,
        "statement": statement(table),
        "windows": _windows(),
        "groups": groups,
    }


def _windows() -> dict:
    return {"first_frac": FIRST_FRAC, "last_frac": LAST_FRAC}


def statement(table: pd.DataFrame) -> str:
    """One sentence per control group, and the void notice when any did not learn."""
    parts = []
    for r in table.to_dict("records"):
        where = "/".join(str(r[k]) for k in GROUP if isinstance(r[k], str) and r[k] != "none")
        if r["n"] == 0:
            parts.append(f"bf16 {where}: no run with a reward in both windows: no interval")
            continue
        ci = f"[{r['low']:+.3f}, {r['high']:+.3f}]" if r["verdict"] != "no interval" else "(no interval)"
        units = "bases" if r["unit"] == "base" else "seeds of one base"
        parts.append(f"bf16 {where}: reward rise {r['rise']:+.3f} {ci} over {r['n']} {units}: {r['verdict']}")
    text = "; ".join(parts) + "."
    if (table["verdict"] == "learned").all():
        return text
    void = void_text(table.to_dict("records"))
    return f"{text} {void[0].upper()}{void[1:]}."


def void_notes(summary: dict, notes: list[str]) -> list[str]:
    """`notes` with the void notice first when the control did not learn."""
    if not summary["comparison_void"]:
        return notes
    void = void_text(summary["groups"])
    return [f"{void[0].upper()}{void[1:]} (see the control table).", *notes]


def control_view(table: pd.DataFrame) -> pd.DataFrame:
    """The markdown/HTML view: the rise as `estimate [low, high]`."""
    from fp8rl.report.markdown import fmt, fmt_ci

    view = table[[*GROUP, "runs", "used", "diverged", "unit", "n"]].copy()
    view["condition"] = view["condition"].map(lambda c: "" if c is None or c != c else c)
    view["reward first → last"] = [
        f"{fmt(a)} → {fmt(b)}" for a, b in zip(table["reward_first"], table["reward_last"], strict=True)
    ]
    view["rise [95% CI]"] = [
        fmt_ci(*x, "n < 2", signed=True) for x in zip(table["rise"], table["low"], table["high"], strict=True)
    ]
    view["verdict"] = table["verdict"]
    return view
