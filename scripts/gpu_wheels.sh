#!/usr/bin/env bash
# Download the wheels of scripts/gpu-wheels.txt for the lent GPU machine (CPython 3.12, manylinux x86_64)
# into .whl/ (git-ignored), which scripts/gpu_checks.sh installs there. Run here, where PyPI is reachable:
#   scripts/gpu_wheels.sh && du -sh .whl     # then carry .whl with the device call
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
rm -rf .whl && mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
grep -v '^\s*#' scripts/gpu-wheels.txt | grep -v '^\s*$' | while read -r req; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$req"
done
ls -1 .whl
