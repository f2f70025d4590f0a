#!/usr/bin/env bash
# Make build/verl-site: verl 0.9.1 and the light packages its configs and loss registry import, installed
# without their dependencies so they sit beside the main .venv (torch, transformers, pandas come from
# there). The adapter tests (tests/unit/adapters) put this folder on sys.path and skip without it.
#   scripts/verl_test_env.sh            # into build/verl-site with .venv/bin/python
#   PY=python3 FP8RL_VERL_SITE=/tmp/vs scripts/verl_test_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
TARGET="${FP8RL_VERL_SITE:-build/verl-site}"
rm -rf "$TARGET.partial"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$TARGET.partial" \
    -r scripts/verl-test-requirements.txt
rm -rf "$TARGET"
mv "$TARGET.partial" "$TARGET"
echo "verl test environment ready: $TARGET ($(du -sh "$TARGET" | cut -f1))"
