"""The result figures that README.md and docs/ quote, generated from the published tables.

A quoted block sits between `<!-- fp8rl:results NAME -->` and `<!-- /fp8rl:results -->` in a markdown
file; `fp8rl quotes --write` regenerates every block from `results/published/{tier}/tables/*.csv`, and
`fp8rl quotes --check` (run by the test suite) fails naming the file and block when one differs from
what the tables give; both first check every publication against its `report.json` manifest, so an
edited table is refused, never quoted. So a figure in the text cannot drift from its table, and a re-publication updates
the text in one command. Words that depend on a figure ("the interval excludes 0") are generated with
it; prose outside the blocks quotes no result figures (tests/unit/report/test_quotes.py checks both).

Each block is one function of the published folder registered under its NAME where it is defined
(`@quoted_block(NAME)`, one registry: quote_format.BLOCKS). The blocks of the smoke tier are here, the
mechanism tier's in fp8rl.report.quotes_mechanism, the learning tier's in fp8rl.report.quotes_learn (its
mismatch and held-out re-read in fp8rl.report.quotes_heldout), the longform testbed's acceptance in
fp8rl.report.quotes_longform, the speed benchmark's in
fp8rl.report.quotes_performance, the tiers' run times in fp8rl.report.quotes_dag, the kernel paths and
the pin's cost in fp8rl.report.quotes_numerics, the real stacks' figures in fp8rl.report.real_stacks
(`BLOCK_MODULES`); the formats they share in fp8rl.report.quote_format.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from fp8rl.report import (
    quotes_dag,
    quotes_heldout,
    quotes_learn,
    quotes_longform,
    quotes_mechanism,
    quotes_numerics,
    quotes_performance,
    real_stacks,
)
from fp8rl.report.findings import void_line
from fp8rl.report.quote_format import (
    BLOCKS,
    SIGNIFICANCE_NOTE,
    QuoteError,
    excludes_zero,
    markdown_table,
    num,
    optional_table,
    pct,
    pp,
    pp_point,
    published_table,
    quoted_block,
)
from fp8rl.vocabulary import REFERENCE_VARIANT

BEGIN = re.compile(r"<!-- fp8rl:results (?P<name>[a-z0-9-]+) -->\n")
END = "<!-- /fp8rl:results -->"
# The markdown files that hold quoted blocks, relative to the repository root.
QUOTING_FILES = (
    "README.md", "docs/smoke.md", "docs/learn.md", "docs/clipping.md", "docs/mechanism.md", "docs/numerics.md",
    "docs/performance.md", "docs/mismatch.md", "docs/longform.md",
)  # fmt: skip


# ------------------------------------------------------------------------------------------ blocks


@quoted_block("smoke-clipping")
def smoke_clipping(published: Path) -> str:
    """Negative-advantage clipping per variant and algorithm, its Δ vs bf16, and the paired excess."""
    comp = published_table(published, "smoke", "comparison")
    algos = [a for a in ("grpo", "dapo") if a in set(comp["algo"])]
    get = {(r["algo"], r["variant"]): r for _, r in comp.iterrows()}
    variants = [
        v for v in ("fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib") if any((a, v) in get for a in algos)
    ]
    rows = [["`clip/low_neg`, bf16"] + [pct(get[(a, REFERENCE_VARIANT)], "clip_low_neg") for a in algos]]
    for v in variants:
        rows.append(
            [f"{v}, Δ vs bf16"]
            + [
                pp(*(get[(a, v)][f"clip_low_neg {k}"] for k in ("delta", "delta_ci_low", "delta_ci_high")))
                for a in algos
            ]
        )
        rows.append(
            [f"{v} / bf16"]
            + [
                num(get[(a, v)]["clip_low_neg"] / get[(a, REFERENCE_VARIANT)]["clip_low_neg"]) + "×"
                for a in algos
            ]
        )
    for v in variants:
        rows.append(
            [f"paired excess clipping, {v}"]
            + [
                pp(*(get[(a, v)][k] for k in ("excess_clip", "excess_clip ci_low", "excess_clip ci_high")))
                for a in algos
            ]
        )
    header = [""] + [a.upper() for a in algos]
    return markdown_table(header, rows) + "\n\n" + SIGNIFICANCE_NOTE


@quoted_block("smoke-verdicts")
def smoke_verdicts(published: Path) -> str:
    """Per algorithm, the sentences the smoke tier's conclusions rest on, with their figures: does FP8
    clip more than bf16, does calibration bring it within 20 % of bf16, is its paired excess below
    plain FP8's."""
    verdicts = smoke_verdicts_from(published_table(published, "smoke", "comparison"))
    void = void_line(optional_table(published, "smoke", "control"))
    return verdicts if void is None else f"{void}\n{verdicts}"


