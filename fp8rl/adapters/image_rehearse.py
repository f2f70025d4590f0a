"""Rehearse a DAG job in its container image's pinned Python packages, on a machine without the image:
the job's real command, run by the interpreter of `build/venv-IMAGE` (scripts/image_venv.sh: the image's
`requirements.lock` installed as its Dockerfile installs it, fp8rl installed into it with --no-deps as
the image installs it), with the image's environment (`IMAGE_ENV`), to its end or to its first GPU
point. Each job first installs this working tree's fp8rl into the venv (`install_fp8rl`), as an image
built from it has it.

Jobs (`JOBS`: job -> image):

- `report` (cpu image; workflows/report.smk's `fp8rl report --config FILE`): the report of the CI
  tier's finished runs (a copy of `results/ci`, the DAG's output there), then its tables against the
  published CI tables byte for byte (scripts/check_reproduced.sh), so a pinned pandas, numpy, scipy or
  matplotlib that computes or writes a table differently from the development machine's shows here.
- `data` (train image; `fp8rl data --config FILE --out DIR --hub RECORD`): the paper tier's splits
  from a fetched hub record, to its end, compared with the same command's output on this machine.
- `export` (train image; the job script's `python -m fp8rl.adapters.verl_checkpoint export ... --tokenizer
  BASE`): a verl save whose tokenizer the train lock's transformers wrote, exported, and loaded by the
  bfcl image's transformers 4.51.3 (`build/tf4-venv`), as the agent eval's first call loads it.

- `eval-lm` (eval image, its whole lock: CUDA builds of torch and vLLM, which import on a CPU;
  `fp8rl eval lm-eval --config FILE --checkpoint CKPT --data DIR --out OUT --on-failure record`) to its
  first GPU point: inputs checked, lm-eval's tasks planned, the `fp8rl-vllm` model built, and the only
  failure recorded vLLM's finding no GPU (`GPU_POINT`).

- `eval-agent` (bfcl image, its whole lock): fp8rl.adapters.image_rehearse_agent.

The train image's jobs run in a venv of its lock without its CUDA builds (`CPU_ONLY=1
scripts/image_venv.sh train`: torch, its NVIDIA libraries, triton, vLLM, FlashInfer, Transformer
Engine left out and listed), which the data and export jobs do not import. Not rehearsed in an image's
packages: the training job itself (fp8rl.adapters.verl_rehearse, in verl's test environment).

    python -m fp8rl.adapters.image_rehearse report [--venv build/venv-cpu] [--work DIR]
    python -m fp8rl.adapters.image_rehearse data --hub RESULTS/data/hub.json [--set KEY=VALUE ...]
    python -m fp8rl.adapters.image_rehearse export --base MODEL_DIR
    python -m fp8rl.adapters.image_rehearse eval-lm --checkpoint MODEL_DIR --data DATA_DIR [--set ...]
    python -m fp8rl.adapters.image_rehearse eval-agent --checkpoint MODEL_DIR --data DATA_DIR [--set ...]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fp8rl.adapters.image_venv import (
    GPU_POINT,
    PAPER,
    ROOT,
    TAIL_CHARS,
    Result,
    _run,
    _versions,
    install_fp8rl,
    venv_problem,
)


def report_job(
    venv: Path, work: Path, results: Path = ROOT / "results" / "ci", timeout_s: int = 1800
) -> Result:
    """The `report` job of the CI tier in the cpu image's packages (module docstring)."""
    if problem := venv_problem(venv, "cpu"):
        return Result("report", True, problem, skipped=True)
    install_fp8rl(venv)
    tier_dir = results / "smoke"
    if not (tier_dir / "runs").is_dir():
        return Result(
            "report", True, f"no finished CI runs under {tier_dir} (.ci/run makes them)", skipped=True
        )
    copy = work / "results_ci"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(results, copy, symlinks=True)
    for stale in ("tables", "plots", "SUMMARY.md", "report.html", "report.json"):
        target = copy / "smoke" / stale
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    argv = [str(venv / "bin" / "fp8rl"), "report", "--config", str(ROOT / "config" / "ci.yaml"),
            "--set", f"results_dir={copy}"]  # fmt: skip
    res = _run(venv, "cpu", argv, work, timeout_s)
    if res.returncode != 0:
        out = (res.stdout + res.stderr)[-TAIL_CHARS:]
        return Result("report", False, f"fp8rl report exited {res.returncode}:\n{out}")
    check = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_reproduced.sh"), str(ROOT / "results" / "published" / "ci"),
         str(copy / "smoke")], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if check.returncode != 0:
        out = (check.stdout + check.stderr)[-TAIL_CHARS:]
        return Result("report", False, f"its tables differ from the published CI tables:\n{out}")
    versions = _versions(venv, "cpu", work, "pandas", "numpy", "scipy", "matplotlib", "torch")
    return Result(
        "report", True, f"the CI report's tables equal the published ones byte for byte ({versions})"
    )


SPLITS = ("train.jsonl", "test.jsonl", "tool_test.jsonl")


