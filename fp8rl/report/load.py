"""Load every run of a tier into tidy pandas frames, with each run's status.

For every cell of the config's matrix, `load_tier` reads its run directory (fp8rl.run_files,
docs/interfaces.md): `summary.json`, `metrics.jsonl`, `throughput.json`, `eval/<suite>.json` of every
eval suite (fp8rl.evaluate.suites), and `ratio_hist.json` where an FP8 run wrote one. The result is a
`RunSet`:

- `runs`: one row per matrix cell: the run id columns, `status` (`ok` | `diverged` | `failed` |
  `missing`), `reason`, `step`, `steps_planned`, `malformed_lines`, and the throughput labels
  (`emulated`, `device`, `fp8_backend`). A cell with no readable `summary.json` is `missing`, with the
  reason; so is a run whose files contradict each other (a `summary.json` of the wrong types, or
  `metrics.jsonl` cut short, with a step twice or out of order, or not ending where the summary says:
  fp8rl.run_checks), or whose files name another run id (a run directory copied from another cell:
  `owner_problems`), whose numbers therefore never enter a mean. A run is never dropped.
- `values`: the tidy frame: run id columns + `status`, `source`, `step`, `metric`, `value`, `stderr`.
  `source` is `train` (one row per metric per step of `metrics.jsonl`; `step` set), an eval suite's
  name (`lm_eval`, `agent`, `heldout`, ...; `metric` = `{task}/{metric}`, `stderr` where given) or
  `throughput` (`step_time_s`, `peak_mem_mb`, `{phase}/seconds`, `{phase}/tokens`, `{phase}/tokens_per_s`).
- `problems`: one line per piece of data that could not be used, naming the file (and line). An `ok`
  or `diverged` run without the eval result file of a suite the config turns on (`enabled_suites`) is
  one (its seed is absent from that suite's means), and so is an eval result whose `checkpoint_digest`
  is not the run's checkpoint's (it scored another checkpoint, e.g. before a retrain), or whose run's
  checkpoint no longer has the files its `state.json` records (damaged since: fp8rl.checkpoint_files):
  its scores are left out, and every task an eval job recorded as `failed` (its harness crashed on the
  job's last attempt).
- `ratio_hists`: run id → its FP8 vs BF16-shadow ratio histogram (`fp8rl.rl.ratio_hist`).

Malformed `metrics.jsonl` lines are **skipped and counted**, not fatal: a line that is not UTF-8 or not
JSON (nesting too deep, a number too long to parse included), not an object, lacks an integer `step` (or
has one past `STEPS_MAX`), or holds a value that is not a number (or one no float holds) is left out, counted in the run's
`malformed_lines`, and listed in `problems` as `path:line: why`; the report shows both. A report is the
DAG's last rule and must still describe the runs that are fine: a run file that is not UTF-8, not JSON
or holds a value of the wrong type is a named problem, never a crash. Metric values may be NaN or ±inf
(`NaN`/`Infinity` tokens, as a diverging run logs them; in a run that says `ok`, a named problem:
`nonfinite_problems`); `null` means absent.
"""

from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fp8rl.checkpoint_files import CheckpointError, scored_another_checkpoint, verify_files
from fp8rl.config import STEPS_MAX, ExperimentConfig
from fp8rl.config.runs import RunSpec
from fp8rl.evaluate.suites import enabled_suites
from fp8rl.io import is_number, loads_json
from fp8rl.report.methods import is_proportion
from fp8rl.rl.ratio_hist import KEYS as HIST_KEYS
from fp8rl.run_checks import history_problems, nonfinite_problems, owner_problems, summary_problems
from fp8rl.run_files import EVAL_FILES, RunDir
from fp8rl.run_files import runs_dir as tier_runs_dir
from fp8rl.run_records import STATUSES as RUN_STATUSES

# `condition` is None in matrices without FP8 conditions (fp8rl.config.runs.RunSpec)
ID_COLUMNS = ["run_id", "algo", "model", "variant", "granularity", "condition", "seed"]
STATUSES = (*RUN_STATUSES, "missing")
VALUE_COLUMNS = [*ID_COLUMNS, "status", "source", "step", "metric", "value", "stderr"]


@dataclass
class RunSet:
    """All runs of one tier: status per run, the tidy values, and what could not be read."""

    runs: pd.DataFrame
    values: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    ratio_hists: dict[str, dict] = field(default_factory=dict)  # run id -> its ratio_hist.json

    def metric(self, source: str, metric: str | None = None) -> pd.DataFrame:
        """Rows of `values` from one source (and one metric)."""
        v = self.values[self.values["source"] == source]
        return v if metric is None else v[v["metric"] == metric]


