"""The findings a tier's SUMMARY.md and the quoted blocks of README.md and docs/ both state, one function
each, from the tier's tables: whether the bf16 control learned (`control.csv`), the pre-registered
contrasts (`planned.csv`), and where runs diverged, per variant and noise dose (`stability.csv`) or per
study arm (`study_survival.csv`); and the bold void line a quoted verdict block starts with where the
comparison is void. `summary_page` reads them from the tables it has just written, the
quoted blocks (fp8rl.quotes.studies) from a publication's, so the page and the docs say a finding in
the same words and with the same figures.

Each function takes the table (None or empty where the tier has none) and returns markdown bullets, an
empty list where there is nothing to say.
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.control import VOID, never_ran, void_text
from fp8rl.report.formats import interval, num


def control_lines(
    control: pd.DataFrame | None, void: bool, short: str | None = None, who: str = ""
) -> list[str]:
    """Each control group's reward rise with its interval and verdict (`who` before the group's name:
    the quoted blocks name it the bf16 control); where the comparison is `void`, the void notice, or
    `short` (a pipeline check's reason why no learning was expected) when given and a control run
    finished."""
    if control is None or control.empty:
        return ["- No bf16 run in the matrix: nothing to check the comparison against."]
    lines = [
        f"- {who}{r['algo']}/{r['model']}"
        + (f" ({r['condition']})" if isinstance(r["condition"], str) and r["condition"] != "none" else "")
        + f": sampled reward {num(r['reward_first'])} → {num(r['reward_last'])}, rise "
        f"{interval(r['rise'], r['low'], r['high'], 3)} over {int(r['n'])} units ({r['unit']}): "
        f"**{r['verdict']}**."
        for r in control.to_dict("records")
    ]
    unchecked = never_ran(control)
    if void and short is not None and not unchecked:
        return [*lines, short]
    text = void_text(control) if unchecked else VOID
    return [*lines, f"- {text[0].upper()}{text[1:]}."] if void else lines


def planned_lines(
    planned: pd.DataFrame | None, void: bool, unchecked: bool = False, how: str = ""
) -> list[str]:
    """Each pre-registered contrast with its interval, adjusted p (by the study's `multiplicity`: Holm,
    the fixed sequence, or none, where it equals the raw p) and decision, marked void (the
    control never ran, or did not learn) where the comparison is; `how` after the contrast's name (the
    quoted blocks name the endpoint and the test)."""
    if planned is None or planned.empty:
        return []
    tail = f" (void: the control {'never ran' if unchecked else 'did not learn'})" if void else ""
    return [
        f"- {r['contrast']}{how}: {r['arm']} − {r['reference']} = "
        f"{interval(r['difference'], r['low'], r['high'], 3)}, p (adjusted) = {num(r['p_adjusted'], 3)}: "
        f"{r['decision']}{tail}."
        for r in planned.to_dict("records")
    ]


def stability_lines(stability: pd.DataFrame | None, axis: str | None = "noise_scale") -> list[str]:
    """Runs flagged diverged per variant and setting of the noise axis (`axis`, fp8rl.report.paths
    `noise_axis`: a dose, or a target per-token KL), with their kinds (`stability.csv`)."""
    if stability is None or stability.empty:
        return []
    broke = stability[stability["diverged"] > 0]
    if broke.empty:
        return [f"- Divergences: none in {int(stability['runs'].sum())} runs."]

    def setting(value: float) -> str:
        return f"KL {value:g}" if axis == "target_kl" else f"dose {num(value, 0)}"

    cells = "; ".join(
        f"{r['variant']} at {setting(r['noise'])}: {int(r['diverged'])}/{int(r['runs'])}"
        + (f" ({r['kinds']})" if isinstance(r.get("kinds"), str) and r["kinds"] else "")
        for r in broke.to_dict("records")
    )
    return [f"- Divergences (runs flagged / runs): {cells}."]


def survival_lines(survival: pd.DataFrame | None) -> list[str]:
    """Runs flagged diverged per study arm, with their kinds and Kaplan-Meier median step
    (`study_survival.csv`: every study)."""
    if survival is None or survival.empty:
        return []
    if not survival["diverged"].any():
        return [f"- Divergences: none in {int(survival['trained'].sum())} runs that trained."]
    cells = "; ".join(
        f"{r['arm']} {int(r['diverged'])}/{int(r['trained'])}"
        + (f" ({r['kinds']})" if isinstance(r["kinds"], str) and r["kinds"] else "")
        + (f", median step {num(r['median_div_step'], 0)}" if math.isfinite(r["median_div_step"]) else "")
        for r in survival.to_dict("records")
    )
    return [f"- Divergences per arm (runs flagged / runs that trained; Kaplan-Meier median step): {cells}."]


def void_line(control: pd.DataFrame | None) -> str | None:
    """The line a quoted verdict block starts with where the comparison is void: the void notice in bold
    (control.void_text: a control that never ran is said so) and each group's verdict and rise; None where
    every group learned, or for a publication without a control table (which then says nothing)."""
    if control is None or control.empty or (control["verdict"] == "learned").all():
        return None
    groups = control.to_dict("records")
    cells = "; ".join(
        f"{r['algo']}/{r['model']}: {r['verdict']}, rise {interval(r['rise'], r['low'], r['high'], 3)}"
        for r in groups
    )
    text = void_text(groups)
    return f"- **{text[0].upper()}{text[1:]}** ({cells}; `tables/control.csv`)."
