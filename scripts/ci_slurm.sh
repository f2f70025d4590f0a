#!/usr/bin/env bash
# The cluster path in CI (.ci/run's last step; as root): start a real one-node Slurm cluster on this
# machine (scripts/local_slurm.sh), run the CI tier through `--profile profiles/slurm` (each rule an
# sbatch job, states from sacct; config/ci_slurm.yaml names the partition and account and puts the
# results in results/ci_slurm/), check its tables against results/published/ci byte for byte like the
# local run, run the cluster tests alongside (a training job past its Slurm time limit resumes from its
# checkpoint: tests/workflow/test_slurm_cluster.py), and stop the cluster whatever happened.
#   sudo scripts/ci_slurm.sh                  # with .venv
#   sudo VENV=.venv-ci scripts/ci_slurm.sh    # what .ci/run does
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
BIN="$VENV/bin"
[ -x "$BIN/snakemake" ] || {
  echo "ci_slurm.sh: error: no $BIN/snakemake; run 'make install VENV=$VENV' first" >&2
  exit 2
}
t0=$(date +%s)
tests_pid=""
cleanup() {
  # the cluster tests' process group (pytest, its Snakemake and local trainer), then the daemons
  [ -n "$tests_pid" ] && kill -- -"$tests_pid" 2>/dev/null && wait "$tests_pid" 2>/dev/null
  scripts/local_slurm.sh stop || true
}
trap cleanup EXIT
scripts/local_slurm.sh start
t_up=$(date +%s)

# The cluster tests run meanwhile, in their own working directories: the CI tier's jobs leave the node's
# CPUs idle much of the time (one-thread jobs, the executor's status queries between DAG levels).
mkdir -p results
tests_log=results/ci_slurm_tests.log
FP8RL_SLURM_REQUIRED=1 setsid -w "$BIN/python" -m pytest -q -p no:cacheprovider \
  tests/workflow/test_slurm_cluster.py >"$tests_log" 2>&1 &
tests_pid=$!

# The executor's first status query 5 s after a submission instead of 40: the CI tier's jobs take
# seconds to a minute, and every level of the DAG would otherwise wait for the query.
rm -rf results/ci_slurm
"$BIN/snakemake" --profile profiles/slurm --configfile config/ci.yaml config/ci_slurm.yaml \
  --slurm-init-seconds-before-status-checks 5
test -s results/ci_slurm/smoke/report.html
scripts/check_reproduced.sh results/published/ci results/ci_slurm/smoke
t_dag=$(date +%s)

rc=0
wait "$tests_pid" || rc=$?
tests_pid=""
cat "$tests_log"
t_end=$(date +%s)
echo "ci_slurm.sh: cluster up in $((t_up - t0)) s, the CI tier through Slurm $((t_dag - t_up)) s" \
  "(the cluster tests alongside, $((t_end - t_up)) s); $((t_end - t0)) s in all"
[ "$rc" -eq 0 ] || {
  echo "ci_slurm.sh: the cluster tests failed (exit $rc; output above)" >&2
  exit 1
}
