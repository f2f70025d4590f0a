"""The quoted blocks of the measurement re-read: where each FP8 setting sits in the field's units
(`tables/mismatch.csv`, fp8rl.report.mismatch_table) and the study re-read on the held-out bf16
endpoint (`tables/secondary.csv`, fp8rl.report.secondary), from a study tier's publication."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.report.quote_format import markdown_table, num, published_table, quoted_block
from fp8rl.report.real_stacks import REAL_BF16_KL
from fp8rl.vocabulary import VARIANT_SPECS

REAL_BF16 = f"a healthy real BF16 stack's {REAL_BF16_KL:g}"


def _g(x: float, digits: int = 2) -> str:
    """A small positive figure in its own scale (1.2e-3, 0.045, 12)."""
    if pd.isna(x):
        return "–"
    return f"{x:.{digits}g}".replace("e-0", "e-")


def _setting(r: dict) -> str:
    target = "" if pd.isna(r["target_kl"]) else f", target KL {_g(r['target_kl'])}"
    if not VARIANT_SPECS[r["variant"]].fp8:
        return r["variant"] + target  # a bf16_floor arm's target
    return f"{r['variant']} {r['granularity']} {r['format']}, noise {num(r['noise'], 2)}{target} ({r['condition']})"


def mismatch_quote(published: Path, tier: str, variants: tuple[str, ...] | None = None) -> str:
    """A table of every setting of `tier`'s mismatch.csv (of `variants` only, when given) in the field's
    units, trainer vs rollout and FP8 vs its BF16 shadow, with the KL's growth over the run and its ratio
    to a real BF16 stack."""
    table = published_table(published, tier, "mismatch")
    if variants is not None:
        table = table[table["variant"].isin(variants)]
    rows = []
    for r in table.to_dict("records"):
        rows.append(
            [
                _setting(r),
                f"{_g(r['mismatch_kl_k3_median'])} ({_g(r['mismatch_kl_k3_median'] / REAL_BF16_KL)}×)",
                _g(r["mismatch_kl_k3"]),
                _g(r["mismatch_abs_dlogp"]),
                _g(r["mismatch_tmpe_median"], 4),
                _g(r["mismatch_tmpe"], 3),
                _g(r["mismatch_dlogp"]),
                f"{r['mismatch_kl_k3_growth']:.2f}×",
                _g(r["shadow_mismatch_kl_k3_median"]),
                _g(r["shadow_mismatch_abs_dlogp"]),
            ]
        )
    header = [
        "setting", "KL, median step (÷ real bf16)", "KL, mean", "\\|Δlogp\\|", "tmpe, median step", "tmpe, mean",
        "Δlogp", "KL last ÷ first", "KL vs BF16 shadow, median step", "\\|Δlogp\\| vs BF16 shadow",
    ]  # fmt: skip
    note = (
        "\n\nTrainer vs rollout, per token, over each setting's runs (`tables/mismatch.csv`): the median "
        "step (a typical step) and the mean over steps, which a rare token with a large |Δlogp| can "
        f"dominate (k3 and tmpe average exp(±Δlogp)); the ratio in brackets is to {REAL_BF16}; the last two "
        "columns are the FP8 trainer against its own BF16 shadow on the same tokens."
    )
    return markdown_table(header, rows) + note


@quoted_block("learn-mismatch")
def learn_mismatch(published: Path) -> str:
    return mismatch_quote(published, "learn")


@quoted_block("mechanism-mismatch")
def mechanism_mismatch(published: Path) -> str:
    """The mechanism tier's plain settings (format × granularity × dose, KV cache on or off; bf16 and
    fp16 beside them): what each costs in the field's units before any correction."""
    return mismatch_quote(published, "mechanism", ("bf16", "fp16", "fp8"))


def secondary_quote(published: Path, tier: str) -> str:
    """The secondary analysis of `tier`'s secondary.csv as bullets (fp8rl.report.secondary.secondary_lines)."""
    from fp8rl.report.secondary import secondary_lines

    return "\n".join(secondary_lines(published_table(published, tier, "secondary")))


@quoted_block("learn-secondary")
def learn_secondary(published: Path) -> str:
    return secondary_quote(published, "learn")