def smoke_verdicts_from(comp: pd.DataFrame) -> str:
    """`smoke_verdicts` of one comparison table."""
    get = {(r["algo"], r["variant"]): r for _, r in comp.iterrows()}
    lines = []
    for algo in [a for a in ("grpo", "dapo") if (a, REFERENCE_VARIANT) in get]:
        bf16, fp8 = get[(algo, REFERENCE_VARIANT)], get.get((algo, "fp8"))
        calib = get.get((algo, "fp8_calib"))
        parts = []
        if fp8 is not None:
            d = [fp8[f"clip_low_neg {k}"] for k in ("delta", "delta_ci_low", "delta_ci_high")]
            sig = "the interval excludes 0" if excludes_zero(d[1], d[2]) else "not significant at these seeds"
            parts.append(
                f"fp8 clips {num(fp8['clip_low_neg'] / bf16['clip_low_neg'])}× bf16's `clip/low_neg` ({sig})"
            )
        if calib is not None:
            parts.append(
                f"fp8_calib {num(calib['clip_low_neg'] / bf16['clip_low_neg'])}× ({within_20(calib, bf16)})"
            )
            if fp8 is not None:
                below = "below" if calib["excess_clip"] < fp8["excess_clip"] else "not below"
                parts.append(
                    f"fp8_calib's paired excess ({pp_point(calib['excess_clip'])}) is "
                    f"{below} plain fp8's ({pp_point(fp8['excess_clip'])})"
                )
        lines.append(f"- {algo.upper()}: " + "; ".join(parts) + ".")
    status = {k: int(comp[k].sum()) for k in ("ok", "diverged", "failed", "missing") if k in comp}
    evals = [c[: -len(" delta")] for c in comp.columns if c.endswith(" delta") and "/" in c]
    sig = sorted(
        {f"{r['variant']} {e} ({r['algo']})" for _, r in comp.iterrows() for e in evals
         if excludes_zero(r[f"{e} delta_ci_low"], r[f"{e} delta_ci_high"])}
    )  # fmt: skip
    lines.append(
        "- Runs: " + ", ".join(f"{n} {k}" for k, n in status.items()) + "; eval scores whose Δ vs bf16 "
        "excludes 0: " + (", ".join(sig) if sig else "none") + "."
    )
    return "\n".join(lines)


WITHIN = 0.2  # "within 20 % of bf16": the relative difference the smoke verdict tests


def within_20(calib: pd.Series, bf16: pd.Series) -> str:
    """Whether fp8_calib's `clip/low_neg` is within 20 % of bf16's, said only as far as the interval of
    their difference (Δ vs bf16, Welch t), relative to bf16's mean, supports it: within when the whole
    interval lies inside ±20 %, more than 20 % away when it lies outside, undecided otherwise."""
    base = bf16["clip_low_neg"]
    lo, hi = (calib[f"clip_low_neg {k}"] / base for k in ("delta_ci_low", "delta_ci_high"))
    if math.isnan(lo) or math.isnan(hi) or lo == hi:  # no width: seeds that all agree measure no spread
        return f"no interval to say whether within {100 * WITHIN:.0f} % of bf16"
    span = f"its Δ is {num(100 * lo, 0, sign=True)} % to {num(100 * hi, 0, sign=True)} % of bf16's"
    if lo >= -WITHIN and hi <= WITHIN:
        return f"within {100 * WITHIN:.0f} % of bf16: {span}"
    if lo > WITHIN or hi < -WITHIN:
        return f"more than {100 * WITHIN:.0f} % from bf16: {span}"
    return f"not shown within {100 * WITHIN:.0f} % of bf16: {span}"


