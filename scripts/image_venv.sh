#!/usr/bin/env bash
# Make build/venv-IMAGE: a virtual environment with an image's pinned Python packages, installed as its
# Dockerfile installs them (`pip install --require-hashes --no-deps -r containers/IMAGE/requirements.lock`,
# then fp8rl with --no-deps), for rehearsing that image's jobs on a machine without the image
# (fp8rl.adapters.image_rehearse). The interpreter is $PY: the image's Python (the cpu image's 3.11; the
# GPU images' Ubuntu 3.12, PY=python3.12). The cpu lock's torch+cpu comes from PyTorch's CPU index
# (FP8RL_TORCH_INDEX, as in its Dockerfile) or a local copy (pip's find-links). A $PY that does not run
# (a pyenv shim of a version not selected) is looked up among pyenv's installed versions.
#   scripts/image_venv.sh cpu                      # -> build/venv-cpu
#   PY=python3.12 CPU_ONLY=1 scripts/image_venv.sh train     # the train lock but its CUDA builds
#   PY=python3.12 scripts/image_venv.sh bfcl       # the bfcl lock, CUDA builds of torch and vLLM included
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${1:?usage: scripts/image_venv.sh IMAGE [TARGET]}"
TARGET="${2:-build/venv-$IMAGE}"
LOCK="containers/$IMAGE/requirements.lock"
PY="${PY:-python3}"
[ -f "$LOCK" ] || { echo "error: no $LOCK" >&2; exit 2; }
if ! "$PY" -c '' 2>/dev/null; then
    found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"${PY#python}"*/bin/"$PY" 2>/dev/null | tail -n 1 || true)
    [ -n "$found" ] || { echo "error: no $PY (the $IMAGE image's Python) on this machine" >&2; exit 2; }
    PY="$found"
fi
EXTRA=()
if [ "$IMAGE" = cpu ] && [ -n "${FP8RL_TORCH_INDEX:-}" ]; then
    EXTRA=(--extra-index-url "$FP8RL_TORCH_INDEX")
fi
# CPU_ONLY=1: leave out the lock's CUDA builds (a GPU image's torch, its NVIDIA libraries, triton, vLLM,
# FlashInfer, Transformer Engine), listed in TARGET/.left-out; the jobs that import none of them (data,
# export) still run in the rest
REQS="$LOCK"
GPU_ONLY='^(torch|torchvision|torchaudio|triton|vllm|xformers|flashinfer-[a-z-]+|nvidia-[a-z0-9-]+|transformer-engine[a-z0-9-]*|flash-attn|deep-gemm|cupy-cuda[0-9x]+)=='
rm -rf "$TARGET"
"$PY" -m venv "$TARGET"
if [ "${CPU_ONLY:-0}" = 1 ]; then
    REQS="$TARGET/requirements.cpu-only.lock"
    awk -v re="$GPU_ONLY" '/^[A-Za-z0-9]/ { skip = ($0 ~ re) } !skip' "$LOCK" > "$REQS"
    grep -E "$GPU_ONLY" "$LOCK" | sed 's/ .*//' > "$TARGET/.left-out"
    echo "left out (CUDA builds): $(wc -l < "$TARGET/.left-out") packages, listed in $TARGET/.left-out"
fi
"$TARGET/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
    "${EXTRA[@]}" -r "$REQS"
"$TARGET/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation .
sha256sum "$LOCK" > "$TARGET/.lock-sha256"  # written last: the venv is complete and from this lock
echo "image venv ready: $TARGET ($IMAGE lock, $(du -sh "$TARGET" | cut -f1))"
