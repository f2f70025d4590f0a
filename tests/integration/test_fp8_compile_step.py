"""The compiled fake quantization as a user switches it (`FP8RL_FP8_COMPILE=1`): `benchmarks/step_ab.py`
trains an FP8 + TIS run with the eager and with the `torch.compile`d kernel, finds the same metrics bit
for bit (it exits 1 otherwise), and the quoted block docs/performance.md shows is generated from its real
`--json` record. Inductor's cache, pointed into the test's folder, shows the compiled kernel was built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fp8rl.config_loader import load_config
from fp8rl.quotes.registry import BLOCKS

REPO = Path(__file__).resolve().parents[2]


def test_compiled_fake_quant_trains_the_same_bits_and_its_block(tier, tmp_path):
    root, config, _ = tier
    run_id = next(r.run_id for r in load_config(config).runs() if r.variant == "fp8_tis")
    published = tmp_path / "published"
    record_path = published / "benchmarks" / "step_ab_fp8_compile_longform.json"
    record_path.parent.mkdir(parents=True)
    step = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "step_ab.py"), "--config", str(config), "--run", run_id,
         "--base", str(root / "base" / "tiny"), "--data", str(root / "data"), "--steps", "2", "--repeats", "1",
         "--switch", "FP8RL_FP8_COMPILE", "--before", "0", "--after", "1", "--json", str(record_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
    )  # fmt: skip
    assert step.returncode == 0, step.stdout[-2000:] + step.stderr[-2000:]
    assert any((tmp_path / "inductor").rglob("*.py")), "the `after` arm built no compiled kernel"
    record = json.loads(record_path.read_text())
    assert record["switch"] == "FP8RL_FP8_COMPILE" and record["metrics_same"] is True

    import fp8rl.quotes.files  # noqa: F401  (registers every block)

    block = BLOCKS["performance-fp8-compile"](published)
    assert "| before (`FP8RL_FP8_COMPILE=0`) |" in block and "| after (`FP8RL_FP8_COMPILE=1`) |" in block
    assert "the same bit for bit" in block and f"`{run_id}`" in block