def data_job(
    venv: Path, work: Path, hub_record: Path, sets: list[str] = (), timeout_s: int = 900, config: Path = PAPER
) -> Result:
    """The paper tier's `data` job (train image; workflows/data.smk: `fp8rl data --config FILE --out DIR
    --hub RECORD`) from a fetched hub record (`fp8rl fetch data`, which runs outside the images), to its
    end, in the train lock's packages; its splits must equal the same command's in this machine's
    environment, byte for byte."""
    if problem := venv_problem(venv, "train"):
        return Result("data", True, problem, skipped=True)
    install_fp8rl(venv)
    args = ["data", "--config", str(config), *(a for x in sets for a in ("--set", x))]
    outs = {}
    for where, cmd in (
        ("image", [str(venv / "bin" / "fp8rl")]),
        ("host", [sys.executable, "-m", "fp8rl.cli"]),
    ):
        out = work / f"data_{where}"
        shutil.rmtree(out, ignore_errors=True)
        argv = [*cmd, *args, "--out", str(out), "--hub", str(hub_record)]
        res = _run(venv, "train", argv, work, timeout_s) if where == "image" else subprocess.run(
            argv, cwd=work, capture_output=True, text=True, timeout=timeout_s
        )  # fmt: skip
        if res.returncode != 0:
            tail = (res.stdout + res.stderr)[-TAIL_CHARS:]
            return Result("data", False, f"fp8rl data exited {res.returncode} ({where}):\n{tail}")
        outs[where] = out
    differ = [n for n in SPLITS if (outs["image"] / n).read_bytes() != (outs["host"] / n).read_bytes()]
    if differ:
        return Result("data", False, f"{', '.join(differ)} differ from this machine's (under {work})")
    rows = {n: len((outs["image"] / n).read_text().splitlines()) for n in SPLITS}
    versions = _versions(venv, "train", work, "pandas", "pyarrow", "numpy")
    return Result("data", True, f"its splits {rows} equal this machine's byte for byte ({versions})")


EXPORT_LOAD = """
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
assert tok.chat_template, "no chat template"
print(len(tok("1 + 1?")["input_ids"]))
"""
VERL_TOKENIZER_SAVE = (
    "import sys; from transformers import AutoTokenizer; "
    "AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])"
)


def export_job(venv: Path, work: Path, base: Path, tf4_python: Path, timeout_s: int = 600) -> Result:
    """The export a training job ends with (train image; fp8rl.adapters.verl_checkpoint as the job
    script calls it: `python -m fp8rl.adapters.verl_checkpoint export ACTOR TARGET [--tokenizer BASE]`,
    with the base's tokenizer when the run's model is a folder, else verl's converted) of a verl save
    whose tokenizer the train lock's transformers wrote (as verl's checkpoint manager saves it), each
    form loaded by the bfcl image's transformers 4.51.3 (`tf4_python`), as the agent eval first does."""
    from fp8rl.adapters.verl_checkpoint import HF_SUBDIR

    if problem := venv_problem(venv, "train"):
        return Result("export", True, problem, skipped=True)
    install_fp8rl(venv)
    if not Path(tf4_python).is_file():
        return Result("export", True, f"no {tf4_python} (make build/upstream)", skipped=True)
    actor = work / "verl_save" / "actor"
    shutil.rmtree(actor.parent, ignore_errors=True)
    hf = actor / HF_SUBDIR
    py = str(venv / "bin" / "python")
    res = _run(venv, "train", [py, "-c", VERL_TOKENIZER_SAVE, str(base), str(hf)], work, timeout_s)
    if res.returncode != 0:
        return Result(
            "export", False, f"verl's tokenizer save failed:\n{(res.stdout + res.stderr)[-TAIL_CHARS:]}"
        )
    shutil.copyfile(base / "config.json", hf / "config.json")
    (hf / "model.safetensors").write_bytes(b"")  # the weights are not what this job's check reads
    for form, extra in (("with --tokenizer BASE", ["--tokenizer", str(base)]), ("without --tokenizer", [])):
        target = work / ("checkpoint" if extra else "checkpoint_no_tokenizer")
        argv = [py, "-m", "fp8rl.adapters.verl_checkpoint", "export", str(actor), str(target), *extra]
        res = _run(venv, "train", argv, work, timeout_s)
        if res.returncode != 0:
            tail = (res.stdout + res.stderr)[-TAIL_CHARS:]
            return Result("export", False, f"the export {form} exited {res.returncode}:\n{tail}")
        res = subprocess.run([str(tf4_python), "-c", EXPORT_LOAD, str(target)], capture_output=True,
                             text=True, timeout=timeout_s)  # fmt: skip
        if res.returncode != 0:
            tail = res.stderr[-TAIL_CHARS:]
            return Result("export", False, f"transformers 4.51.3 cannot load the export {form}:\n{tail}")
    versions = _versions(venv, "train", work, "transformers", "tokenizers")
    return Result(
        "export", True, f"the export, with and without --tokenizer, loads in transformers 4.51.3 ({versions})"
    )


