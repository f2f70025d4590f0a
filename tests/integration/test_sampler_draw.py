"""The sampler's draw as a user switches it: `schedule.sampler_draw: inverse_cdf` trains the same run
reproducibly with other tokens than the default draw, the two benchmark scripts measure it (their real
`--json` records), and the quoted block docs/performance.md shows is generated from those records."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fp8rl.config_loader import load_config
from fp8rl.quotes.step import performance_sampler_draw

REPO = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def test_sampler_draw_benchmarks_and_their_quoted_block(tier, train, tmp_path, restore_torch_globals):
    root, config, _ = tier
    run_id = next(r.run_id for r in load_config(config).runs() if r.variant == "bf16" and r.algo == "grpo")
    _, _, icdf = train(run_id, tmp_path / "icdf", {"schedule.sampler_draw": "inverse_cdf"})
    _, _, again = train(run_id, tmp_path / "again", {"schedule.sampler_draw": "inverse_cdf"})
    _, _, default = train(run_id, tmp_path / "default")
    untimed = [[{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]
               for rows in (icdf, again, default)]  # fmt: skip
    assert untimed[0] == untimed[1]  # a seed gives the same run under the draw
    assert untimed[0] != untimed[2]  # and other tokens than the default draw

    published = tmp_path / "published"
    (published / "benchmarks").mkdir(parents=True)
    grid = _bench("sampler_draw.py", "--vocab", "64", "--new-tokens", "4", "--threads", "1", "--repeats", "1",
                  "--draw-calls", "2", "--json", str(published / "benchmarks" / "sampler_draw.json"))  # fmt: skip
    assert grid.returncode == 0, grid.stderr[-2000:]
    step = _bench("step_ab.py", "--config", str(config), "--run", run_id, "--base", str(root / "base" / "tiny"),
                  "--data", str(root / "data"), "--steps", "2", "--repeats", "1",
                  "--config-switch", "schedule.sampler_draw", "--before", "multinomial", "--after", "inverse_cdf",
                  "--json", str(published / "benchmarks" / "step_ab_sampler_draw_longform.json"))  # fmt: skip
    assert step.returncode == 0, step.stderr[-2000:]
    record = json.loads((published / "benchmarks" / "step_ab_sampler_draw_longform.json").read_text())
    assert record["config_switch"] and record["switch"] == "schedule.sampler_draw"
    assert record["metrics_same"] is False  # the arms drew other tokens
    block = performance_sampler_draw(published)
    shape = json.loads((published / "benchmarks" / "sampler_draw.json").read_text())["shapes"][0]
    assert f"| 64 | 4 | 1 | {shape['draw_us']['multinomial']:.0f} |" in block
    assert "not the same (other tokens for the seed, as expected)" in block
    assert f"`{run_id}`" in block and "Target: the testbed's step ≥ 2.0× faster" in block
    shutil.rmtree(published)
