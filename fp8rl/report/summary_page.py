"""`SUMMARY.md`: one page per tier that says what ran, whether the bf16 control learned, what the tier
found (with intervals) and what it does not show, written by `fp8rl report` from the tables it has just
written and copied by `fp8rl publish` with them (report.json hashes it like every other output).

Every figure on the page is read from the tier's own tables (`acceptance.csv`, `control.csv`, `planned.csv`,
`arms.csv`, `study_survival.csv`, `failure_search.csv`, `stability.csv`, `comparison.csv`, `runs.csv`); nothing is typed by hand, so the page
of a publication says what its tables say. The control, the planned contrasts and the divergences are
said by fp8rl.report.findings, in the words of the quoted blocks of README.md and docs/. The caveats are generated from the same data: a void comparison, one shared
base, single seeds, CPU emulation of FP8 on a small scratch model. A study tier's page also ranks its
arms by the endpoint and shows its figures (`ARMS_FIGURES`) where its report drew the endpoint figure.

A pipeline check (`pipeline_check`: a tier without a pre-registered study or FP8 conditions, the smoke
tier's kind) leads with what it does show, the paired excess clipping of each FP8 variant against its
own BF16 shadow (comparison.csv), and says that its few steps cannot show learning, where a flat
control is expected, instead of opening on a void comparison.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fp8rl.report.base_models import numerics_line
from fp8rl.report.control import any_ran, never_ran
from fp8rl.report.findings import control_lines, planned_lines, stability_lines, survival_lines
from fp8rl.report.formats import SIGNIFICANCE_NOTE, ci, markdown_table, num, plural, pp
from fp8rl.report.paths import noise_axis
from fp8rl.vocabulary import REFERENCE_VARIANT, VARIANT_SPECS

# The tables the page links to, in reading order, with what each answers.
TABLE_GUIDE = (
    ("acceptance", "the testbed's acceptance on its bf16 runs (held-out rise per base, with its interval)"),
    ("control", "did the bf16 control learn (reward rise per base, with its interval)"),
    ("planned", "the pre-registered contrasts, their test, {adjusted} p and power"),
    ("exploratory", "contrasts outside the plan (no claim is drawn from them)"),
    ("secondary", "the study re-read on the held-out bf16 endpoint (secondary, not pre-registered)"),
    ("mismatch", "every FP8 setting's mismatch in the units real stacks report"),
    (
        "study_survival",
        "time to divergence per arm: runs diverged (exact intervals), Kaplan-Meier median step",
    ),
    ("stability", "divergences per variant and dose, with exact intervals"),
    ("breaking_dose", "the dose at which half the runs diverge (logistic fit)"),
    ("failure_search", "the failure search: its rule read per setting, and the decision"),
    ("failure_text", "what every diverged run sampled at step 1 and where its detector fired"),
    ("mechanism", "excess clipping of FP8 over its BF16 shadow, per FP8 condition"),
    ("comparison", "every variant's eval scores, rewards, clipping and mismatch against bf16"),
    ("endpoints", "one row per run: the endpoints every test above is computed from"),
    ("base_models", "the SFT bases the runs start from"),
    ("runs", "every run's status and divergence reason"),
    ("throughput", "seconds per step and phase"),
)


def pipeline_check(cfg) -> bool:
    """Whether `cfg`'s tier checks the pipeline rather than answering a question: no pre-registered
    study and no FP8 conditions (the smoke tier's kind)."""
    return cfg.study is None and not cfg.matrix.conditions


PIPELINE = (
    "**What this tier is**: a check of the whole pipeline (data, SFT bases, training, evals, report) "
    "end to end. {steps} steps x {prompts} prompts cannot show learning; what they do show is the "
    "mechanism on paired tokens, below."
)
ACCEPTANCE_ONLY = (
    "**The question**: does the testbed's bf16 control pass the acceptance recorded in its config before "
    "any FP8 run? No FP8 run is in this tier yet."
)
PAIRED_LEAD = (
    "Each FP8 run re-scores its own tokens with quantization switched off (the BF16 shadow pass). Excess "
    "clipping is the share of its negative-advantage tokens clipped under the FP8 ratio and not under "
    "BF16's, less the reverse: the gradients FP8 zeroes that BF16 would keep (mean over steps, then "
    "seeds; 95 % interval over seeds; `tables/comparison.md`, paired section). FP8 and BF16 are compared "
    "on the same tokens, so this needs no learning from the control."
)


def _read(tables: Path, name: str) -> pd.DataFrame | None:
    path = tables / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else None


def _what_ran(cfg, runs: pd.DataFrame, bases: pd.DataFrame | None, numerics: dict) -> list[str]:
    m, s = cfg.matrix, cfg.schedule
    status = ", ".join(f"{n} {k}" for k, n in runs["status"].value_counts().sort_index().items())
    ran = {r.condition for r in cfg.runs()}  # a condition no variant of the matrix runs yet is left out
    conditions = ", ".join(c.name for c in m.conditions if c.name in ran) or "none"
    n_bases = 0 if bases is None else len(bases)
    per_base = "several RL seeds on each" if cfg.sft.bases is not None else "one per seed"
    base = f"{n_bases} SFT bases ({per_base})" if n_bases > 1 else "one base shared by every run"
    return [
        f"- {len(runs)} runs ({status}): algorithms {', '.join(m.algorithms)}; models "
        f"{', '.join(m.models)}; variants {', '.join(m.variants)}; FP8 conditions {conditions}; seeds "
        f"{', '.join(str(x) for x in m.seeds)}; {base}.",
        f"- Each run: {s.steps} steps x {s.prompts_per_step} prompts; task {cfg.task.name} "
        f"({', '.join(cfg.task.levels)}).",
        f"- Numerics: {numerics_line(numerics)}.",
    ]


def _excess_clip(comparison: pd.DataFrame | None) -> list[str]:
    """One line per FP8 row of `comparison` that measured the paired excess clipping."""
    if comparison is None or "excess_clip" not in comparison:
        return []
    lines = [
        f"- {r['algo']}/{r['variant']}: {pp(*ci(r, 'excess_clip'))} ({plural(int(r['excess_clip n']), 'seed')})"
        for r in comparison.to_dict("records")
        if pd.notna(r["excess_clip"])
    ]
    return [*lines, "", SIGNIFICANCE_NOTE] if lines else []


def _too_short(cfg) -> str:
    s = cfg.schedule
    return (
        f"- {s.steps} steps cannot show learning, so a control that did not learn is expected here: the reward "
        "and eval comparisons with bf16 are reported, not interpreted (the tables mark them void); the paired "
        "excess clipping above does not rest on them."
    )


MAX_LISTED_REWARDS = 10  # more cells than this: a table, one row per setting and a column per variant


def _rewards(comparison: pd.DataFrame | None) -> list[str]:
    """Final reward per variant (mean over seeds), for tiers without a pre-registered study: a list,
    or a table (one row per algorithm, model, granularity and condition the tier varies; one column
    per variant) when there are more than `MAX_LISTED_REWARDS` cells."""
    if comparison is None or comparison.empty or "final_reward" not in comparison:
        return []
    what = "Final sampled reward (last step, mean over seeds; no interval)"
    if len(comparison) <= MAX_LISTED_REWARDS:
        cells = []
        for r in comparison.to_dict("records"):
            # bf16's condition is blank in a conditions matrix's table (read back as NaN), "none" elsewhere
            name = "/".join(
                str(r[k])
                for k in ("algo", "condition", "variant")
                if k in r and pd.notna(r[k]) and r[k] != "none"
            )
            cells.append(f"{name} {num(r['final_reward'], 3)}")
        return [f"- {what}: " + "; ".join(cells) + "."]
    # the settings the tier varies (bf16's "none" granularity and condition are not a setting)
    keys = [
        k for k in ("algo", "model", "granularity", "condition")
        if k in comparison and comparison.loc[comparison[k].astype(str) != "none", k].nunique() > 1
    ] or ["algo"]  # fmt: skip
    wide = comparison.pivot_table(
        index=keys, columns="variant", values="final_reward", aggfunc="first", sort=False
    )
    # rows that hold only the variants every row repeats (bf16, fp16: no FP8 setting) say nothing new
    present = wide.notna()
    new = (present & ~present.all(axis=0)).any(axis=1)
    wide = wide[new] if new.any() else wide
    variants = list(dict.fromkeys(comparison["variant"]))
    rows = []
    for idx, r in wide.iterrows():
        idx = idx if isinstance(idx, tuple) else (idx,)
        rows.append([*map(str, idx), *(num(r[v], 3) if pd.notna(r.get(v)) else "" for v in variants)])
    return [f"- {what}:", "", *markdown_table([*keys, *variants], rows).splitlines(), ""]


def _secondary(table: pd.DataFrame | None, multiplicity: str) -> list[str]:
    """The held-out bf16 endpoint's re-read (fp8rl.report.secondary), labelled secondary."""
    if table is None or table.empty:
        return []
    from fp8rl.report.secondary import secondary_lines

    head = (
        "- Secondary, not pre-registered (tables/secondary.md): the same contrasts on each run's final "
        "checkpoint sampled with the bf16 sampler on held-out prompts, so the FP8 sampler's own noise is "
        "out of them; no decision is taken on these:"
    )
    return [head, *("  " + line for line in secondary_lines(table, multiplicity))]


def emulated(cfg, runs: pd.DataFrame | None) -> bool:
    """Whether the tier's FP8 ran emulated on CPU: a run recorded it (runs.csv's `execution`), or no run
    recorded how it executed and the reference trainer (which emulates on CPU) runs the tier. Runs on the
    verl path record `hardware` (FP8 through Transformer Engine and vLLM on GPUs)."""
    execution = (
        runs["execution"].astype(str) if runs is not None and "execution" in runs else pd.Series(dtype=str)
    )
    recorded = execution[execution.isin(("emulated", "hardware"))]  # an empty cell reads as NaN
    return bool((recorded == "emulated").any()) if len(recorded) else cfg.backend == "reference"


def _caveats(
    cfg,
    control: pd.DataFrame | None,
    void: bool,
    bases: pd.DataFrame | None,
    runs: pd.DataFrame | None = None,
) -> list[str]:
    out = []
    unchecked = never_ran(control)
    if void and not unchecked and pipeline_check(cfg):
        out.append(
            f"- Learning, or FP8 against bf16 on reward: {cfg.schedule.steps} steps x "
            f"{cfg.schedule.prompts_per_step} prompts cannot show it (the control did not learn), so no reward or "
            "eval comparison in these tables is interpreted."
        )
    elif void:
        planned = sum(r.variant == "bf16" for r in cfg.runs())
        why = (
            "the bf16 control of some groups has no finished run (the control table names them)"
            if unchecked and any_ran(control)
            else f"no bf16 control run finished (of the {planned} the matrix plans)"
            if unchecked
            else "the control did not learn"
        )
        out.append(
            f"- No conclusion about FP8 against bf16: {why}, so every comparison in "
            "these tables is void (reported, not interpreted)."
        )
    pretrained = [m.name for m in cfg.models if m.source != "scratch"]
    if pretrained and len(pretrained) == len(cfg.models):  # a pretrained model is its own one base
        out.append(
            f"- Each model's runs start from its one pretrained checkpoint ({', '.join(pretrained)}): results "
            "are conditional on it, and seeds are the unit."
        )
    elif bases is None or len(bases) <= 1:
        out.append("- Every run starts from one base model: results are conditional on that base.")
    if len(cfg.matrix.seeds) < 2:
        out.append("- One seed per cell: no interval over seeds, so no difference here is tested.")
    ran = control[control["n"] > 0] if control is not None and not control.empty else None
    n = ran["n"].min() if ran is not None and not ran.empty else math.nan  # groups with no run: said above
    if not math.isnan(n) and 1 <= n < 3:
        out.append(f"- The control is judged over {int(n)} unit(s): too few for a useful interval.")
    if bases is not None and "stop_met" in bases:
        missed = bases[bases["stop_met"].astype(str) == "False"]
        for r in missed.to_dict("records"):
            seed = "" if pd.isna(r["seed"]) else f"/seed{int(r['seed'])}"
            out.append(
                f"- Base {r['model']}{seed} missed the SFT stop rule (sft.stop_at_accuracy) and ran to its "
                f"{int(r['steps'])}-step cap (sampled test accuracy {num(r['acc/test_sampled'])}); it was kept "
                "(sft.on_unmet_stop: keep), so its runs start from a weaker base than the others."
            )
    if not emulated(cfg, runs):
        return out
    # a run under a noise multiplier: a dose, or the scale searched for a target KL
    ran = {r.condition for r in cfg.runs()}
    doses = any(c.name in ran and {"noise_scale", "target_kl"} & set(c.fp8) for c in cfg.matrix.conditions)
    out.append(
        "- FP8 is emulated on CPU on a small model"
        + (
            ", with a noise multiplier on every quantized operand that does not stand in for larger "
            "models (real recipes scale per block, so element error does not grow with width; tables/"
            "mismatch.md places each setting in the units real stacks report)"
            if doses
            else ""
        )
        + ": a direction in this setting, not a verdict on FP8 RL at scale."
    )
    return out


# The figures the arms section shows, in its order: the endpoint per arm, then (where drawn) the time to
# divergence per arm, the fraction diverged along the noise axis (a target-KL sweep's
# stability-vs-mismatch curve) and the held-out endpoint over training (a tier that keeps checkpoints).
ARMS_FIGURES = ("study_endpoint", "study_survival", "breaking_dose", "heldout_curve")
LEADERBOARD_LEAD = (
    "The arms ranked by the pre-registered endpoint (tables/arms.md), highest first: a rank is not a test "
    "(the planned contrasts above are); `diverged`: runs flagged by a detector (tables/study_survival.md)."
)


def _arms_section(tables: Path, axis: str | None, survival: pd.DataFrame | None) -> list[str]:
    """The leaderboard and the study's figures, where the report drew the endpoint figure beside these
    tables (`plots/study_endpoint.png`); a publication made before that figure existed has none, and its
    page stays as it was written. `axis`: the noise axis the breaking-dose figure runs along; `survival`:
    study_survival.csv, as the page already read it."""
    plots = tables.parent / "plots"
    arms = _read(tables, "arms")
    if arms is None or not (plots / "study_endpoint.png").is_file():
        return []
    from fp8rl.report.figures import caption
    from fp8rl.report.study_endpoint import leaderboard

    figures = [f"![{name}](plots/{name}.png)\n\n*{caption(name, axis)}.*" for name in ARMS_FIGURES
               if (plots / f"{name}.png").is_file()]  # fmt: skip
    return [
        "## The arms\n\n" + LEADERBOARD_LEAD + "\n\n" + leaderboard(arms, survival),
        *figures,
    ]


SEARCH_LEAD = (
    "Along the mismatch axis, each setting's {decisive} runs judged by the rule the config registered "
    "before the runs (tables/failure_search.md): a setting fails when at least {frac:g} of its runs "
    "diverged{heldout}."
)


def _search_section(cfg, tables: Path) -> list[str]:
    """A failure search's decision and its rows per setting (failure_search.csv), where the report wrote
    them."""
    table = _read(tables, "failure_search")
    if cfg.failure_search is None or table is None:
        return []
    from fp8rl.report.failure_search import search_markdown

    fs = cfg.failure_search
    heldout = (
        f", or its planned held-out contrast against {fs.reference} is significant and below 0"
        if fs.heldout_loss
        else ""
    )
    lead = SEARCH_LEAD.format(decisive=fs.decisive, frac=fs.min_diverged_frac, heldout=heldout)
    return ["## The failure search\n\n" + lead + "\n\n" + search_markdown(table)[1]]


# the planned table's p, by the study's `multiplicity` (fp8rl.report.planned)
ADJUSTED_P = {"holm": "Holm-adjusted", "fixed_sequence": "fixed-sequence-adjusted", "none": "unadjusted"}


def _adjusted(cfg) -> str:
    """How the planned table's p is adjusted (`ADJUSTED_P`; Holm for a tier without a study)."""
    return ADJUSTED_P[cfg.study.multiplicity if cfg.study is not None else "holm"]


def summary_page(cfg, tables: Path, void: bool, numerics: dict) -> str:
    """The page's markdown, from the tables already written under `tables`."""
    names = ("runs", "control", "planned", "study_survival", "stability", "comparison", "secondary")
    read = {name: _read(tables, name) for name in names}
    bases = _read(tables, "base_models")
    questions = [p.question for p in cfg.study.planned] if cfg.study is not None else []
    ask = (
        "**The questions** (pre-registered in the config's `study`):\n\n"
        + "\n".join(f"- {q}" for q in questions)
        if questions
        else f"**The question**: how the FP8 variants compare with {REFERENCE_VARIANT} in this tier."
    )
    findings = (
        planned_lines(
            read["planned"],
            void,
            never_ran(read["control"]),
        )
        + survival_lines(read["study_survival"])
        + stability_lines(read["stability"], noise_axis(cfg))
        + _secondary(read["secondary"], cfg.study.multiplicity if cfg.study is not None else "holm")
    )
    if read["planned"] is None:
        findings += _rewards(read["comparison"])
    pipeline = pipeline_check(cfg) and bool(excess := _excess_clip(read["comparison"]))
    if pipeline:
        s = cfg.schedule
        ask = PIPELINE.format(steps=s.steps, prompts=s.prompts_per_step)
    accepted = []
    if cfg.acceptance is not None and (table := _read(tables, "acceptance")) is not None:
        from fp8rl.report.acceptance import acceptance_lines

        accepted = ["## Does the testbed pass its acceptance?\n\n" + "\n".join(acceptance_lines(cfg, table))]
        if not any(VARIANT_SPECS[v].fp8 for v in cfg.matrix.variants):
            ask = ACCEPTANCE_ONLY
    guide = [
        f"- [{name}](tables/{name}.md): {what.format(adjusted=_adjusted(cfg))}"
        for name, what in TABLE_GUIDE
        if (tables / f"{name}.md").is_file()
    ]
    parts = [
        f"# Tier {cfg.tier}: summary",
        "Written by `fp8rl report` from this folder's tables; every figure below is read from them.",
        ask,
        *(
            ["## What it shows: paired excess clipping\n\n" + PAIRED_LEAD + "\n\n" + "\n".join(excess)]
            if pipeline
            else []
        ),
        "## What ran\n\n" + "\n".join(_what_ran(cfg, read["runs"], bases, numerics)),
        *accepted,
        "## Did the bf16 control learn?\n\n"
        + "\n".join(control_lines(read["control"], void, _too_short(cfg) if pipeline else None)),
        ("## Rewards (reported, not compared)" if pipeline else "## Findings")
        + "\n\n"
        + ("\n".join(findings) or "- No contrast or divergence table in this tier."),
        *_search_section(cfg, tables),
        *_arms_section(tables, noise_axis(cfg), read["study_survival"]),
        "## What it does not show\n\n" + "\n".join(_caveats(cfg, read["control"], void, bases, read["runs"])),
        "## Tables\n\n"
        + "\n".join(guide)
        + "\n\nFigures are in `plots/`, everything together in `report.html`.",
    ]
    return "\n\n".join(parts) + "\n"
