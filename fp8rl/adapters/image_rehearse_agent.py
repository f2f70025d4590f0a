"""The paper tier's `eval_agent` job rehearsed in the bfcl image's pinned packages (the whole bfcl lock:
bfcl-eval 2026.3.23, transformers 4.51.3, the CUDA builds of torch 2.6 and vLLM 0.8.5; `build/venv-bfcl`
from scripts/image_venv.sh), run as workflows/eval.smk runs it: `fp8rl eval agent --config FILE
--checkpoint CKPT --data DIR --out OUT --on-failure record`, in the environment the image and the rule's
`apptainer exec` give it (the hub read offline), with the checkpoint in its run's folder (whose summary
names the model, hence the run's `bfcl_handler`). Two passes:

1. To the first GPU point: fp8rl runs `bfcl generate`, whose model handler checks the checkpoint folder,
   loads its tokenizer and config with the image's transformers (`OSSHandler.spin_up_local_server`,
   which prints `BFCL_LOADED`) and starts the image's `vllm serve` on it, whose engine finds no GPU
   (`GPU_POINT`); the job records that failure and exits 0.
2. Past it: the same job with `vllm` on PATH replaced by `VLLM_STAND_IN`, an OpenAI-compatible server
   (stdlib only) that answers every completion with one fixed tool call. bfcl-eval then generates for
   every test case of the categories (its prompt formatting, the tokenizer's counts, its result files),
   `bfcl evaluate` scores them with its AST checker, and fp8rl reads the score files into the job's
   result (fp8rl.evaluate.bfcl `read_scores`): the pass needs a result for every task of `eval.agent`
   and no failure, and the stand-in's environment without fp8rl's CPU numerics pin (`pin_leak`: vLLM
   runs on the GPUs). The scores themselves mean nothing (the answers are canned).

    python -m fp8rl.adapters.image_rehearse eval-agent --checkpoint RUN/checkpoint --data DATA_DIR
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from fp8rl.adapters.image_venv import (
    GPU_POINT,
    PAPER,
    TAIL_CHARS,
    Result,
    _versions,
    image_env,
    install_fp8rl,
    venv_problem,
)
from fp8rl.containers import OFFLINE_ENV

JOB = "eval agent"
# what bfcl-eval's OSSHandler prints once it has loaded the checkpoint's tokenizer and config, before
# it starts `vllm serve`
BFCL_LOADED = "Max context length:"
# `vllm serve MODEL --port P ...` as an OpenAI-compatible server with canned answers (pass 2)
VLLM_STAND_IN = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm-env.json"), "w") as f:
    json.dump(dict(os.environ), f)  # what the job gave vLLM's server (its numerics pin, if any)
args = sys.argv[1:]
model, port = args[1], int(args[args.index("--port") + 1])
ANSWER = '<tool_call>\\n{"name": "stand_in", "arguments": {}}\\n</tool_call>'


class Handler(BaseHTTPRequestHandler):
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # /v1/models: the handler's readiness probe
        self._send({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "stand-in"}]})

    def do_POST(self):  # /v1/completions
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self._send({"id": "cmpl-0", "object": "text_completion", "created": 0, "model": request.get("model"),
                    "choices": [{"index": 0, "text": ANSWER, "finish_reason": "stop", "logprobs": None}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def log_message(self, *a):
        pass


print(f"vllm stand-in: serving {model} on port {port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def pin_leak(env: dict[str, str]) -> dict[str, str]:
    """The variables of fp8rl's CPU numerics pin (fp8rl.numerics) that `env` holds at the pin's values."""
    from fp8rl import numerics

    pins = {**numerics.PINNED_ENV, **numerics.REPRODUCIBLE_RUNTIME_ENV}
    return {k: v for k, v in pins.items() if env.get(k) == v}


def _job(venv: Path, work: Path, checkpoint: Path, data: Path, sets, timeout_s: int, stand_in: Path | None,
         config: Path = PAPER):  # fmt: skip
    """Run the job once (`stand_in`: a folder put first on PATH); `(exit code, log, result or None)`."""
    out = work / "eval" / "agent.json"
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    argv = [str(venv / "bin" / "fp8rl"), "eval", "agent", "--config", str(config),
            *(a for x in sets for a in ("--set", x)), "--checkpoint", str(checkpoint), "--data", str(data),
            "--out", str(out), "--on-failure", "record"]  # fmt: skip
    # what `apptainer exec` of the rule adds (fp8rl.containers.image_env): the hub cache, read offline
    env = {**image_env(venv, "bfcl", work, stand_in), "HF_HOME": str(work / "hf_home"), **OFFLINE_ENV}
    res = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
    log = res.stdout + res.stderr
    (work / ("eval_agent_stand_in.log" if stand_in else "eval_agent.log")).write_text(log)
    return res.returncode, log, (json.loads(out.read_text()) if out.is_file() else None)


def eval_agent_job(
    venv: Path, work: Path, checkpoint: Path, data: Path, sets: list[str] = (), timeout_s: int = 1800,
    config: Path = PAPER,
) -> Result:  # fmt: skip
    """Both passes of the module docstring: passed when the first stops only at vLLM's GPU with the
    checkpoint loaded, and the second writes a result for every task with none failed."""
    if problem := venv_problem(venv, "bfcl"):
        return Result(JOB, True, problem, skipped=True)
    install_fp8rl(venv)
    rc, log, result = _job(venv, work, checkpoint, data, sets, timeout_s, None, config)
    if rc != 0 or result is None:
        return Result(JOB, False, f"the job exited {rc} before its first GPU point:\n{log[-TAIL_CHARS:]}")
    points = list(GPU_POINT.finditer(log))  # the last: vLLM's engine, after its import's warnings
    gpu = points[-1] if points else None
    if BFCL_LOADED not in log or not gpu or not result.get("failed"):
        return Result(
            JOB,
            False,
            f"bfcl-eval did not reach vLLM's GPU with the checkpoint loaded (failures {result.get('failed')}):"
            f"\n{log[-TAIL_CHARS:]}",
        )
    loaded = log[log.index(BFCL_LOADED) :].splitlines()[0]

    bin_dir = work / "stand_in_bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    server = bin_dir / "vllm"
    server.write_text(f"#!{venv / 'bin' / 'python'}\n{VLLM_STAND_IN}")
    server.chmod(0o755)
    rc, log2, result2 = _job(venv, work, checkpoint, data, sets, timeout_s, bin_dir, config)
    if rc != 0 or result2 is None or result2.get("failed") or not result2.get("results"):
        failed = (result2 or {}).get("failed")
        return Result(
            JOB,
            False,
            f"with vLLM's server stood in, the job did not run to its end (exit {rc}, failures {failed}):\n"
            f"{log2[-TAIL_CHARS:]}",
        )
    pinned = pin_leak(json.loads((bin_dir / "vllm-env.json").read_text()))
    if pinned:
        return Result(JOB, False, f"the CPU numerics pin reached vllm serve on the GPUs: {pinned}")
    scored = ", ".join(f"{r['task']} n={r['n']}" for r in result2["results"])
    versions = _versions(venv, "bfcl", work, "bfcl-eval", "transformers", "vllm", "torch")
    return Result(
        JOB,
        True,
        f"bfcl-eval's handler loaded the checkpoint ({loaded}) and started vllm serve, which stopped where it "
        f"needs a GPU: {gpu[0]}; with vLLM's server stood in, generate, evaluate and the score read ran to "
        f"the job's end ({scored}) ({versions})",
    )
