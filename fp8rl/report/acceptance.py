"""A testbed's acceptance (the config's `acceptance` section, fp8rl.config.acceptance) read off its
finished bf16 runs.

For every run of the acceptance arm: step 1's `entropy` and `resp_len/mean` (metrics.jsonl), whether a
detector flagged it (summary.json's `divergence`), and the rise of the held-out endpoint from its base
(`base/.../eval/heldout.json`) to its final checkpoint (`eval/heldout.json`), both scored with the bf16
sampler (fp8rl.engine.heldout). Runs of one base are averaged first (the base is the unit); the rise's
two-sided t-interval is taken over the bases. `judge` returns every figure and the list of criteria
missed (empty: accepted); a run that has not finished, or has no held-out score yet, is counted as
missing, never as passing. `check_acceptance` reads the records from the run folders (the command line
below); `acceptance_from_report` from what `fp8rl report` has loaded, for the report's `acceptance`
table (`acceptance_table`, `acceptance_notes`).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig, arm_cell
from fp8rl.report.endpoints import base_folder
from fp8rl.report.load import RunSet
from fp8rl.run_files import RunDir, runs_dir
from fp8rl.stats.intervals import t_interval
from fp8rl.vocabulary import RESP_LEN_MEAN


def _heldout(path: Path, metric: str) -> float | None:
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    for r in doc.get("results", []):
        if r.get("metric") == metric:
            return float(r["value"])
    return None


def _first_step(run: RunDir) -> dict:
    if not run.metrics.exists():
        return {}
    with open(run.metrics) as fh:
        line = fh.readline()
    return json.loads(line) if line.strip() else {}


def _arm_specs(cfg: ExperimentConfig) -> list:
    a = cfg.acceptance
    if a is None:
        raise ValueError("acceptance: not set in this config")
    specs = [s for s in cfg.runs() if arm_cell(a.arm, s.run_id)]
    if not specs:
        raise ValueError(f"acceptance.arm: {a.arm!r} is no cell of the matrix (see `fp8rl matrix`)")
    return specs


def _flag(divergence: dict) -> str:
    step = divergence.get("step")
    if isinstance(step, int | float) and not math.isnan(step):
        return f"{divergence.get('kind')} at step {step:g}"
    return str(divergence.get("kind", divergence))


def judge(cfg: ExperimentConfig, runs: list[dict]) -> dict:
    """Every figure of the acceptance and `missed`, the criteria not met, from one record per run of the
    arm: `run_id`, `base`, `finished`, `divergence` (None or {kind, step}), `entropy_step1`,
    `resp_len_step1`, `base_endpoint`, `final_endpoint` (None: not there). The runs' rises are averaged
    per base first (the base is the unit)."""
    a = cfg.acceptance
    rises_by_base: dict[str, list[float]] = {}
    for r in runs:
        start, end = r["base_endpoint"], r["final_endpoint"]
        r["rise"] = None if start is None or end is None else end - start
        if r["rise"] is not None:
            rises_by_base.setdefault(r["base"], []).append(r["rise"])
    per_base = [statistics.fmean(v) for v in rises_by_base.values()]
    rise = t_interval(per_base, a.confidence)
    mean, low, high = rise.estimate, rise.low, rise.high
    missed = []
    if len(per_base) < a.min_bases:
        missed.append(f"bases with a held-out rise: {len(per_base)} < acceptance.min_bases {a.min_bases}")
    if per_base and not mean >= a.min_rise:  # no base: the line above says it all
        missed.append(f"mean rise {mean:.3f} < acceptance.min_rise {a.min_rise}")
    if per_base and not low > 0:
        missed.append(f"the {a.confidence:.0%} interval of the rise starts at {low:.3f}, not above 0")
    for r in runs:
        if not r["finished"]:
            missed.append(f"{r['run_id']}: not finished")
            if r["entropy_step1"] is None:  # no step yet: nothing else to judge
                continue
        if r["entropy_step1"] is None or r["entropy_step1"] < a.min_start_entropy:
            missed.append(f"{r['run_id']}: entropy at step 1 {r['entropy_step1']} < {a.min_start_entropy}")
        if r["resp_len_step1"] is None or r["resp_len_step1"] < a.min_response_tokens:
            missed.append(
                f"{r['run_id']}: response length at step 1 {r['resp_len_step1']} < {a.min_response_tokens}"
            )
        if a.no_divergence and r["divergence"]:
            missed.append(f"{r['run_id']}: flagged ({_flag(r['divergence'])})")
    return {"endpoint": a.endpoint, "runs": runs, "bases": len(per_base), "mean_rise": mean,
            "interval": [low, high], "confidence": a.confidence, "missed": missed}  # fmt: skip


def check_acceptance(cfg: ExperimentConfig) -> dict:
    """`judge` on the arm's run folders (module docstring). ValueError when the config has no
    `acceptance` section or its arm names no run of the matrix."""
    specs = _arm_specs(cfg)
    tier = Path(cfg.results_dir) / cfg.tier
    metric = cfg.acceptance.endpoint.removeprefix("heldout/")
    runs = []
    for spec in specs:
        run = RunDir.of(runs_dir(cfg.results_dir, cfg.tier), spec.run_id)
        base = base_folder(cfg, spec)  # a pretrained model is its own one base, scored under its name
        first = _first_step(run)
        summary = json.loads(run.summary.read_text()) if run.summary.is_file() else None
        runs.append(
            {"run_id": spec.run_id, "base": base, "finished": summary is not None,
             "divergence": (summary or {}).get("divergence"), "entropy_step1": first.get("entropy"),
             "resp_len_step1": first.get(RESP_LEN_MEAN),
             "base_endpoint": _heldout(tier / "base" / base / "eval" / "heldout.json", metric),
             "final_endpoint": _heldout(run.eval_file("heldout"), metric)}
        )  # fmt: skip
    return judge(cfg, runs)


def _number(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def acceptance_from_report(cfg: ExperimentConfig, endpoints: pd.DataFrame, runset: RunSet) -> dict:
    """`judge` on what a report has loaded: the per-run endpoints (status, first divergence, step 1's
    entropy, the held-out scores of each run and its base) and step 1's response length from the runs'
    metrics; a run not in the endpoints has not finished."""
    metric = cfg.acceptance.endpoint.removeprefix("heldout/")
    rows = endpoints.set_index("run_id") if len(endpoints) else pd.DataFrame()
    resp = runset.metric("train", RESP_LEN_MEAN)
    resp1 = dict(
        zip(resp.loc[resp["step"] == 1, "run_id"], resp.loc[resp["step"] == 1, "value"], strict=True)
    )
    runs = []
    for spec in _arm_specs(cfg):
        r = rows.loc[spec.run_id] if spec.run_id in rows.index else None
        finished = r is not None and r["status"] in ("ok", "diverged")
        diverged = finished and r["status"] == "diverged"
        runs.append(
            {"run_id": spec.run_id, "base": cfg.base_of(spec.model, spec.seed), "finished": finished,
             "divergence": {"kind": r["div_kind"], "step": _number(r["div_step"])} if diverged else None,
             "entropy_step1": _number(r["entropy_step1"]) if finished else None,
             "resp_len_step1": _number(resp1.get(spec.run_id)),
             "base_endpoint": _number(r[f"base_heldout_{metric}"]) if finished else None,
             "final_endpoint": _number(r[f"heldout/{metric}"]) if finished else None}
        )  # fmt: skip
    return judge(cfg, runs)


COLUMNS = ["run_id", "base", "finished", "flagged", "entropy_step1", "resp_len_step1", "base_endpoint",
           "final_endpoint", "rise", "low", "high"]  # fmt: skip


def acceptance_table(result: dict) -> pd.DataFrame:
    """One row per run of the arm, then a row `mean over N bases` with the rise's interval."""
    rows = [{"run_id": r["run_id"], "base": r["base"], "finished": r["finished"],
             "flagged": _flag(r["divergence"]) if r["divergence"] else "",
             **{k: r[k] for k in COLUMNS[4:9]}} for r in result["runs"]]  # fmt: skip
    low, high = result["interval"]
    rows.append({"run_id": f"mean over {result['bases']} bases", "rise": result["mean_rise"], "low": low,
                 "high": high})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def acceptance_from_table(cfg: ExperimentConfig, table: pd.DataFrame) -> dict:
    """`judge` again on a written `acceptance.csv` (its run rows; the mean row is recomputed), so that a
    page read from the tables alone (SUMMARY.md) gives the report's verdict."""
    runs = []
    for r in table[table["base"].notna()].to_dict("records"):
        flagged = r["flagged"] if isinstance(r["flagged"], str) and r["flagged"] else None
        runs.append(
            {"run_id": r["run_id"], "base": r["base"], "finished": bool(r["finished"]),
             "divergence": {"kind": flagged} if flagged else None,
             **{k: _number(r[k]) for k in COLUMNS[4:8]}}
        )  # fmt: skip
    return judge(cfg, runs)


