#!/usr/bin/env bash
# Did this machine reproduce a published tier? Compares every published CSV table except the throughput
# ones (timings vary run to run) byte for byte and prints the diff of any that differ; exit 1 then.
#   scripts/check_reproduced.sh results/published/smoke results/smoke
#   scripts/check_reproduced.sh results/published/ci results/ci/smoke      # what .ci/run checks
# (CPUINFO=FILE reads the CPU vendor from FILE instead of /proc/cpuinfo: the tests)
# Both tiers must have run in `numerics: reproducible` (the default): the pinned kernel path is what makes
# two x86 machines of one CPU vendor agree bit for bit; an AMD and an Intel CPU do not (docs/numerics.md).
# So where PUBLISHED_DIR was published on another vendor's CPU than this machine's and a publication of
# the same tier from this vendor stands beside it (`PUBLISHED_DIR_amd` or `PUBLISHED_DIR_intel`), the
# tables are compared with that one, and the script says which.
set -euo pipefail
published=${1:?usage: check_reproduced.sh PUBLISHED_DIR RESULTS_DIR}
results=${2:?usage: check_reproduced.sh PUBLISHED_DIR RESULTS_DIR}

vendor_of_publication() {  # "intel", "amd" or "" from the CPU model its provenance.json records
  local model
  model=$(grep -o '"model": *"[^"]*"' "$1/provenance.json" 2>/dev/null | head -n 1 || true)
  case "$model" in *Intel*) echo intel ;; *AMD*) echo amd ;; *) echo "" ;; esac
}
case "$(grep -m 1 '^vendor_id' "${CPUINFO:-/proc/cpuinfo}" 2>/dev/null | awk '{print $3}')" in
  GenuineIntel) here=intel ;; AuthenticAMD) here=amd ;; *) here="" ;;
esac
if [ -n "$here" ] && [ "$(vendor_of_publication "$published")" != "$here" ]; then
  if [ "$(vendor_of_publication "${published}_${here}")" = "$here" ]; then
    echo "comparing with ${published}_${here}: $published was published on another CPU vendor's machine"
    published="${published}_${here}"
  else
    echo "note: $published was published on another CPU vendor's machine than this $here one, and no" \
      "${published}_${here} stands beside it: expect differences in the last bits (docs/numerics.md)" >&2
  fi
fi
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
