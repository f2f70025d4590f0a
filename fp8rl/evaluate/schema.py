"""The one result schema of both evaluation suites (docs/interfaces.md), and the lm-eval normaliser.

`eval/lm_eval.json` and `eval/agent.json`:

    {"checkpoint": "...", "checkpoint_digest": "<sha256>", "suite": "lm_eval" | "agent",
     "results": [{"task": "arith_gen", "metric": "exact_match", "value": 0.42, "stderr": 0.035, "n": 200}],
     "failed": [{"tasks": ["bfcl_simple"], "reason": "CalledProcessError: ..."}],  # only when one crashed
     "provenance": {...}}

`checkpoint_digest` (fp8rl.checkpoint_files.checkpoint_digest) ties the scores to the checkpoint they
scored: the report leaves them out when the run's checkpoint has another one (trained again since).

`stderr` is null where the harness gives none. A metric computed after an lm-eval filter is named
`metric` when the task has one filter for it and `metric,filter` (lm-eval's own notation) when it has
several (gsm8k's strict-match / flexible-extract). An avg@k task reports `avg@k` (k in the name).

Beside each result file, `eval/lm_eval.samples.jsonl` (`samples_path`) keeps every scored sample, one
JSON object a line: `task`, `doc_id`, `filter`, `prompt` (as sent, chat template applied), `target`,
`responses` (all k of an avg@k task), `filtered` (after the task's filter), `scores` (the sample's
metric values) and `doc` (the dataset row).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fp8rl.io import atomic_write_json, atomic_write_jsonl
from fp8rl.vocabulary import EVAL_SUITES

SUITES = EVAL_SUITES


@dataclass(frozen=True)
class TaskResult:
    task: str
    metric: str
    value: float
    stderr: float | None
    n: int


def _number(x: Any) -> float | None:
    """A finite float, or None for lm-eval's 'N/A' and non-finite values."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def normalise_lm_eval(raw: dict, names: dict[str, str] | None = None) -> list[TaskResult]:
    """Flatten `lm_eval.simple_evaluate`'s output into TaskResults, one per task x metric x filter.

    `names` maps lm-eval's task names to the names to report (e.g. `minerva_math500` -> `math500`).
    """
    names = names or {}
    out: list[TaskResult] = []
    n_samples = raw.get("n-samples", {})
    for task, metrics in raw.get("results", {}).items():
        if task not in n_samples:  # a group row, not a task
            continue
        n = int(n_samples[task].get("effective", n_samples[task].get("original", 0)))
        keys = [k for k in metrics if "," in k and "_stderr," not in k]
        per_metric: dict[str, int] = {}
        for key in keys:
            per_metric[key.split(",", 1)[0]] = per_metric.get(key.split(",", 1)[0], 0) + 1
        for key in keys:
            metric, filt = key.split(",", 1)
            value = _number(metrics[key])
            if value is None:
                continue
            name = metric if per_metric[metric] == 1 else f"{metric},{filt}"
            stderr = _number(metrics.get(f"{metric}_stderr,{filt}"))
            out.append(TaskResult(names.get(task, task), name, value, stderr, n))
    return out


def eval_document(
    checkpoint: str | Path,
    suite: str,
    results: list[TaskResult],
    provenance: dict,
    checkpoint_digest: str | None = None,
    failed: list[dict] | None = None,
) -> dict:
    """One suite's result document (`failed`: the tasks whose harness crashed, with the reason);
    ValueError naming the allowed suites for another one."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; allowed: {', '.join(SUITES)}")
    doc = {"checkpoint": str(checkpoint)}
    if checkpoint_digest is not None:
        doc["checkpoint_digest"] = checkpoint_digest
    return doc | {
        "suite": suite,
        "results": [asdict(r) for r in results],
        **({"failed": failed} if failed else {}),
        "provenance": provenance,
    }


def write_eval(path: str | Path, *document: Any, **fields: Any) -> Path:
    """Write one suite's results atomically: `eval_document(*document, **fields)` at `path`."""
    return atomic_write_json(path, eval_document(*document, **fields))


def samples_path(result_file: str | Path) -> Path:
    """The per-sample log beside a suite's result file: `eval/lm_eval.json` -> `eval/lm_eval.samples.jsonl`."""
    result_file = Path(result_file)
    return result_file.with_name(f"{result_file.stem}.samples.jsonl")


def native_path(result_file: str | Path) -> Path:
    """lm-eval's own results JSON beside a suite's flat result file (what `lm_eval --output_path`
    writes, without the samples): `eval/lm_eval.json` -> `eval/lm_eval.native.json`."""
    result_file = Path(result_file)
    return result_file.with_name(f"{result_file.stem}.native.json")


def _plain(x: Any) -> Any:
    """A JSON value: containers recursively, non-finite floats as null, anything else as its str."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if x is None or isinstance(x, str | bool | int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return str(x)


def _flatten(x: Any) -> list:
    """lm-eval nests responses per request (and per repeat); a flat list of strings is what a reader wants."""
    if isinstance(x, list | tuple):
        return [leaf for item in x for leaf in _flatten(item)]
    return [x]


def sample_records(raw: dict, names: dict[str, str] | None = None) -> list[dict]:
    """One record per task x document x filter from `simple_evaluate(..., log_samples=True)`."""
    names = names or {}
    out = []
    for task, samples in (raw.get("samples") or {}).items():
        for s in samples:
            args = s.get("arguments") or []
            prompt = args[0][0] if args and isinstance(args[0], list | tuple) and args[0] else None
            out.append(
                _plain(
                    {
                        "task": names.get(task, task),
                        "doc_id": s.get("doc_id"),
                        "filter": s.get("filter"),
                        "prompt": prompt,
                        "target": s.get("target"),
                        "responses": _flatten(s.get("resps") or []),
                        "filtered": s.get("filtered_resps"),
                        "scores": {m: s.get(m) for m in s.get("metrics") or []},
                        "doc": s.get("doc"),
                    }
                )
            )
    return out


def write_samples(path: str | Path, records: list[dict]) -> Path:
    """Write the per-sample log atomically (JSONL)."""
    return atomic_write_jsonl(path, records)
