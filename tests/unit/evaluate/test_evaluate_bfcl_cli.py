"""The eval job's BFCL commands through bfcl-eval's own command line (the pinned 2026.3.23 sources in
build/upstream/, scripts/upstream_src.sh): `fp8rl eval agent`'s `bfcl generate` and `bfcl evaluate`
arguments for each paper model, parsed by bfcl-eval's typer app, name a local model served by vLLM and
bfcl-eval's own test categories. bfcl-eval needs its own environment (numpy 1.26, API clients), so it is
imported in a child process with the modules it cannot find here stubbed; nothing runs past the parse
(the next step, `bfcl generate`, starts vLLM on a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fp8rl.config_loader import load_config
from fp8rl.evaluate import bfcl
from fp8rl.run_files import RunDir

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = Path(os.environ.get("FP8RL_UPSTREAM_SRC", ROOT / "build" / "upstream"))

# Child: import bfcl_eval.__main__ with the modules it imports but this environment lacks stubbed, then
# parse each argv with its typer app; prints the parsed parameters and what bfcl-eval knows of them.
PARSE = r"""
import ast, importlib, importlib.abc, importlib.machinery, importlib.util, json, pathlib, sys, types
from unittest.mock import MagicMock

sys.path.insert(0, sys.argv[1])
root = pathlib.Path(sys.argv[1]) / "bfcl_eval"
names = set()
for f in root.rglob("*.py"):
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}

def absent(name):
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError, AttributeError):
        return True

missing = set()
for name in sorted(n for n in names if n.split(".")[0] != "bfcl_eval"):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        head = ".".join(parts[:i])
        if head in missing:
            break
        if absent(head):
            parent = ".".join(parts[:i - 1])
            if i > 1 and not absent(parent) and hasattr(importlib.import_module(parent), parts[i - 1]):
                break  # `from X import name`: an attribute, not a module
            missing.add(head)
            break

class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == m or name.startswith(m + ".") for m in missing):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        stub_class = lambda attr: type(attr, (), {"__init__": lambda self, *a, **k: None,
                                                  "__getattr__": lambda self, n: MagicMock()})
        module.__getattr__ = lambda attr: stub_class(attr) if attr[:1].isupper() else MagicMock()
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Stub())
import typer
import bfcl_eval.__main__ as cli
from bfcl_eval.constants.category_mapping import ALL_CATEGORIES
from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

group = typer.main.get_command(cli.cli)
out = []
for argv in json.loads(sys.argv[2]):
    params = group.get_command(None, argv[0]).make_context(argv[0], list(argv[1:])).params
    models = [MODEL_CONFIG_MAPPING.get(m) for m in params["model"]]
    out.append({"command": argv[0], "params": {k: v for k, v in params.items() if k != "lora_modules"},
                "unknown_categories": [c for c in params["test_category"] if c not in ALL_CATEGORIES],
                "local_models": [m is not None and issubclass(m.model_handler, OSSHandler) for m in models]})
print(json.dumps(out))
"""


def _bfcl_argv(cfg, model: str, tmp_path: Path, monkeypatch) -> list[list[str]]:
    """The two commands `run_bfcl` runs for a checkpoint of `model` (subprocess.run recorded, not run)."""
    run = tmp_path / model
    RunDir(run).checkpoint.mkdir(parents=True)
    RunDir(run).summary.write_text(json.dumps({"run_id": f"grpo/{model}/bf16/none/seed0"}))
    calls = []

    def record(argv, **kwargs):
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(bfcl, "find_bfcl", lambda: "bfcl")
    monkeypatch.setattr(bfcl, "subprocess", SimpleNamespace(run=record))
    monkeypatch.setattr(bfcl, "read_scores", lambda root, names: [])
    names = [n.removeprefix(bfcl.BFCL_PREFIX) for n in cfg.eval.agent]  # the eval plan's BFCL categories
    bfcl.run_bfcl(cfg, RunDir(run).checkpoint, names, tmp_path / "work")
    assert [c[:2] for c in calls] == [["bfcl", "generate"], ["bfcl", "evaluate"]]
    return [c[1:] for c in calls]


def test_the_eval_jobs_bfcl_commands_parse_in_bfcl_eval(tmp_path, monkeypatch):
    if not (UPSTREAM / "bfcl_eval" / "__main__.py").is_file():
        pytest.skip(
            f"needs the pinned upstream sources: run scripts/upstream_src.sh (no {UPSTREAM}/bfcl_eval)"
        )
    cfg = load_config(ROOT / "config" / "paper.yaml")
    models = cfg.matrix.models
    argvs = [argv for m in models for argv in _bfcl_argv(cfg, m, tmp_path, monkeypatch)]
    res = subprocess.run([sys.executable, "-c", PARSE, str(UPSTREAM), json.dumps(argvs)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    parsed = json.loads(res.stdout.strip().splitlines()[-1])
    want = [bfcl.BFCL_CATEGORIES[n.removeprefix(bfcl.BFCL_PREFIX)] for n in cfg.eval.agent]
    for i, model in enumerate(models):
        generate, evaluate = parsed[2 * i], parsed[2 * i + 1]
        handler = cfg.model(model).bfcl_handler
        assert generate["params"]["model"] == evaluate["params"]["model"] == [handler]
        assert generate["local_models"] == [True]  # a local model bfcl-eval serves itself, not an API
        assert generate["params"]["backend"] == "vllm"
        assert generate["params"]["local_model_path"] == str(RunDir(tmp_path / model).checkpoint)
        assert generate["params"]["num_gpus"] == cfg.resources_for("eval").gpus
        assert generate["params"]["allow_overwrite"] is True
        for p in (generate, evaluate):
            assert p["params"]["test_category"] == want and p["unknown_categories"] == []
