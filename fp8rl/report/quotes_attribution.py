"""The attribution tier's quoted blocks (fp8rl.report.quotes): the pre-registered contrasts, the
exploratory ones and the arms, from `results/published/attribution/tables/`, read against the study's
pre-registration (`study:` of config/attribution.yaml, the config the published report names by its
digest)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fp8rl.report.quote_format import (
    QuoteError,
    excludes_zero,
    interval,
    markdown_table,
    num,
    pp_point,
    published_table,
)

CONFIG = Path(__file__).resolve().parents[2] / "config" / "attribution.yaml"


def min_effect(published: Path) -> float:
    """The pre-registered smallest difference worth seeing, from the config the published tier ran with
    (QuoteError when config/attribution.yaml has changed since: its digest is not the report's)."""
    from fp8rl.config_loader import load_config

    cfg = load_config(CONFIG)
    report = published / "attribution" / "report.json"
    ran = json.loads(report.read_text(encoding="utf-8")).get("config_digest") if report.is_file() else None
    if ran != cfg.digest():
        raise QuoteError(
            f"{CONFIG}: digest {cfg.digest()} is not the published tier's ({ran}, {report}): the "
            "pre-registration changed after the runs; re-run the tier or restore the config"
        )
    return float(cfg.study.min_effect)


def _p(p: float) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _power(r: pd.Series) -> str:
    return f"{num(r['power_observed'])} (observed SDs), {num(r['power_planned'])} (planning SD)"


def attribution_planned(published: Path) -> str:
    """The pre-registered contrasts: difference of mean endpoints with the Welch interval, Welch's p, the
    Holm-adjusted p, the decision, and the power to see the pre-registered effect; then one sentence
    per contrast that reads its interval and power."""
    planned = published_table(published, "attribution", "planned")
    rows = [
        [
            f"`{r['contrast']}`", f"{r['arm']} − {r['reference']}", f"{int(r['n_arm'])} vs {int(r['n_reference'])}",
            interval(r["difference"], r["low"], r["high"], 3), _p(r["p"]), _p(r["p_adjusted"]),
            str(r["decision"]), _power(r),
        ]
        for _, r in planned.iterrows()
    ]  # fmt: skip
    effect = min_effect(published)
    header = ["contrast", "difference", "seeds", "Δ endpoint [95 % Welch t]", "p", "p (Holm)", "decision",
              f"power for ±{num(effect)}"]  # fmt: skip
    lines = []
    for _, r in planned.iterrows():
        excl = excludes_zero(r["low"], r["high"])
        reading = (
            "the interval excludes 0"
            if excl
            else f"the interval includes 0 and reaches {num(r['low'], 3)} to {num(r['high'], 3)}"
        )
        if excl:
            caveat = ""
        elif -effect < r["low"] and r["high"] < effect:
            caveat = (f"; it also excludes a difference of the pre-registered size (±{num(effect)}) either way: "
                      "no effect that large at these seeds")  # fmt: skip
        else:
            caveat = f"; it does not exclude ±{num(effect)}: no evidence of no effect either"
        lines.append(
            f"- `{r['contrast']}`: {r['decision']} (Holm p = {_p(r['p_adjusted'])}); {reading}{caveat}."
        )
    return markdown_table(header, rows) + "\n\n" + "\n".join(lines)


def attribution_exploratory(published: Path) -> str:
    """The exploratory contrasts: difference with its Welch interval and the unadjusted p, no decision."""
    table = published_table(published, "attribution", "exploratory")
    rows = [
        [f"`{r['contrast']}`", f"{r['arm']} − {r['reference']}", f"{int(r['n_arm'])} vs {int(r['n_reference'])}",
         interval(r["difference"], r["low"], r["high"], 3), _p(r["p"])]
        for _, r in table.iterrows()
    ]  # fmt: skip
    return (
        markdown_table(
            ["contrast", "difference", "seeds", "Δ endpoint [95 % Welch t]", "p (unadjusted)"], rows
        )
        + "\n\nExploratory: no multiplicity correction and no decision; an interval that excludes 0 here is a "
        "lead for a planned study, not a finding."
    )


def attribution_arms(published: Path) -> str:
    """Per arm: the endpoint with its t-interval, the seed SD, diverged runs, and what the arm did to the
    mechanisms (mismatch KL and entropy at step 1, `clip/low_neg` and the paired excess clipping over
    the run)."""
    arms = published_table(published, "attribution", "arms")
    rows = [
        [
            f"`{r['arm']}`", f"{int(r['n'])} ({int(r['diverged'])})",
            interval(r["endpoint"], r["low"], r["high"], 3), num(r["sd"], 3),
            num(r["mismatch_kl_step1"], 4), num(r["entropy_step1"], 3),
            f"{num(100 * r['clip_low_neg'])} %",
            "n/a" if math.isnan(r["excess_clip"]) else pp_point(r["excess_clip"]),
        ]
        for _, r in arms.iterrows()
    ]  # fmt: skip
    header = ["arm", "seeds (diverged)", "endpoint [95 % t]", "seed SD", "mismatch KL, step 1",
              "entropy, step 1", "`clip/low_neg`", "excess clipping"]  # fmt: skip
    return markdown_table(header, rows) + (
        "\n\nEndpoint: mean `reward/mean` over steps 51-100 per run, averaged over seeds; the mechanism "
        "columns are means over the arm's runs (excess clipping: phantom/low_neg − phantom/missed_neg, "
        "FP8 and phantom arms only)."
    )


def attribution_base(published: Path) -> str:
    """The published run's base model: its test accuracy and final SFT loss, and the CPU and MKL branch
    its runs recorded (a base trained on another kernel path comes out different)."""
    from fp8rl.report.quotes_numerics import tier_numerics

    bases = published_table(published, "attribution", "base_models")
    if len(bases) != 1:
        raise QuoteError(f"{published}/attribution/tables/base_models.csv: {len(bases)} bases, expected one")
    base = bases.iloc[0]
    runs = tier_numerics(published / "attribution")
    return (
        f"The published run's base: {num(100 * base['acc/test_greedy'], 1)} % greedy / "
        f"{num(100 * base['acc/test_sampled'], 1)} % sampled test accuracy ({int(base['n_test'])} prompts), "
        f"final SFT loss {num(base['loss/final'], 3)}, trained on an {', '.join(runs.get('cpus', []))} under "
        f"MKL's `{', '.join(runs['mkl'])}` branch (`tables/base_models.csv`)."
    )
