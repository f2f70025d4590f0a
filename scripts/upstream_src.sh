#!/usr/bin/env bash
# Make build/upstream: the Python sources of the pinned releases the paper path runs but the test
# environments cannot install (megatron-core and Transformer Engine need CUDA and Python 3.12 wheels;
# bfcl-eval pins numpy 1.26; mbridge, with einops, is the train image's bridge to megatron-core), unpacked from their wheels for the tests that read their code, and
# build/tf4-venv: transformers 4.51.3 (the bfcl image's) without torch, to read configs as it does.
#   scripts/upstream_src.sh                 # versions from containers/*/requirements.lock
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
TARGET="${FP8RL_UPSTREAM_SRC:-build/upstream}"
pin() { grep -E "^$1==" "$2" | head -n 1 | sed -E 's/^[^=]+==([^ ]+).*/\1/'; }
MCORE=$(pin megatron-core containers/train/requirements.lock)
TE=$(pin transformer-engine containers/train/requirements.lock)
MBRIDGE=$(pin mbridge containers/train/requirements.lock)
EINOPS=$(pin einops containers/train/requirements.lock)
BFCL=$(pin bfcl-eval containers/bfcl/requirements.lock)
TF4=$(pin transformers containers/bfcl/requirements.lock)
rm -rf "$TARGET.partial" && mkdir -p "$TARGET.partial/wheels"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 -d "$TARGET.partial/wheels" \
    "megatron-core==$MCORE" "transformer-engine==$TE" "bfcl-eval==$BFCL" "mbridge==$MBRIDGE" "einops==$EINOPS"
for whl in "$TARGET.partial"/wheels/*.whl; do
    "$PY" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
[z.extract(n, sys.argv[2]) for n in z.namelist() if n.endswith(('.py', '.json', '.txt', 'METADATA'))]" "$whl" "$TARGET.partial"
done
rm -rf "$TARGET.partial/wheels" "$TARGET" && mv "$TARGET.partial" "$TARGET"
rm -rf build/tf4-venv
"$PY" -m venv build/tf4-venv
build/tf4-venv/bin/pip install --quiet --disable-pip-version-check "transformers==$TF4"
echo "upstream sources ready: $TARGET (megatron-core $MCORE, transformer-engine $TE, bfcl-eval $BFCL," \
     "mbridge $MBRIDGE, einops $EINOPS);" \
     "build/tf4-venv (transformers $TF4)"
