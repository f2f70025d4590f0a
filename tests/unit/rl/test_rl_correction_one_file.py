"""A new mismatch correction is one file plus its test (CONTRIBUTING.md): a module of
fp8rl/rl/corrections/ named after the correction it registers. This test adds one, `flip`, to a copy of
the package and checks, in a fresh interpreter, that nothing else needs an edit: the vocabulary has
the correction and its variants `fp8_flip` and `fp8_flip_calib`, a config's matrix takes them (run ids
included), the trainer's registry runs it, the report orders it with the other FP8 variants, and the
verl backend refuses it by name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "fp8rl"

FLIP = '''"""`flip`: a test correction, every valid token's weight 1/r (one file, registered under its name)."""

from __future__ import annotations

import torch

from fp8rl.rl.corrections._registry import Correction, CorrectionInputs, CorrectionOptions, register_correction


@register_correction("flip")
def flip(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    d = torch.where(inputs.mask, inputs.old_log_prob - inputs.rollout_log_prob, 0.0)
    w = torch.where(inputs.mask, torch.exp(-d), 0.0)
    return Correction(w.detach(), None, {"tis/mean": float(w[inputs.mask].mean())})
'''

PROBE = """
import json, math, sys
import torch
from fp8rl import vocabulary
from fp8rl.config import ExperimentConfig, expand_matrix
from fp8rl.rl.corrections import REGISTRY, rollout_correction
from fp8rl.report.mechanism import FP8_VARIANTS
from fp8rl.adapters.verl_support import verl_problems
from fp8rl.config_loader import load_config

cfg = ExperimentConfig.model_validate({
    "tier": "my-flip-study",
    "models": [{"name": "tiny", "source": "scratch"}],
    "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16", "fp8_flip", "fp8_flip_calib"],
               "seeds": [0]},
})
old = torch.tensor([[math.log(0.5), math.log(0.5)]])
c = rollout_correction("flip", old, old - math.log(2.0), torch.ones(1, 2))
verl = load_config(sys.argv[1], ["matrix.variants=[bf16, fp8_flip]"])
print(json.dumps({
    "new": list(vocabulary.NEW_CORRECTIONS),
    "variants": [v for v in vocabulary.VARIANTS if "flip" in v],
    "specs": [[s.correction, s.calib, s.fp8] for v, s in vocabulary.VARIANT_SPECS.items() if "flip" in v],
    "registered": "flip" in REGISTRY,
    "run_ids": [r.run_id for r in expand_matrix(cfg)],
    "weights": c.weights.tolist(),
    "report": [v for v in FP8_VARIANTS if "flip" in v],
    "verl": [msg for _, msg in verl_problems(verl)],
}))
"""


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "fp8rl", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _run(root: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "OPENBLAS_CORETYPE": "Haswell"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_new_correction_is_one_file(tmp_path):
    root = _copy(tmp_path)
    (root / "fp8rl" / "rl" / "corrections" / "flip.py").write_text(FLIP)
    done = _run(root, PROBE, str(PACKAGE.parent / "config" / "verl_smoke.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["new"] == ["flip"] and out["registered"]
    assert out["variants"] == ["fp8_flip", "fp8_flip_calib"]
    assert out["specs"] == [["flip", False, True], ["flip", True, True]]
    assert out["run_ids"] == [
        "grpo/tiny/bf16/none/seed0",
        "grpo/tiny/fp8_flip/tensorwise/seed0",
        "grpo/tiny/fp8_flip_calib/tensorwise/seed0",
    ]
    assert out["weights"] == [[0.5, 0.5]]
    assert out["report"] == ["fp8_flip", "fp8_flip_calib"]
    # the verl backend refuses it by name until fp8rl.adapters.verl_corrections maps it
    assert any("correction 'flip' has no verl mapping" in m for m in out["verl"]), out["verl"]


def test_a_correction_module_that_registers_another_name_is_refused_at_import(tmp_path):
    root = _copy(tmp_path)
    (root / "fp8rl" / "rl" / "corrections" / "flop.py").write_text(FLIP)  # registers `flip`, not `flop`
    done = _run(root, "import fp8rl.rl.corrections")
    assert done.returncode != 0
    assert "'flip' is not in fp8rl.vocabulary.CORRECTIONS" in done.stderr


def test_a_new_correction_may_not_take_a_shipped_variants_name(tmp_path):
    root = _copy(tmp_path)
    (root / "fp8rl" / "rl" / "corrections" / "seqtis.py").write_text(FLIP.replace('"flip"', '"seqtis"'))
    done = _run(root, "import fp8rl.vocabulary")
    assert done.returncode != 0
    assert "its variant 'fp8_seqtis' is a shipped variant's name" in done.stderr