def read_metrics(path: Path) -> tuple[list[dict], list[str]]:
    """Parse metrics.jsonl, skipping malformed lines; returns (rows, problems with file:line)."""
    rows: list[dict] = []
    problems: list[str] = []
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [f"{path}: unreadable ({exc.strerror or exc}); file ignored"]
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = loads_json(raw)
        except UnicodeDecodeError:
            problems.append(f"{where}: not UTF-8 text (corrupt bytes); line skipped")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: malformed JSON ({exc.msg}, column {exc.colno}); line skipped")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: not a JSON object; line skipped")
            continue
        step = obj.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            problems.append(f"{where}: no integer 'step'; line skipped")
            continue
        if step > STEPS_MAX:
            shown = str(step) if step < 10**12 else f"{str(step)[:4]}... ({len(str(step))} digits)"
            problems.append(
                f"{where}: step {shown} is past the most steps a run takes ({STEPS_MAX}); line skipped"
            )
            continue
        bad = [k for k, v in obj.items() if v is not None and not is_number(v)]
        if bad:
            problems.append(f"{where}: non-numeric value for {', '.join(map(repr, bad))}; line skipped")
            continue
        rows.append({k: float(v) for k, v in obj.items() if v is not None and k != "step"} | {"step": step})
    return rows, problems


def _read_json(path: Path, problems: list[str]) -> dict | None:
    if not path.is_file():
        return None
    try:
        obj = loads_json(path.read_bytes())
    except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError or UnicodeDecodeError
        problems.append(f"{path}: unreadable JSON ({exc}); file ignored")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{path}: not a JSON object; file ignored")
        return None
    return obj


def _summary_status(run: RunDir, problems: list[str]) -> tuple[dict, dict | None]:
    """(status, reason, step, steps_planned from summary.json, the summary when it is usable): `missing`
    when there is none to trust."""
    if not run.root.is_dir():
        return {"status": "missing", "reason": "no run directory"}, None
    summary = _read_json(run.summary, problems)
    name = run.summary.name
    if summary is None:
        return {"status": "missing", "reason": f"no readable {name}"}, None
    if wrong := summary_problems(summary):
        problems += [f"{run.summary}: {w}; run counted as missing" for w in wrong]
        return {"status": "missing", "reason": f"{name}: {wrong[0]}"}, None
    row = {k: summary[k] for k in ("status", "reason", "step", "steps_planned")}
    deviations = summary.get("deviations") or []
    row["deviations"] = tuple(str(d) for d in deviations) if isinstance(deviations, list) else ()
    return row, summary


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with the checkpoint's files against its own `state.json` (fp8rl.checkpoint_files),
    or None: intact, or no record to check against."""
    try:
        verify_files(checkpoint)
    except CheckpointError as exc:
        return str(exc)
    return None


def _eval_values(
    path: Path, suite: str, problems: list[str], checkpoint: Path, damage: str | None = None
) -> list[dict]:
    """The scores of one eval result file; none (and a problem) when it scored another checkpoint or
    the run's checkpoint is damaged (`damage`: `checkpoint_damage`)."""
    obj = _read_json(path, problems)
    if obj is None:
        return []
    if damage is not None:
        problems.append(
            f"{path}: the run's checkpoint is damaged ({damage}); scores ignored, retrain the run"
        )
        return []
    if scored_another_checkpoint(obj, checkpoint):
        problems.append(
            f"{path}: scored another checkpoint than the run's {checkpoint} (checkpoint_digest differs: "
            "retrained since?); scores ignored, evaluate the run again"
        )
        return []
    out = []
    for f in obj.get("failed") or []:  # tasks whose harness crashed (`fp8rl eval --on-failure record`)
        tasks = ", ".join(map(str, f.get("tasks", []))) if isinstance(f, dict) else "?"
        reason = f.get("reason", "no reason given") if isinstance(f, dict) else str(f)
        problems.append(
            f"{path}: {suite} tasks {tasks} failed ({reason}); the run is absent from their means"
        )
    results = obj.get("results")
    if not isinstance(results, list):
        problems.append(f"{path}: 'results' is not a list; file ignored")
        return []
    keys = [
        f"{r['task']}/{r['metric']}" if isinstance(r, dict) and r.get("task") and r.get("metric") else None
        for r in results
    ]
    for i, res in enumerate(results):
        ok = keys[i] is not None and is_number(res.get("value"))
        if not ok:
            problems.append(f"{path}: results[{i}] lacks task/metric/numeric value; entry ignored")
            continue
        if why := _eval_entry_problem(res, keys[i], keys):
            problems.append(f"{path}: results[{i}] ({keys[i]}): {why}; entry ignored")
            continue
        stderr = res.get("stderr")
        out.append(
            {
                "source": suite,
                "metric": keys[i],
                "value": float(res["value"]),
                "stderr": float(stderr) if is_number(stderr) else math.nan,
            }
        )
    return out