@quoted_block("smoke-bases")
def smoke_bases(published: Path) -> str:
    """The spread of the per-seed base models the smoke runs start from."""
    bases = published_table(published, "smoke", "base_models")
    acc, loss = bases["acc/test_greedy"], bases["loss/final"]
    return (
        f"{len(bases)} base models (one per seed): greedy test accuracy {num(acc.min())}–{num(acc.max())}, "
        f"final SFT loss {num(loss.min(), 3)}–{num(loss.max(), 3)} (`tables/base_models.csv`)."
    )


@quoted_block("smoke-unpinned")
def smoke_unpinned(published: Path) -> str:
    """How far a run on another kernel path lands: the smoke tier rerun unpinned (`numerics: fast`,
    MKL's generic branch) against the published, pinned one, within the bands of `fp8rl check`, and
    the same verdicts computed on its own tables."""
    from fp8rl.report.bands import check

    other = published / "smoke_unpinned"
    if not (other / "tables" / "comparison.csv").is_file():
        raise QuoteError(f"{other}/tables/comparison.csv: not published")
    lines, failures = check(str(other), str(published / "smoke"))
    checked = sum(1 for line in lines if line.startswith(("ok ", "OUT ")))
    out = [
        f"- {checked - len(failures)} of {checked} per-cell metrics of the unpinned run lie inside the "
        "published run's 95 % intervals (`fp8rl check`); outside: "
        + ("; ".join(f.replace(" left its band:", ":") for f in failures) or "none")
        + ".",
        "- The same verdicts on the unpinned run's own tables:",
    ]
    verdicts = smoke_verdicts_from(pd.read_csv(other / "tables" / "comparison.csv"))
    out += ["  " + v for v in verdicts.splitlines()]
    return "\n".join(out)


# The modules whose functions register quoted blocks (`@quoted_block(NAME)`, into quote_format.BLOCKS):
# importing them registers their blocks; a new block is one decorated function in one of them.
BLOCK_MODULES = (quotes_dag, quotes_heldout, quotes_learn, quotes_longform, quotes_mechanism, quotes_numerics,
                 quotes_performance, real_stacks)  # fmt: skip


# ------------------------------------------------------------------------------------------ files


def render(text: str, published: Path, source: str = "") -> str:
    """`text` with every quoted block regenerated from the tables under `published`."""
    out, pos = [], 0
    for m in BEGIN.finditer(text):
        end = text.find(END, m.end())
        if end < 0:
            raise QuoteError(f"{source}: block {m['name']!r} has no closing {END}")
        if m["name"] not in BLOCKS:
            raise QuoteError(f"{source}: unknown block {m['name']!r}; known: {', '.join(sorted(BLOCKS))}")
        out += [text[pos : m.end()], BLOCKS[m["name"]](published).rstrip("\n") + "\n"]
        pos = end
    return "".join(out) + text[pos:]


def verify_publications(published: Path) -> None:
    """QuoteError naming the first publication under `published` (a folder with a `report.json` or a
    `tables/`) that is not what its manifest records (fp8rl.report.publish.verify_publication)."""
    from fp8rl.report.publish import PublishError, verify_publication

    for tier in (
        sorted(p for p in Path(published).iterdir() if p.is_dir()) if Path(published).is_dir() else []
    ):
        if (tier / "report.json").exists() or (tier / "tables").exists():
            try:
                verify_publication(tier)
            except PublishError as exc:
                raise QuoteError(str(exc)) from None


def stale_blocks(root: Path, published: Path) -> list[str]:
    """`file: block` for every quoted block whose text differs from what the tables give, after checking
    every publication against its manifest (`verify_publications`)."""
    verify_publications(published)
    stale = []
    for name in QUOTING_FILES:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        new = render(text, published, name)
        if new != text:
            old_blocks = {m["name"]: text[m.end() : text.find(END, m.end())] for m in BEGIN.finditer(text)}
            new_blocks = {m["name"]: new[m.end() : new.find(END, m.end())] for m in BEGIN.finditer(new)}
            stale += [f"{name}: {b}" for b in old_blocks if old_blocks[b] != new_blocks.get(b)]
    return stale
