"""A new FP8 recipe (a run id's granularity) is one file plus its test (CONTRIBUTING.md): a module of
fp8rl/fp8/recipes/ named after the recipe it registers. This test adds one, `block64` (1×64 activation
and gradient tiles, 64×64 weight tiles), to a copy of the package and checks in a fresh interpreter that
nothing else needs an edit: the vocabulary lists it, a config's matrix takes it (run ids included), and
`get_recipe` and `convert_to_fp8` build and run it, and the verl backend refuses it by name. The shipped recipes are checked against their
definitions in tests/unit/fp8/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.fp8.recipe import BUILDERS, get_recipe, register_recipe
from fp8rl.vocabulary import GRANULARITIES

PACKAGE = Path(__file__).resolve().parents[3] / "fp8rl"

BLOCK64 = '''"""`block64`: e4m3; activations and gradients in 1×64 tiles, weights in 64×64 tiles (a test recipe)."""

from __future__ import annotations

from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe, register_recipe


@register_recipe("block64")
def block64(fmt: str, delayed_kw: dict) -> Recipe:
    act = OperandSpec("e4m3", "block1d", block=64)
    w = OperandSpec("e4m3", "block2d", block=64)
    return Recipe("block64", GemmSpec(act, w), GemmSpec(act, w), GemmSpec(act, act), **delayed_kw)
'''

PROBE = """
import json, sys
import torch
from fp8rl.adapters.verl_support import verl_problems
from fp8rl.config_loader import load_config
from fp8rl import vocabulary
from fp8rl.config import ExperimentConfig, expand_matrix
from fp8rl.fp8 import FP8Runtime, convert_to_fp8, get_recipe

cfg = ExperimentConfig.model_validate({
    "tier": "block64-study",
    "models": [{"name": "tiny", "source": "scratch"}],
    "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16", "fp8"], "seeds": [0],
               "granularities": ["block64"]},
})
recipe = get_recipe("block64")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 64))
model = convert_to_fp8(model, recipe, runtime=FP8Runtime())
y = model(torch.randn(4, 128))
verl = load_config(sys.argv[1], ["matrix.granularities=[block64]"])
print(json.dumps({
    "granularities": list(vocabulary.GRANULARITIES),
    "run_ids": [r.run_id for r in expand_matrix(cfg)],
    "blocks": [recipe.output.a.tiling.block, recipe.output.b.tiling.block],
    "finite": bool(torch.isfinite(y).all()),
    "layer": type(model[0]).__name__,
    "layer_recipe": model[0].recipe.name,
    "verl": [msg for _, msg in verl_problems(verl)],
}))
"""


def test_the_shipped_recipes_are_registered_once_in_vocabulary_order():
    assert list(GRANULARITIES[:5]) == ["tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"]
    assert set(BUILDERS) == set(GRANULARITIES)
    assert all(get_recipe(g).name == g for g in GRANULARITIES)
    with pytest.raises(ValueError, match="registered twice"):
        register_recipe("rowwise")(lambda fmt, kw: None)
    with pytest.raises(ValueError, match="not in fp8rl.vocabulary.GRANULARITIES"):
        register_recipe("block64")(lambda fmt, kw: None)


@pytest.mark.slow
def test_a_new_recipe_is_one_file(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "fp8rl", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "fp8rl" / "fp8" / "recipes" / "block64.py").write_text(BLOCK64)
    env = {**os.environ, "PYTHONPATH": str(root), "OPENBLAS_CORETYPE": "Haswell"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(PACKAGE.parent / "config" / "verl_smoke.yaml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["granularities"][-1] == "block64"
    assert out["run_ids"] == ["grpo/tiny/bf16/none/seed0", "grpo/tiny/fp8/block64/seed0"]
    assert out["blocks"] == [64, 64] and out["finite"]
    assert (out["layer"], out["layer_recipe"]) == ("FP8Linear", "block64")
    # the verl backend refuses it by name until fp8rl.adapters.verl_fp8 maps it to a TE recipe
    assert any("'block64' has no Megatron/Transformer Engine recipe" in m for m in out["verl"]), out["verl"]