def _eval_entry_problem(res: dict, key: str, keys: list[str | None]) -> str | None:
    """Why one eval score cannot enter a mean, or None: a value that is not finite, a proportion
    outside [0, 1], a score over no example (`n` < 1), a task/metric the file gives twice (which of
    them is the run's score is unknown, and both would count as two seeds), or a task or metric name
    that is not one line of printable text without `$` (tables take it as is, and matplotlib reads
    `$...$` in a label as mathtext)."""
    for part in ("task", "metric"):
        if not _printable_name(res[part]):
            return f"{part} {str(res[part])[:40]!r} is not a name (printable, no '$', at most {NAME_MAX} characters)"
    value, n = float(res["value"]), res.get("n")
    if not math.isfinite(value):
        return f"value {value} is not finite"
    if is_proportion(key) and not 0.0 <= value <= 1.0:
        return f"value {value} of a proportion is outside [0, 1]"
    if n is not None and (not is_number(n) or not n >= 1):
        return f"n = {n!r}: a score over no example"
    if keys.count(key) > 1:
        return f"given {keys.count(key)} times in the file"
    return None


NAME_MAX = 200  # characters of an eval task or metric name


def _printable_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= NAME_MAX
        and "$" not in name
        and not any(unicodedata.category(c).startswith(("C", "Z")) and c != " " for c in name)
    )


def _throughput(path: Path, problems: list[str]) -> tuple[dict, list[dict]]:
    """(labels for the runs frame, tidy throughput values)."""
    obj = _read_json(path, problems)
    if obj is None:
        return {}, []
    labels = {k: obj.get(k) for k in ("emulated", "device", "fp8_backend")}
    phases = obj.get("phases") or {}
    wrong = [k for k in ("device", "fp8_backend") if not isinstance(labels[k], str | None)]
    wrong += ["emulated"] if not isinstance(labels["emulated"], bool | None) else []
    wrong += ["phases"] if not isinstance(phases, dict) else []
    if wrong:
        problems.append(f"{path}: wrong type for {', '.join(map(repr, wrong))}; file ignored")
        return {}, []
    vals = [
        {"source": "throughput", "metric": k, "value": float(obj[k])}
        for k in ("step_time_s", "peak_mem_mb")
        if is_number(obj.get(k))
    ]
    for phase, d in phases.items():
        if not isinstance(d, dict):
            continue
        for k in ("seconds", "tokens", "tokens_per_s"):
            if is_number(d.get(k)):
                vals.append({"source": "throughput", "metric": f"{phase}/{k}", "value": float(d[k])})
    return labels, vals


def _hist_ok(hist: dict) -> bool:
    """`ratio_hist.json` has numeric `edges` and, per key, one numeric count per bucket (len(edges) + 1)."""
    edges, counts = hist.get("edges"), hist.get("counts")
    if not (isinstance(edges, list) and edges and all(is_number(e) for e in edges)):
        return False
    if not (isinstance(counts, dict) and all(k in counts for k in HIST_KEYS)):
        return False
    return all(
        isinstance(c, list) and len(c) == len(edges) + 1 and all(is_number(x) for x in c)
        for c in (counts[k] for k in HIST_KEYS)
    )


