#!/usr/bin/env bash
# The cluster path in CI (.ci/run's last step; as root): start a real one-node Slurm cluster on this
# machine (scripts/local_slurm.sh), run the CI tier through `--profile profiles/slurm` (each rule an
# sbatch job, states from sacct; config/ci_slurm.yaml names the partition and account and puts the
# results in results/ci_slurm/), check its tables against results/published/ci byte for byte like the
# local run, run the cluster tests (a training job past its Slurm time limit resumes from its
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
trap 'scripts/local_slurm.sh stop || true' EXIT
scripts/local_slurm.sh start
t_up=$(date +%s)

# The executor's first status query 5 s after a submission instead of 40: the CI tier's jobs take
# seconds to a minute, and every level of the DAG would otherwise wait for the query.
rm -rf results/ci_slurm
"$BIN/snakemake" --profile profiles/slurm --configfile config/ci.yaml config/ci_slurm.yaml \
  --slurm-init-seconds-before-status-checks 5
test -s results/ci_slurm/smoke/report.html
scripts/check_reproduced.sh results/published/ci results/ci_slurm/smoke
"$BIN/fp8rl" check results/ci_slurm/smoke --against results/published/ci
t_dag=$(date +%s)

FP8RL_SLURM_REQUIRED=1 "$BIN/python" -m pytest -q -p no:cacheprovider tests/workflow/test_slurm_cluster.py
t_end=$(date +%s)
echo "ci_slurm.sh: cluster up in $((t_up - t0)) s, the CI tier through Slurm $((t_dag - t_up)) s," \
  "the cluster tests $((t_end - t_dag)) s; $((t_end - t0)) s in all"
