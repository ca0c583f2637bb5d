#!/usr/bin/env bash
# A one-node Slurm on this machine, for `--executor slurm` in CI and for trying it out
# (docs/cluster.md). Idempotent: a second `start` finds the daemons up and only waits for the
# node. Debian's packages: munge slurmctld slurmd slurm-client (scripts/setup.sh installs them).
#
#   sudo scripts/slurm_local.sh [start]   # munge, slurm.conf, slurmctld, slurmd; waits for idle
#   sudo scripts/slurm_local.sh stop      # stops exactly the daemons this script started
#   scripts/slurm_local.sh status
#
# One node (this machine's hostname, all its cores) in one partition, `testbed`, whose jobs
# get whole nodes (OverSubscribe=EXCLUSIVE), as a dilated run needs. No cgroups: processes
# are tracked through /proc (proctrack/linuxproc) and tasks are not bound (task/none), so it
# runs in a VM or a container without a cgroup hierarchy of its own. Jobs run as their user;
# the testbed's runs need root, so submit them as root here.
#
# slurm.conf is written to /etc/slurm/slurm.conf only if none is there or the one there is
# this script's (its first line says so): a real cluster's configuration is never touched.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by mrc-testbed scripts/slurm_local.sh"
STATE=/var/lib/mrc-testbed-slurm
RUN=/run/mrc-testbed-slurm
LOG=/var/log/mrc-testbed-slurm
PARTITION="${SLURM_LOCAL_PARTITION:-testbed}"
HOST="$(hostname -s)"

log() { printf 'slurm_local: %s\n' "$*"; }
die() { printf 'slurm_local: %s\n' "$*" >&2; exit 1; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0 $*)"; }

start_munge() {
    command -v munged >/dev/null || die "munged not found: apt-get install munge (scripts/setup.sh)"
    if [ ! -s /etc/munge/munge.key ]; then
        log "creating /etc/munge/munge.key"
        if command -v mungekey >/dev/null; then mungekey --create --keyfile /etc/munge/munge.key
        else dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none; fi
        chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return  # a munged is up (ours or the system's): use it
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    touch "$RUN/munged.ours"
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged did not answer (see /var/log/munge/munged.log)"
}

write_conf() {
    if [ -e "$CONF" ] && [ "$(head -n1 "$CONF")" != "$MARK" ]; then
        die "$CONF exists and is not this script's: this machine has a Slurm of its own; use it"
    fi
    local cpus tmp
    cpus="$(nproc)"
    tmp="$(mktemp)"
    cat >"$tmp" <<EOF
$MARK
ClusterName=testbed
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
NodeName=$HOST CPUs=$cpus State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
EOF
    mkdir -p "$(dirname "$CONF")"
    if ! cmp -s "$tmp" "$CONF" 2>/dev/null; then
        log "writing $CONF (node $HOST, $cpus CPUs, partition $PARTITION)"
        install -m 0644 "$tmp" "$CONF"
        if alive "$RUN/slurmctld.pid"; then scontrol reconfigure >/dev/null || true; fi
    fi
    rm -f "$tmp"
}

start() {
    need_root start
    for cmd in slurmctld slurmd sinfo sbatch; do
        command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install munge slurmctld slurmd slurm-client"
    done
    mkdir -p "$STATE/ctld" "$STATE/d" "$RUN" "$LOG"
    start_munge
    write_conf
    if ! alive "$RUN/slurmctld.pid"; then
        log "starting slurmctld"
        slurmctld
    fi
    if ! alive "$RUN/slurmd.pid"; then
        log "starting slurmd"
        slurmd
    fi
    local state=""
    for _ in $(seq 120); do
        state="$(sinfo -h -n "$HOST" -o %t 2>/dev/null | head -n1 || true)"
        case "$state" in
            idle|alloc|mix|comp) log "node $HOST is $state; partition $PARTITION ready"; return ;;
            down*|drain*|drng*|fail*)
                scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $HOST did not become idle (state '${state:-none}'; see $LOG/)"
}

stop() {
    need_root stop
    local pidfile pid
    for pidfile in "$RUN/slurmd.pid" "$RUN/slurmctld.pid"; do
        if alive "$pidfile"; then
            pid="$(cat "$pidfile")"
            log "stopping $(basename "$pidfile" .pid) ($pid)"
            kill "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    done
    if [ -e "$RUN/munged.ours" ] && alive /run/munge/munged.pid; then
        pid="$(cat /run/munge/munged.pid)"
        log "stopping munged ($pid)"
        kill "$pid"
        rm -f "$RUN/munged.ours"
    fi
}

status() {
    for d in slurmctld slurmd; do
        if alive "$RUN/$d.pid"; then echo "$d: running ($(cat "$RUN/$d.pid"))"; else echo "$d: stopped"; fi
    done
    sinfo 2>/dev/null || true
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac
