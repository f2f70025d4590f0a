"""A mismatch-axis search's failure rule (the config's `failure_search`, fp8rl.config.failure_search) read
off the tier's report.

Per condition of the matrix, in order of its `fp8.target_kl`: the decisive arm (the study arm of
`failure_search.decisive` at that condition), its divergence count from the report's
`tables/study_survival.csv` (runs flagged by a detector of the `stability` section, of the runs that
trained, with the exact interval that table gives) and, with `heldout_loss`, its planned contrast against
`failure_search.reference` from `tables/planned.csv` (the study's paired test on the held-out endpoint,
adjusted as the study registers: `study.multiplicity`). A setting fails when `min_diverged_frac` of the decisive arm's trained runs diverged, or
when that contrast's adjusted p is below `study.alpha` with a difference below 0. `decide` returns every
row, whether the search is complete (every decisive run trained) and the decision: the lowest-KL failing
setting, where the comparison of corrections runs, or none, when the search itself is the result. An incomplete search
decides nothing: a failure seen in part of the runs is reported, not acted on.

`fp8rl report` writes the same rows as `tables/failure_search.csv` (the `failure_search_section` of
fp8rl.report.pipeline, from the frames it has just computed), with the decision in the table's notes and
on the tier's SUMMARY.md; `fp8rl decide failure-search` prints them as JSON.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.report.paths import ReportPaths

# failure_search.csv's columns (`search_table`); the held-out ones are empty without `heldout_loss`
COLUMNS = ["condition", "target_kl", "arm", "runs", "trained", "diverged", "diverged_low", "diverged_high",
           "kinds", "heldout_difference", "heldout_low", "heldout_high", "heldout_p_adjusted", "fails", "why"]  # fmt: skip


def _arm_at(cfg: ExperimentConfig, condition: str) -> str:
    fs = cfg.failure_search
    for name, cell in cfg.study.arms.items():
        parts = cell.strip("/").split("/")
        if parts[2] == fs.decisive and parts[-1] == condition:
            return name
    raise ValueError(f"failure_search.decisive: no study arm of {fs.decisive} at condition {condition!r}")


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; build the tier's report first (fp8rl report)")
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def decide(cfg: ExperimentConfig, tables_dir: str | Path | None = None) -> dict:
    """The rows, `complete` and `decision` of the failure search (module docstring), read off a built
    report's tables; `tables_dir` defaults to the tier's `tables/` (a published tier's `tables/` works
    too). ValueError when the config has no `failure_search` section."""
    if cfg.failure_search is None:
        raise ValueError("failure_search: not set in this config")
    tables = Path(tables_dir) if tables_dir is not None else ReportPaths.for_config(cfg).tables_dir
    survival = _read(tables / "study_survival.csv")
    planned = _read(tables / "planned.csv") if cfg.failure_search.heldout_loss else pd.DataFrame()
    return decide_from(cfg, survival, planned)


def decide_from(cfg: ExperimentConfig, survival: pd.DataFrame, planned: pd.DataFrame) -> dict:
    """`decide` on the study's survival table (fp8rl.report.study_survival) and planned table
    (fp8rl.report.planned) as frames: the report's builder passes the frames it has just computed."""
    fs = cfg.failure_search
    if fs is None:
        raise ValueError("failure_search: not set in this config")
    survival = survival.set_index("arm")
    levels = sorted(cfg.matrix.conditions, key=lambda c: cfg.fp8_for(c.name).target_kl)
    rows = []
    for c in levels:
        arm = _arm_at(cfg, c.name)
        s = survival.loc[arm]
        runs, trained, diverged = int(s["runs"]), int(s["trained"]), int(s["diverged"])
        frac = diverged / trained if trained else math.nan
        reasons = []
        if trained and frac >= fs.min_diverged_frac:
            reasons.append(f"{diverged} of {trained} runs diverged (>= {fs.min_diverged_frac:g})")
        row = {"condition": c.name, "target_kl": cfg.fp8_for(c.name).target_kl, "arm": arm, "runs": runs,
               "trained": trained, "diverged": diverged, "diverged_low": float(s["diverged_low"]),
               "diverged_high": float(s["diverged_high"]), "kinds": s["kinds"] if isinstance(s["kinds"], str) else ""}  # fmt: skip
        if fs.heldout_loss:
            hit = planned[(planned["arm"] == arm) & (planned["reference"] == fs.reference)]
            if hit.empty:
                raise ValueError(
                    f"failure_search.heldout_loss: the study plans no contrast {arm} vs {fs.reference}"
                )
            h = hit.iloc[0]
            row |= {"heldout_difference": float(h["difference"]), "heldout_low": float(h["low"]),
                    "heldout_high": float(h["high"]), "heldout_p_adjusted": float(h["p_adjusted"])}  # fmt: skip
            if float(h["p_adjusted"]) < cfg.study.alpha and float(h["difference"]) < 0:
                reasons.append(
                    f"held-out loss vs {fs.reference} {float(h['difference']):+.3f} "
                    f"(adjusted p {float(h['p_adjusted']):.2g} < {cfg.study.alpha:g})"
                )
        row["fails"] = bool(reasons)
        row["why"] = "; ".join(reasons)
        rows.append(row)
    complete = all(r["trained"] == r["runs"] for r in rows)
    return {"decisive": fs.decisive, "reference": fs.reference, "rows": rows, "complete": complete,
            "decision": decision(rows, complete)}  # fmt: skip


