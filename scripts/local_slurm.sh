#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, to try and test the cluster path (profiles/slurm) without
# one: munge, slurmdbd with a MariaDB database (job accounting: the Slurm executor reads job states with
# `sacct` and checks the account with `sacctmgr`), slurmctld and slurmd, from Debian's packages.
#   sudo scripts/local_slurm.sh start     # install what is missing, configure, start; wait for an idle node
#   sudo scripts/local_slurm.sh status    # sinfo and the account, or exit 1 when the cluster is not up
#   sudo scripts/local_slurm.sh stop      # cancel the jobs, stop the daemons this script started
# One node with this machine's CPUs and memory (`slurmd -C`), one partition and one account, both named
# by the environment: SLURM_PARTITION (default `cpu`) and SLURM_ACCOUNT (default `fp8rl`), the names a
# config's `resources.*.partition` / `account` give (config/ci_slurm.yaml). No cgroup plugins (processes
# are tracked through /proc), so it runs in a container without systemd. Idempotent: `start` on a running
# cluster only checks it; `stop` stops only the daemons `start` started (MariaDB or munge that already
# ran are left alone). The configuration it writes (/etc/slurm/slurm.conf, slurmdbd.conf) carries a marker;
# it refuses to overwrite a Slurm configuration it did not write.
set -euo pipefail

PARTITION="${SLURM_PARTITION:-cpu}"
ACCOUNT="${SLURM_ACCOUNT:-fp8rl}"
CLUSTER=fp8rl-local
MARK="# written by fp8rl scripts/local_slurm.sh: a throwaway one-node cluster"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
STATE=/run/fp8rl-slurm # which daemons `start` started, for `stop`
LOGS=/var/log/slurm
NODE="$(hostname -s)"
DB_PASS=fp8rl-local-slurm # a database on this machine's socket only (no TCP), for slurmdbd

die() {
  echo "local_slurm.sh: error: $*" >&2
  exit 2
}
say() { echo "local_slurm.sh: $*"; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "must run as root: it installs Debian packages, writes /etc/slurm and starts \
system daemons (munged, mariadbd, slurmdbd, slurmctld, slurmd). Run it with sudo, or as root in a container."
}

# Poll a command for up to $1 seconds; true once it succeeds.
wait_for() {
  local secs=$1
  shift
  local i
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  return 1
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local missing=()
  local cmd
  for cmd in munged mariadbd slurmdbd slurmctld slurmd sbatch sacct sacctmgr; do
    command -v "$cmd" >/dev/null || missing+=("$cmd")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them: install \
Slurm (slurmctld, slurmd, slurmdbd, the client), munge and MariaDB with this system's package manager"
  say "installing munge, mariadb-server, slurmdbd, slurmctld, slurmd (Debian packages)"
  # The packages must not start their services (no init system here; this script starts them itself).
  local policy=/usr/sbin/policy-rc.d own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
  fi
  local rc=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        munge mariadb-server slurmdbd slurmctld slurmd slurm-client
  } >/tmp/local_slurm.apt.log 2>&1 || rc=$?
  [ -n "$own_policy" ] && rm -f "$policy"
  [ "$rc" -eq 0 ] || die "apt-get failed (exit $rc); its output: /tmp/local_slurm.apt.log"
}

# A file this script may (re)write: absent, or written by it before.
ours() { [ ! -e "$1" ] || grep -qF "$MARK" "$1"; }