def verdict_line(result: dict) -> str:
    """`**Accepted**: ...` or `**Not accepted**: ` and the criteria missed."""
    if not result["missed"]:
        return "**Accepted**: every criterion is met."
    return "**Not accepted**: " + "; ".join(result["missed"]) + "."


def acceptance_lines(cfg: ExperimentConfig, table: pd.DataFrame) -> list[str]:
    """SUMMARY.md's acceptance: the mean held-out rise over bases with its interval, each base's rise,
    the criteria and the verdict, from `acceptance.csv` (`acceptance_from_table`)."""
    from fp8rl.report.formats import num

    a, result = cfg.acceptance, acceptance_from_table(cfg, table)
    low, high = result["interval"]
    rises = ", ".join(num(r["rise"], 3, sign=True) for r in result["runs"] if r["rise"] is not None)
    return [
        f"- `{a.endpoint}` from each base to its run's final checkpoint (the bf16 sampler on held-out "
        f"prompts), mean rise over {result['bases']} bases: {num(result['mean_rise'], 3)} "
        f"[{num(low, 3)}, {num(high, 3)}] ({a.confidence:.0%} t-interval); per run: {rises or 'none yet'}.",
        f"- Criteria (the config's `acceptance`, recorded before any FP8 run): a mean rise of at least "
        f"{a.min_rise:g} over at least {a.min_bases} bases with the interval above 0, entropy at step 1 of "
        f"at least {a.min_start_entropy:g} nats per token, responses of at least {a.min_response_tokens:g} "
        "tokens" + (", no run flagged by a detector." if a.no_divergence else "."),
        f"- {verdict_line(result)}",
    ]


def acceptance_notes(cfg: ExperimentConfig, result: dict) -> list[str]:
    a = cfg.acceptance
    return [
        f"The testbed's acceptance on its bf16 runs alone (the config's `acceptance`, recorded before any "
        f"FP8 run): `rise` is each run's final checkpoint minus its base on `{a.endpoint}` (the bf16 "
        f"sampler on held-out prompts); the last row averages the runs of each base first and gives the "
        f"two-sided {a.confidence:.0%} t-interval over the bases.",
        f"Criteria: a mean rise of at least {a.min_rise:g} over at least {a.min_bases} bases with the "
        f"interval above 0; at step 1 an entropy of at least {a.min_start_entropy:g} nats per token and "
        f"responses of at least {a.min_response_tokens:g} tokens in every run; "
        + ("no run flagged by a detector." if a.no_divergence else "flagged runs allowed."),
        verdict_line(result),
    ]
