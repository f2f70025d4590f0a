#!/usr/bin/env bash
# Did this machine reproduce a published tier? Compares every published CSV table except the throughput
# ones (timings vary run to run) byte for byte and prints the diff of any that differ; exit 1 then.
#   scripts/check_reproduced.sh results/published/smoke results/smoke
#   scripts/check_reproduced.sh results/published/ci results/ci/smoke      # what .ci/run checks
# Both tiers must have run in `numerics: reproducible` (the default): the pinned kernel path is what makes
# two x86 machines agree bit for bit (docs/numerics.md).
set -euo pipefail
published=${1:?usage: check_reproduced.sh PUBLISHED_DIR RESULTS_DIR}
results=${2:?usage: check_reproduced.sh PUBLISHED_DIR RESULTS_DIR}
status=0
checked=0
for want in "$published"/tables/*.csv; do
  [ -f "$want" ] || continue
  table=$(basename "$want")
  case "$table" in throughput*) continue ;; esac  # seconds and tokens/s: these vary run to run
  got="$results/tables/$table"
  checked=$((checked + 1))
  if [ ! -f "$got" ]; then
    echo "not reproduced: $got is missing (published: $want)" >&2
    status=1
  elif ! diff -u "$want" "$got"; then
    echo "not reproduced: $got differs from $want (diff above)" >&2
    status=1
  fi
done
if [ "$checked" -eq 0 ]; then
  echo "error: no published table to compare under $published/tables" >&2
  exit 2
fi
[ "$status" -eq 0 ] && echo "reproduced: $checked table(s) of $published byte for byte in $results"
exit "$status"