def load_run(
    spec: RunSpec, runs_dir: Path, suites: tuple[str, ...] = ()
) -> tuple[dict, pd.DataFrame, list[str]]:
    """One run directory → (its row of `runs`, its tidy values, its problems). `suites`: the eval suites
    the config asks for (a finished run without one's result file is a problem)."""
    run = RunDir.of(runs_dir, spec.run_id)
    problems: list[str] = []
    ids = {
        "run_id": spec.run_id,
        "algo": spec.algo,
        "model": spec.model,
        "variant": spec.variant,
        "granularity": spec.granularity,
        "condition": spec.condition,
        "seed": spec.seed,
    }
    status, summary = _summary_status(run, problems)
    row = ids | status | {"malformed_lines": 0}
    if row["status"] != "missing" and (foreign := owner_problems(run, spec.run_id)):
        was = row["status"]
        problems += [f"{f}; run ({was}) counted as missing (copied from another run?)" for f in foreign]
        row |= {"status": "missing", "reason": f"another run's files: {foreign[0]}"}
        summary = None
    frames: list[pd.DataFrame] = []

    rows, bad = read_metrics(run.metrics) if run.metrics.is_file() else ([], [])
    row["malformed_lines"] = len(bad)
    problems += bad
    if summary is not None and (contradictions := history_problems(summary, rows, len(bad))):
        was = row["status"]
        problems += [f"{run.root}: {c}; run ({was}) counted as missing" for c in contradictions]
        row |= {"status": "missing", "reason": f"inconsistent run files: {contradictions[0]}"}
    if summary is not None and row["status"] == "ok":
        problems += [f"{run.metrics}: {p}" for p in nonfinite_problems(summary, rows)]
    if rows:
        # long form straight from the lines: a logged NaN stays, an absent metric has no row
        items = [(r["step"], k, v) for r in rows for k, v in r.items() if k != "step"]
        long = pd.DataFrame(items, columns=["step", "metric", "value"])
        frames.append(long.assign(source="train", stderr=math.nan))

    other: list[dict] = []
    evaluated = any(run.eval_file(suite).is_file() for suite in EVAL_FILES)
    damage = checkpoint_damage(run.checkpoint) if evaluated else None
    for suite in EVAL_FILES:
        path = run.eval_file(suite)
        if path.exists() and not path.is_file():
            problems.append(f"{path}: not a file; the run ({row['status']}) is absent from the {suite} means")
        elif suite in suites and row["status"] in ("ok", "diverged") and not path.exists():
            problems.append(f"{path}: missing; the run ({row['status']}) is absent from the {suite} means")
        other += _eval_values(path, suite, problems, run.checkpoint, damage)
    labels, tp = _throughput(run.throughput, problems)
    row |= labels
    other += tp
    if other:
        frames.append(pd.DataFrame(other).assign(step=math.nan))

    values = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=VALUE_COLUMNS)
    values = values.assign(**ids, status=row["status"])
    if "stderr" not in values:
        values["stderr"] = math.nan
    return row, values[VALUE_COLUMNS], problems


def backend_mix_problems(runs: pd.DataFrame) -> list[str]:
    """One problem where the tier's FP8 runs took different GEMM paths (`fp8_backend` of throughput.json:
    `emulated` or `scaled_mm`, chosen by the device or forced with FP8_BACKEND_ENV, which each run's
    provenance records): the two paths give different numbers, so the runs are not one experiment."""
    from fp8rl.vocabulary import FP8_BACKEND_ENV

    used = runs["fp8_backend"].map(lambda b: b if isinstance(b, str) and b != "none" else None).dropna()
    if used.nunique() < 2:
        return []
    counts = ", ".join(f"{b}: {n} runs" for b, n in sorted(used.value_counts().items()))
    return [
        f"the FP8 runs mix GEMM backends ({counts}; throughput.json fp8_backend): the paths give different "
        f"numbers, so the tier is not one experiment; rerun them on one ({FP8_BACKEND_ENV} forces it)"
    ]


def load_tier(cfg: ExperimentConfig, runs_dir: str | Path | None = None) -> RunSet:
    """Every run of `cfg`'s matrix, read from `runs_dir` (default `{results_dir}/{tier}/runs`). The eval
    suites a finished run must have a result file of are those the config turns on
    (fp8rl.evaluate.suites.enabled_suites), so a new suite needs no edit here."""
    runs_dir = Path(runs_dir) if runs_dir is not None else tier_runs_dir(cfg.results_dir, cfg.tier)
    rows, frames, problems = [], [], []
    hists: dict[str, dict] = {}
    suites = tuple(suite.name for suite in enabled_suites(cfg))
    for spec in cfg.runs():
        row, values, probs = load_run(spec, runs_dir, suites)
        rows.append(row)
        hist_path = RunDir.of(runs_dir, spec.run_id).ratio_hist
        if hist_path.is_file() and (hist := _read_json(hist_path, probs)) is not None:
            if _hist_ok(hist):
                hists[spec.run_id] = hist
            else:
                probs.append(
                    f"{hist_path}: not a ratio histogram (edges, counts per {', '.join(HIST_KEYS)}); file ignored"
                )
        if not values.empty:
            frames.append(values)
        problems += probs
    runs = pd.DataFrame(rows)
    for col in ("reason", "step", "steps_planned", "emulated", "device", "fp8_backend"):
        if col not in runs:
            runs[col] = None
    problems += backend_mix_problems(runs)
    values = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=VALUE_COLUMNS)).astype(
        {"value": float, "stderr": float, "step": float}
    )
    return RunSet(runs=runs, values=values, problems=problems, ratio_hists=hists)