def decision(rows: list[dict], complete: bool) -> str:
    """The search's decision from its rows (lowest target KL first): nothing while incomplete, else the
    lowest-KL failing setting, else that none fails."""
    failing = [r for r in rows if r["fails"]]
    if not complete:
        return "incomplete: not every run of the decisive arms has trained; nothing is decided yet"
    if failing:
        first = failing[0]
        return (
            f"compare corrections at {first['condition']} (target KL {first['target_kl']:g}): {first['why']}"
        )
    top = rows[-1]["target_kl"] if rows else math.nan
    return f"no setting up to target KL {top:g} fails: the search is the result; no comparison is run"


def search_table(result: dict) -> pd.DataFrame:
    """`tables/failure_search.csv`: `decide`'s rows, one per setting, lowest target KL first."""
    return pd.DataFrame(result["rows"], columns=COLUMNS)


def decision_of(table: pd.DataFrame) -> tuple[bool, str]:
    """`complete` and the decision read back from a written `failure_search.csv`."""
    rows = [{**r, "fails": str(r["fails"]) == "True", "why": r["why"] if isinstance(r["why"], str) else ""}
            for r in table.to_dict("records")]  # fmt: skip
    complete = all(int(r["trained"]) == int(r["runs"]) for r in rows)
    return complete, decision(rows, complete)


def verdict_of(table: pd.DataFrame) -> tuple[bool, str]:
    """`complete`, and the decision as one bold Markdown sentence (`**Decision**: ...`, or that the search
    is incomplete)."""
    complete, text = decision_of(table)
    return complete, f"**Decision**: {text}." if complete else f"**{text[0].upper()}{text[1:]}**."


def search_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its intervals folded into cells, for Markdown and HTML."""
    from fp8rl.report.markdown import fmt, fmt_ci

    rows = []
    for r in table.to_dict("records"):
        diverged = f"{int(r['diverged'])} of {int(r['trained'])}" + (
            f" [{fmt(r['diverged_low'])}, {fmt(r['diverged_high'])}]" if int(r["trained"]) else ""
        )
        row = {"setting": r["condition"], "target KL": f"{r['target_kl']:g}", "arm": r["arm"],
               "diverged (exact 95 %)": diverged, "kinds": r["kinds"] if isinstance(r["kinds"], str) else ""}  # fmt: skip
        if "heldout_difference" in r and pd.notna(r["heldout_difference"]):
            row["held-out vs control [95 %]"] = fmt_ci(
                r["heldout_difference"], r["heldout_low"], r["heldout_high"], "no interval", signed=True
            )
            row["adjusted p"] = fmt(r["heldout_p_adjusted"])
        row["fails"] = "**yes**: " + r["why"] if str(r["fails"]) == "True" else "no"
        rows.append(row)
    return pd.DataFrame(rows)


def search_markdown(table: pd.DataFrame) -> tuple[bool, str]:
    """`complete`, and the search as SUMMARY.md and the docs' quoted block give it: the view as a
    Markdown table, then the decision in bold (or that it is incomplete)."""
    from fp8rl.report.formats import markdown_table

    view = search_view(table)
    complete, verdict = verdict_of(table)
    rows = [[str(v) for v in r] for r in view.itertuples(index=False)]
    return complete, markdown_table(list(view.columns), rows) + "\n\n" + verdict


def search_notes(cfg: ExperimentConfig, table: pd.DataFrame) -> list[str]:
    """The rule as the config states it, and the decision."""
    fs = cfg.failure_search
    heldout = (
        f", or its planned held-out contrast against {fs.reference} has adjusted p below "
        f"{cfg.study.alpha:g} with a difference below 0 (tables/planned.md)"
        if fs.heldout_loss
        else ""
    )
    return [
        f"The failure rule, registered in the config before the search's runs: a setting fails when at "
        f"least {fs.min_diverged_frac:g} of its {fs.decisive} runs that trained were flagged by a "
        f"divergence detector (tables/study_survival.md){heldout}. The comparison of corrections runs at "
        "the lowest-KL setting that fails.",
        verdict_of(table)[1],
    ]
