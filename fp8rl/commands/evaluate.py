"""`fp8rl eval <suite>` and `fp8rl eval run`: score one checkpoint with one evaluation suite, or with
several in one process, and write one result file per suite.

    fp8rl eval lm-eval --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]
    fp8rl eval agent   --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]
    fp8rl eval heldout --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]
    fp8rl eval run lm_eval agent heldout --config FILE --checkpoint DIR --data DIR --out-dir DIR

The suites and their subcommands come from the registry (fp8rl.evaluate.suites: one module per suite,
its --help text included). `fp8rl eval run` writes `<out-dir>/<suite>.json` for each suite named, in
one process: the config, the numerics pin and the libraries are loaded once (the DAG's `eval` job on
the host, workflows/eval.smk). Every `--out` is checked before any evaluation work and each suite's
inputs before its model is loaded; a problem names the file and exits 2. The hub is read offline when
no suite needs it (every task a local YAML). Output follows docs/interfaces.md (fp8rl.evaluate.schema).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from fp8rl import numerics
from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.config_loader import load_config

ON_FAILURE_HELP = (
    "when a harness crashes: exit non-zero (raise), or write the tasks that finished with the failed ones "
    "listed, and exit 0 (record; the DAG's last attempt of an eval job)"
)


def _check_out(out: Path) -> None:
    """UsageError unless the result file `out` can be written: before any evaluation work."""
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory, not a result file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create its folder ({exc.strerror or exc})") from None
    try:  # a real write: permissions, a read-only filesystem, a full disk
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write in {out.parent} ({exc.strerror or exc})") from None


def evaluate(args: argparse.Namespace, outs: dict[str, Path]) -> int:
    """Run the suites `outs` names (suite -> result file) on `args.checkpoint`, in this process, in the
    order given; the config is loaded once with every suite's checks."""
    from fp8rl.evaluate.suites import SuiteJob, get_suite, suite_problems

    suites = [get_suite(name) for name in outs]
    checks = list(dict.fromkeys([suite_problems, *(check for s in suites for check in s.checks)]))
    cfg = load_config(args.file, args.set, checks=checks)
    numerics.ensure(cfg.numerics)
    for out in outs.values():
        _check_out(out)
    if all(s.offline(cfg) for s in suites):  # before datasets and the hub client read it at import
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"

    import torch

    from fp8rl.evaluate.eval_tasks import EvalInputError
    from fp8rl.locks import RunDirLocked

    torch.set_num_threads(cfg.resources_for("eval").threads)
    on_failure = getattr(args, "on_failure", "raise")
    for suite in suites:
        job = SuiteJob(
            cfg,
            Path(args.checkpoint),
            Path(args.data),
            outs[suite.name],
            on_failure,
            suite.parse_options(cfg),
        )
        try:
            suite.run(job)
        except (EvalInputError, RunDirLocked) as exc:
            raise UsageError(f"{suite.name}: {exc}" if len(suites) > 1 else str(exc)) from None
        print(f"wrote {job.out}", file=sys.stderr, flush=True)
    return 0


def _run_suites(args: argparse.Namespace) -> int:
    """`fp8rl eval run SUITE...`: each suite's result file in `--out-dir` (module docstring)."""
    from fp8rl.evaluate.suites import REGISTRY

    unknown = [s for s in args.suites if s not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown eval suite {unknown[0]!r}; allowed: {', '.join(REGISTRY)}")
    if len(set(args.suites)) < len(args.suites):
        raise UsageError(f"a suite is named twice: {' '.join(args.suites)}")
    out_dir = Path(args.out_dir)
    return evaluate(args, {name: out_dir / f"{name}.json" for name in args.suites})


def _add_common(p: argparse.ArgumentParser) -> None:
    add_config_args(p)
    p.add_argument("--checkpoint", required=True, help="Hugging Face model directory (a run's, or a base)")
    p.add_argument(
        "--data", required=True, help="the tier's data directory (train.jsonl, test.jsonl, tool_test.jsonl)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    from fp8rl.evaluate.suites import REGISTRY

    p_eval = add_command(
        sub, "eval", help="evaluate a checkpoint with an evaluation suite, or several in one process"
    )
    eval_sub = p_eval.add_subparsers(dest="eval_command", required=True, metavar="SUITE")
    for suite in REGISTRY.values():
        p = add_command(eval_sub, suite.command, help=suite.help)
        _add_common(p)
        p.add_argument("--out", required=True, help="result JSON to write")
        if suite.records_failures:
            p.add_argument("--on-failure", choices=("raise", "record"), default="raise", help=ON_FAILURE_HELP)
        p.set_defaults(func=lambda a, name=suite.name: evaluate(a, {name: Path(a.out)}))
    p = add_command(eval_sub, "run", help="several suites in one process -> <out-dir>/<suite>.json each")
    p.add_argument("suites", nargs="+", metavar="SUITE", help=f"suites to run, of: {', '.join(REGISTRY)}")
    _add_common(p)
    p.add_argument("--out-dir", required=True, help="folder of the result files (a run's eval/)")
    p.add_argument("--on-failure", choices=("raise", "record"), default="raise", help=ON_FAILURE_HELP)
    p.set_defaults(func=_run_suites)
