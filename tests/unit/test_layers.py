"""The floor plan of docs/architecture.md ("Pieces and layering"), checked on every import in fp8rl/,
those inside functions included:

    commands / cli  ->  quotes  ->  publication  ->  report  ->  stats
    commands / cli  ->  engine | adapters | evaluate | report  ->  rl, fp8, config, io  ->  torch

`ALLOWED` lists, per area (a sub-package or a top-level module of fp8rl), the areas it may import; a
new arrow has to be added here on purpose, with the floor plan in mind.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fp8rl"

BOTTOM = {"vocabulary", "io", "quiet", "locks", "stats"}  # import nothing from fp8rl
CORE = {"vocabulary", "io", "numerics"}
# the run directory: its files, its summary and throughput records, its lock, a bf16 run's targets
RUN_DIR = {"run_files", "run_records", "locks", "calibration_targets"}
ALLOWED: dict[str, set[str]] = {
    "vocabulary": set(),
    "io": set(),
    "quiet": set(),
    "stats": set(),  # numpy and scipy only: the statistics of every table and study
    "numerics": {"vocabulary", "pinned_blas"},  # pinned_blas: reproducible mode's GEMM route
    "pinned_blas": set(),
    "startup_hook": {"numerics"},  # the interpreter-start hook: writes numerics' OpenBLAS pin into a .pth
    "provenance": {"numerics"},
    "config": {"vocabulary", "rl"},  # rl.bounds: a resolved run's fixed clip interval
    "config_loader": {"config"},
    "locks": set(),
    "run_files": {"locks", *CORE},
    "run_records": CORE,
    "calibration_targets": {"run_files", *CORE},
    "run_checks": {"run_files", "run_records", *CORE},
    "checkpoint_files": {"run_files", *CORE},
    # a tier's finished runs kept in git and put back (`fp8rl archive`): the run directory, the config
    "run_archive": {"config", "provenance", "run_files", *CORE},
    # a tier's runs by state, from which files exist (`fp8rl archive status`): the archive's manifest
    "run_progress": {"config", "run_archive", "run_files", *CORE},
    "tracking": {"config"},
    "containers": {"config"},
    "fp8": {"vocabulary", "numerics"},  # never rl; numerics: fast-mode kernels only where asked
    "rl": {"vocabulary"},  # never fp8
    "engine": {"config", "fp8", "rl", "provenance", *RUN_DIR, "checkpoint_files", "tracking", *CORE},
    "evaluate": {
        "config",
        *RUN_DIR,
        "checkpoint_files",
        "provenance",
        "adapters",
        "engine",
        "quiet",
        *CORE,
    },  # adapters.hub: records; engine: the held-out suite's bf16 sampler, a split's rows as training reads them
    "adapters": {
        "config",
        "config_loader",
        "rl",
        "engine",
        "containers",
        "provenance",
        *RUN_DIR,
        "tracking",
        "evaluate",
        *CORE,
    },  # fmt: skip
    # evaluate: the report rehearsal (adapters.rehearse_report) writes eval result files with the suites' writers
    "report": {
        "config",
        "config_loader",
        "fp8",
        "rl",
        "provenance",
        *RUN_DIR,
        "run_checks",
        "checkpoint_files",
        "evaluate",
        "stats",
        *CORE,
    },  # loader: quotes read the study; evaluate: the eval suites a config turns on (suites registry)
    # the figures docs quote: read off the published tables with the report's own views and formats
    "quotes": {"report", "publication", "stats", *CORE},
    # a report copied whole with its provenance and checked against its manifest; bands of a publication
    "publication": {"report", "config", "provenance", "locks", "numerics", *CORE},
    "validation": {"config", "config_loader", "engine", "adapters", "evaluate"},
    "commands": {
        "adapters",
        "checkpoint_files",
        "config",
        "config_loader",
        "containers",
        "engine",
        "evaluate",
        "provenance",
        "quiet",
        "publication",
        "quotes",
        "report",
        "rl",
        "run_archive",
        "run_checks",
        "run_progress",
        *RUN_DIR,
        "tracking",
        "validation",
        *CORE,
    },  # fmt: skip
    "cli": {"commands", "config_loader", "numerics", "quiet"},
    "__init__": {"numerics"},
}


def _area(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """The fp8rl areas `path` imports, at any depth of its code."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "fp8rl":
                out |= {a.name for a in node.names}
            elif node.module.startswith("fp8rl."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("fp8rl.")}
    return out


def test_every_area_imports_only_what_the_floor_plan_allows():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        area = _area(path)
        assert area in ALLOWED, f"{path}: area {area!r} is not in the floor plan (tests/unit/test_layers.py)"
        for dst in sorted(_imports(path) - {area} - ALLOWED[area]):
            wrong.append(f"{path.relative_to(PACKAGE.parent)} imports fp8rl.{dst}")
    assert wrong == []


def test_rl_and_fp8_never_import_each_other():
    assert "fp8" not in ALLOWED["rl"] and "rl" not in ALLOWED["fp8"]
    assert all(not ALLOWED[a] for a in BOTTOM)