def ray_node_env(config: Path, sets: list[str]) -> dict[str, str]:
    """What the eval job's Ray is told of its node in a rehearsal: the GPUs and CPUs the config gives an
    eval job (`resources.eval`), so lm-eval's data-parallel vLLM replicas (`ray.remote(num_gpus=TP)`, one
    per `data_parallel_size`) are scheduled here as on the GPU node instead of waiting for GPUs forever;
    and a longer wait for Ray's node to start on a loaded machine."""
    import json

    from fp8rl.config_loader import load_config

    res = load_config(config, list(sets)).resources_for("eval")
    return {
        "RAY_OVERRIDE_RESOURCES": json.dumps({"GPU": max(res.gpus, 1), "CPU": res.threads}),
        "RAY_raylet_start_wait_time_s": "300",
    }


def eval_lm_job(
    venv: Path, work: Path, checkpoint: Path, data: Path, sets: list[str] = (), timeout_s: int = 1800,
    config: Path = PAPER,
) -> Result:  # fmt: skip
    """The paper tier's `eval_lm` job (eval image; workflows/eval.smk: `fp8rl eval lm-eval --config FILE
    --checkpoint CKPT --data DIR --out OUT --on-failure ...`) to its first GPU point: its inputs checked,
    lm-eval's tasks planned from the local data and the `fp8rl-vllm` model built, whose vLLM engine
    then finds no GPU (in each data-parallel replica Ray starts, with `ray_node_env`, when the
    checkpoint's model is evaluated on several replicas). With `--on-failure record` the job records that and exits 0; the rehearsal passes
    when that is the only failure recorded."""
    if problem := venv_problem(venv, "eval"):
        return Result("eval lm-eval", True, problem, skipped=True)
    install_fp8rl(venv)
    out = work / "eval" / "lm_eval.json"
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    argv = [str(venv / "bin" / "fp8rl"), "eval", "lm-eval", "--config", str(config),
            *(a for x in sets for a in ("--set", x)), "--checkpoint", str(checkpoint), "--data", str(data),
            "--out", str(out), "--on-failure", "record"]  # fmt: skip
    res = _run(venv, "eval", argv, work, timeout_s, ray_node_env(config, sets))
    log = res.stdout + res.stderr
    (work / "eval_lm.log").write_text(log)
    if res.returncode != 0:
        return Result(
            "eval lm-eval",
            False,
            f"the job exited {res.returncode} before its first GPU point:\n{log[-TAIL_CHARS:]}",
        )
    import json

    failed = json.loads(out.read_text()).get("failed") or []
    reasons = [f.get("reason", "") for f in failed]
    if "evaluating " not in log or not reasons or not all(GPU_POINT.search(r) for r in reasons):
        return Result(
            "eval lm-eval", False, f"it did not stop at vLLM's GPU (failures {reasons}):\n{log[-TAIL_CHARS:]}"
        )
    versions = _versions(venv, "eval", work, "lm-eval", "vllm", "transformers", "torch")
    where = " in lm-eval's data-parallel replicas under Ray" if "dp_replica" in reasons[0] else ""
    return Result(
        "eval lm-eval",
        True,
        f"tasks planned, stopped where vLLM needs a GPU{where}: {GPU_POINT.search(reasons[0])[0]} ({versions})",
    )


JOBS = {"report": "cpu", "data": "train", "export": "train", "eval-lm": "eval", "eval-agent": "bfcl"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fp8rl.adapters.image_rehearse", description=__doc__.split("\n")[0]
    )
    p.add_argument("job", choices=sorted(JOBS))
    p.add_argument("--venv", type=Path, help="the image's venv (default: build/venv-IMAGE)")
    p.add_argument("--work", type=Path, help="working directory (default: a new temporary one)")
    p.add_argument("--hub", type=Path, help="data: the record `fp8rl fetch data` wrote")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="data: a config override")
    p.add_argument("--base", type=Path, help="export: the base model folder (its tokenizer)")
    p.add_argument("--checkpoint", type=Path, help="eval-lm, eval-agent: a Hugging Face model folder")
    p.add_argument("--data", type=Path, help="eval-lm, eval-agent: the data job's folder")
    args = p.parse_args(argv)
    image = JOBS[args.job]
    venv = (args.venv or ROOT / "build" / f"venv-{image}").resolve()
    work = (args.work or Path(tempfile.mkdtemp(prefix=f"fp8rl-image-{args.job}-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.job == "report":
        result = report_job(venv, work)
    elif args.job == "data":
        if args.hub is None:
            p.error("data needs --hub RECORD (from `fp8rl fetch data`)")
        result = data_job(venv, work, args.hub.resolve(), args.set)
    elif args.job in ("eval-lm", "eval-agent"):
        if args.checkpoint is None or args.data is None:
            p.error(f"{args.job} needs --checkpoint MODEL_DIR and --data DATA_DIR")
        from fp8rl.adapters.image_rehearse_agent import eval_agent_job

        job = eval_lm_job if args.job == "eval-lm" else eval_agent_job
        result = job(venv, work, args.checkpoint.resolve(), args.data.resolve(), args.set)
    else:
        if args.base is None:
            p.error("export needs --base MODEL_DIR")
        result = export_job(venv, work, args.base.resolve(), ROOT / "build" / "tf4-venv" / "bin" / "python")
    print(result.line())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
