"""Bands around a published tier's per-cell metrics, and a fresh run's metrics checked against them
(`fp8rl check`, and the README's figure of how far an unpinned machine lands: fp8rl.quotes.files).

Each metric that the published `tables/comparison.csv` gives with a 95 % interval (the t-interval over
its per-seed means: fp8rl.stats.intervals) has a band: that interval, widened about the published mean by
`widen` (1: the interval itself), plus `atol` for the table's rounding. The fresh mean must lie in it; a
published cell missing from the fresh table fails too. The published folder is checked against its
`report.json` first (a table edited since it was published is refused: ValueError), and so are the
report files of the fresh tier folder when it has a `report.json` (its runs, bases and logs beside them
are not part of the report). A publication that gives no band at all (one seed: no interval) checks
nothing, and is refused (ValueError) rather than passed.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

TABLE = Path("tables") / "comparison.csv"
KEYS = ("algo", "model", "granularity", "condition", "variant")


def _read(root: str, *, publication: bool) -> tuple[list[str], dict[tuple, dict[str, str]]]:
    """The comparison table's key columns and rows by cell, after checking the folder against its
    `report.json` (fp8rl.publication.publish.verify_publication): always for a publication, and for a fresh
    report folder when it has one."""
    from fp8rl.publication.publish import verify_publication

    if publication or (Path(root) / "report.json").exists():
        verify_publication(root, publication=publication)
    path = Path(root) / TABLE
    if not path.is_file():
        raise ValueError(f"{path}: no comparison table (a tier's report directory holds {TABLE})")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        cols = list(reader.fieldnames or [])
        keys = [k for k in KEYS if k in cols]
        return keys, {tuple(row[k] for k in keys): row for row in reader}


def _num(text: str | None) -> float | None:
    try:
        x = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def banded_metrics(cols: list[str]) -> dict[str, str]:
    """metric -> the column of its mean, for every metric with a (non-delta) 95 % interval."""
    out = {}
    for c in cols:
        if c.endswith(" ci_low") and " delta" not in c:
            base = c[: -len(" ci_low")]
            mean = f"{base} mean" if f"{base} mean" in cols else base
            if mean in cols and f"{base} ci_high" in cols:
                out[base] = mean
    return out


def check(
    results: str, against: str, *, widen: float = 1.0, atol: float = 1e-9
) -> tuple[list[str], list[str]]:
    """(report lines, failures): every published cell's banded metrics against the fresh table."""
    keys, published = _read(against, publication=True)
    fresh_keys, fresh = _read(results, publication=False)
    if fresh_keys != keys:
        raise ValueError(f"{results} and {against} tabulate different cells ({fresh_keys} vs {keys})")
    with (Path(against) / TABLE).open(newline="") as fh:
        metrics = banded_metrics(next(csv.reader(fh)))
    lines = [
        f"band: the published 95 % interval over its seeds (t on the per-seed means), widened x{widen:g} "
        f"about the published mean, +- {atol:g}; {len(published)} published cells, {len(metrics)} metrics"
    ]
    failures = []
    for cell, row in published.items():
        name = "/".join(cell)
        if cell not in fresh:
            failures.append(f"{name}: missing from {results}")
            continue
        for metric, mean_col in metrics.items():
            mean, lo, hi = (_num(row.get(c)) for c in (mean_col, f"{metric} ci_low", f"{metric} ci_high"))
            if mean is None or lo is None or hi is None:
                continue
            band = (mean - widen * (mean - lo) - atol, mean + widen * (hi - mean) + atol)
            got = _num(fresh[cell].get(mean_col))
            inside = got is not None and band[0] <= got <= band[1]
            n = row.get(f"{metric} n", "")
            got_s = "absent" if got is None else f"{got:.6g}"
            line = f"{name} {metric}: {got_s} in [{band[0]:.6g}, {band[1]:.6g}] (published {mean:.6g}, n={n})"
            lines.append(("ok   " if inside else "OUT  ") + line)
            if not inside:
                failures.append(
                    f"{metric} of {name} left its band: {got_s} not in [{band[0]:.6g}, {band[1]:.6g}]"
                )
    if not failures and len(lines) == 1:
        raise ValueError(
            f"{against}: nothing to check: none of its {len(published)} cells has a metric with a 95 % "
            "interval (a single-seed publication has none: n = 1 gives no t-interval), so no band exists; "
            "check against a publication of two or more seeds"
        )
    extra = sorted(set(fresh) - set(published))
    if extra:
        lines.append(f"not published (not checked): {', '.join('/'.join(c) for c in extra)}")
    return lines, failures