write_config() {
  ours "$CONF" || die "$CONF exists and was not written by this script: this machine has a Slurm \
configuration of its own; use that cluster (or move the file away to try this one)"
  ours "$DBD_CONF" || die "$DBD_CONF exists and was not written by this script; move it away first"
  # This machine's CPUs and memory as slurmd sees them; Slurm refuses a node that reports less than its
  # configured RealMemory, so leave 5 % for the daemons.
  local cpus mem
  cpus=$(slurmd -C | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
  mem=$(slurmd -C | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
  [ -n "$cpus" ] && [ -n "$mem" ] || die "could not read CPUs and RealMemory from 'slurmd -C'"
  mem=$((mem * 95 / 100))
  mkdir -p /etc/slurm "$LOGS" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
  chown slurm:slurm "$LOGS" /var/lib/slurm/slurmctld
  cat >"$CONF.tmp" <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
# No cgroups: a container without systemd has no delegated cgroup tree. Processes are tracked via /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
# Accounting in slurmdbd: sacct answers for finished jobs, sacctmgr knows the account.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# A job past its time limit gets SIGTERM, then SIGKILL KillWait seconds later (Slurm's defaults).
KillWait=30
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
  cat >"$DBD_CONF.tmp" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  chown slurm:slurm "$DBD_CONF.tmp"
  chmod 600 "$DBD_CONF.tmp"
  mv "$DBD_CONF.tmp" "$DBD_CONF"
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (the munge package creates it)"
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged >>"$LOGS/munged.start.log" 2>&1 ||
    die "munged did not start; see $LOGS/munged.start.log and /var/log/munge/munged.log"
  echo munged >>"$STATE/started"
  wait_for 20 sh -c 'munge -n </dev/null | unmunge' || die "munged started but does not answer"
}

start_mariadb() {
  if mariadb-admin ping >/dev/null 2>&1; then return 0; fi
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  # On this machine's socket only; setsid: not a child of this script's session.
  setsid mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
    >>"$LOGS/mariadbd.log" 2>&1 </dev/null &
  echo mariadbd >>"$STATE/started"
  wait_for 60 mariadb-admin ping || die "mariadbd did not come up in 60 s; see $LOGS/mariadbd.log"
  mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
}

start_slurmdbd() {
  if pid_alive /run/slurmdbd.pid; then return 0; fi
  slurmdbd || die "slurmdbd did not start; see $LOGS/slurmdbd.log"
  echo slurmdbd >>"$STATE/started"
  wait_for 60 sacctmgr -n list cluster || die "slurmdbd does not answer sacctmgr; see $LOGS/slurmdbd.log"
}

# The cluster, the account and this user's association in it (what AccountingStorageEnforce checks).
add_associations() {
  local user
  [ -n "$(sacctmgr -n -P list cluster "$CLUSTER" format=cluster)" ] ||
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  [ -n "$(sacctmgr -n -P list account "$ACCOUNT" format=account)" ] ||
    sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description="fp8rl local cluster" \
      organization=fp8rl >/dev/null
  for user in root ${SUDO_USER:-}; do
    [ -n "$(sacctmgr -n -P list assoc user="$user" account="$ACCOUNT" format=user)" ] ||
      sacctmgr -i add user "$user" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null
  done
}

start_slurm() {
  if ! pid_alive /run/slurmctld.pid; then
    slurmctld || die "slurmctld did not start; see $LOGS/slurmctld.log"
    echo slurmctld >>"$STATE/started"
  fi
  wait_for 60 scontrol ping || die "slurmctld does not answer 'scontrol ping'; see $LOGS/slurmctld.log"
  if ! pid_alive /run/slurmd.pid; then
    slurmd || die "slurmd did not start; see $LOGS/slurmd.log"
    echo slurmd >>"$STATE/started"
  fi
  local state=""
  for _ in $(seq 120); do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    case "$state" in
      idle | mixed | allocated) break ;;
      down* | drain* | drained*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.5
  done
  case "$state" in idle | mixed | allocated) ;; *)
    die "node $NODE is '$state' after 60 s (not idle); see $LOGS/slurmd.log, $LOGS/slurmctld.log" ;;
  esac
}

cmd_start() {
  need_root
  install_packages
  mkdir -p "$STATE" "$LOGS"
  touch "$STATE/started"
  write_config
  start_munge
  start_mariadb
  start_slurmdbd
  add_associations
  start_slurm
  say "up: node $NODE in partition '$PARTITION', account '$ACCOUNT' (sinfo, squeue, sacct work now)"
  sinfo
}

# Stop a daemon by its pid file, waiting for it to exit.
stop_pid() {
  local name=$1 pidfile=$2 pid
  pid_alive "$pidfile" || return 0
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  wait_for 30 sh -c "! kill -0 $pid 2>/dev/null" || say "$name (pid $pid) still runs after 30 s"
}

started() { [ -f "$STATE/started" ] && grep -qx "$1" "$STATE/started"; }

cmd_stop() {
  need_root
  if scontrol ping >/dev/null 2>&1; then
    scancel --full --quiet --cluster="$CLUSTER" --user=root 2>/dev/null || true
    [ -n "${SUDO_USER:-}" ] && { scancel --full --quiet --user="$SUDO_USER" 2>/dev/null || true; }
  fi
  started slurmd && stop_pid slurmd /run/slurmd.pid
  started slurmctld && stop_pid slurmctld /run/slurmctld.pid
  started slurmdbd && stop_pid slurmdbd /run/slurmdbd.pid
  if started mariadbd && mariadb-admin ping >/dev/null 2>&1; then
    mariadb-admin shutdown || stop_pid mariadbd /run/mysqld/mysqld.pid
  fi
  started munged && stop_pid munged /run/munge/munged.pid
  rm -f "$STATE/started"
  say "stopped"
}

cmd_status() {
  local state
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null) || {
    echo "local_slurm.sh: not up (slurmctld does not answer)" >&2
    exit 1
  }
  sinfo
  sacctmgr -n -P list assoc account="$ACCOUNT" format=cluster,account,user
  case "$state" in idle | mixed | allocated) ;; *) exit 1 ;; esac
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 start|stop|status   (SLURM_PARTITION, SLURM_ACCOUNT name the partition and account)" >&2
    exit 2
    ;;
esac
