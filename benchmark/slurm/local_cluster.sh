#!/usr/bin/env bash
# A real single-node Slurm on this host, for tests and trials: bash benchmark/slurm/local_cluster.sh start|stop|status
#   start  installs Debian's slurm-wlm and munge if missing (needs root and apt-get), writes a minimal slurm.conf for
#          this host (all its CPUs, one partition "local", no systemd, no cgroups: proctrack/linuxproc, task/none),
#          then starts munged, slurmctld and slurmd and waits until the node is idle.
#   stop   stops the three daemons.
# The daemons log to /var/log/slurm/. Nothing else on the host is changed.
set -euo pipefail
CONF=/etc/slurm/slurm.conf
host=$(hostname -s)

start() {
  if [ "$(id -u)" != 0 ]; then echo "error: run as root (the daemons need it)" >&2; exit 2; fi
  if ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
    command -v apt-get > /dev/null || { echo "error: slurm-wlm and munge are missing and there is no apt-get" >&2; exit 2; }
    export DEBIAN_FRONTEND=noninteractive
    local log
    log=$(mktemp)
    { apt-get install -y -q slurm-wlm munge || { apt-get update -q && apt-get install -y -q slurm-wlm munge; }; } \
      > "$log" 2>&1 || { tail -5 "$log" >&2; exit 1; }
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
  chown munge:munge /run/munge
  [ -s /etc/munge/munge.key ] || { mungekey --create --force 2> /dev/null || create-munge-key -f; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  local cpus memory
  cpus=$(nproc)
  memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > "$CONF" <<CONFIG
# written by benchmark/slurm/local_cluster.sh: one node, no systemd, no cgroups
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONFIG
  pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
  pgrep -x slurmctld > /dev/null || slurmctld
  pgrep -x slurmd > /dev/null || slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %t 2> /dev/null | grep -qx idle; then sinfo; return 0; fi
    sleep 1
  done
  echo "error: the node did not come up; see /var/log/slurm/" >&2
  tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
  exit 1
}

stop() {
  for daemon in slurmd slurmctld munged; do
    pkill -x "$daemon" 2> /dev/null || true
  done
  for _ in $(seq 20); do
    pgrep -x slurmd > /dev/null || pgrep -x slurmctld > /dev/null || pgrep -x munged > /dev/null || return 0
    sleep 0.5
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
