"""The report fixtures log what the trainer logs: the metric key sets (and throughput phases) that real
tiny runs of every variant write equal those recorded in tests/unit/report/metric_keys.json, which
`tests/unit/report/report_fixtures.py` builds its synthetic runs from.

When the trainer adds or drops a metric, this test fails; re-record with
`PYTHONPATH=. python tests/integration/test_report_fixture_keys.py` and check the diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "tests" / "unit" / "report" / "metric_keys.json"
# the smoke tier's variants, then the corrections comparison's (config/corrections.yaml)
VARIANTS = ("bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib",
            "fp8_scorecenter", "fp8_tis_scorecenter", "fp8_qurl", "fp8_icepop", "fp8_icepop_adaptive")  # fmt: skip
ALGOS = ("grpo", "dapo")


def smoke_overrides() -> dict:
    """The smoke tier's objective and FP8 settings on the tiny model (they decide which keys exist), with
    every recorded variant in its matrix."""
    smoke = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    fp8 = {**smoke["fp8"], "optimizer": "blockwise"}
    return {"algorithms": smoke["algorithms"], "fp8": fp8, "tis": smoke["tis"], "calib": smoke["calib"],
            "matrix.variants": list(VARIANTS)}  # fmt: skip


def record(train, out: Path) -> dict:
    """{"metrics": {algo: {variant: sorted keys}}, "throughput_phases": {algo: {variant: phases}}}: the
    union over a 3-step run's metrics.jsonl lines of the keys it logged, and its throughput.json phases."""
    metrics: dict = {a: {} for a in ALGOS}
    phases: dict = {a: {} for a in ALGOS}
    for algo in ALGOS:
        for variant in VARIANTS:
            gran = "none" if variant == "bf16" else "tensorwise"
            run_id = f"{algo}/tiny/{variant}/{gran}/seed0"
            run_dir = out / algo / variant
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            _, summary, rows = train(run_id, run_dir, smoke_overrides())
            assert summary["status"] == "ok", (run_id, summary["reason"])
            metrics[algo][variant] = sorted({k for row in rows for k in row})
            throughput = json.loads((run_dir / "throughput.json").read_text())
            phases[algo][variant] = sorted(throughput["phases"])
    return {"metrics": metrics, "throughput_phases": phases}


@pytest.mark.slow
def test_report_fixture_keys_are_the_trainers(tier, train, tmp_path, restore_torch_globals):
    real = record(train, tmp_path)
    recorded = json.loads(RECORD.read_text())
    for part in ("metrics", "throughput_phases"):
        for algo in ALGOS:
            for variant in VARIANTS:
                got, want = set(real[part][algo][variant]), set(recorded[part][algo][variant])
                assert got == want, (
                    f"{RECORD.name} {part} of {algo}/{variant} differ from a real run: "
                    f"new {sorted(got - want)}, gone {sorted(want - got)}; re-record (see module docstring)"
                )


if __name__ == "__main__":  # re-record metric_keys.json from real tiny runs
    import functools
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    import conftest

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        conftest.tiny_tier(root)
        tier = (root, root / "config.yaml", conftest.write_config)
        real = record(functools.partial(conftest._train, tier), root / "runs")
    RECORD.write_text(json.dumps(real, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}")
