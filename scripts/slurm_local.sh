#!/usr/bin/env bash
# A one-node Slurm on this machine, for `--executor slurm` in CI and for trying it out
# (docs/cluster.md). Idempotent: a second `start` finds the daemons up and only waits for the
# node. Debian's packages: munge slurmctld slurmd slurm-client (scripts/setup.sh installs them).
#
#   sudo scripts/slurm_local.sh [start]   # munge, slurm.conf, slurmctld, slurmd; waits for idle
#   sudo scripts/slurm_local.sh stop      # stops exactly the daemons this script started
#   scripts/slurm_local.sh status
#   sudo scripts/slurm_local.sh start --two-nodes   # also nodes tbnode1, tbnode2 (below)
#
# One node (this machine's hostname, all its cores) in one partition, `testbed`, whose jobs
# get whole nodes (OverSubscribe=EXCLUSIVE), as a dilated run needs. No cgroups: processes
# are tracked through /proc (proctrack/linuxproc) and tasks are not bound (task/none), so it
# runs in a VM or a container without a cgroup hierarchy of its own. Jobs run as their user;
# the testbed's runs need root, so submit them as root here.
#
# slurm.conf is written to /etc/slurm/slurm.conf only if none is there or the one there is
# this script's (its first line says so): a real cluster's configuration is never touched.
#
# --two-nodes adds two more nodes on this same machine, tbnode1 and tbnode2, in a partition
# `pair`: each a slurmd in its own network namespace (an address on a bridge, tbslurm0,
# 10.251.0.0/24) and UTS namespace (its own hostname), so one job array spreads over two
# "machines" that share this one's cores. It proves orchestration, never timing.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by mrc-testbed scripts/slurm_local.sh"
STATE=/var/lib/mrc-testbed-slurm
RUN=/run/mrc-testbed-slurm
LOG=/var/log/mrc-testbed-slurm
PARTITION="${SLURM_LOCAL_PARTITION:-testbed}"
HOST="$(hostname -s)"
TWO=0
BRIDGE=tbslurm0
NET=10.251.0
PAIR=(tbnode1 tbnode2)

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
    local cpus tmp ctld="$HOST" i
    cpus="$(nproc)"
    tmp="$(mktemp)"
    [ "$TWO" = 1 ] && ctld="$HOST($NET.1)"  # the namespaced nodes reach it on the bridge
    cat >"$tmp" <<EOF
$MARK
ClusterName=testbed
SlurmctldHost=$ctld
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
SlurmdSpoolDir=$STATE/d-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
NodeName=$HOST CPUs=$cpus State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
EOF
    if [ "$TWO" = 1 ]; then
        for i in 1 2; do
            echo "NodeName=${PAIR[$((i - 1))]} NodeAddr=$NET.1$i CPUs=$cpus State=UNKNOWN" >>"$tmp"
        done
        echo "PartitionName=pair Nodes=${PAIR[0]},${PAIR[1]} Default=NO MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE" >>"$tmp"
    fi
    mkdir -p "$(dirname "$CONF")"
    if ! cmp -s "$tmp" "$CONF" 2>/dev/null; then
        log "writing $CONF (node $HOST, $cpus CPUs, partition $PARTITION$([ "$TWO" = 1 ] && echo "; pair: ${PAIR[*]}"))"
        # Nodes added or removed need the daemons restarted, not reconfigured.
        if [ -e "$CONF" ]; then stop_daemons; fi
        install -m 0644 "$tmp" "$CONF"
    fi
    rm -f "$tmp"
}

pair_up() {
    # The bridge and one namespace a node: an address each, this machine at .1.
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$NET.1/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    local i name
    for i in 1 2; do
        name="${PAIR[$((i - 1))]}"
        if [ ! -e "/run/netns/$name" ]; then
            ip netns add "$name"
            ip link add "tbsl$i" type veth peer name eth0 netns "$name"
            ip link set "tbsl$i" master "$BRIDGE" up
            ip -n "$name" addr add "$NET.1$i/24" dev eth0
            ip -n "$name" link set eth0 up
            ip -n "$name" link set lo up
        fi
    done
}

pair_slurmd() {
    local name
    for name in "${PAIR[@]}"; do
        mkdir -p "$STATE/d-$name"
        if ! alive "$RUN/slurmd-$name.pid"; then
            log "starting slurmd $name (network and UTS namespaces of its own)"
            # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup mount slurmd reads
            nsenter --net="/run/netns/$name" unshare --uts sh -c "hostname $name && exec slurmd"
        fi
    done
}

pair_down() {
    local i name
    for i in 1 2; do
        name="${PAIR[$((i - 1))]}"
        if [ -e "/run/netns/$name" ]; then ip netns del "$name"; fi  # its veth goes with it
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

wait_idle() {
    local node="$1" state=""
    for _ in $(seq 120); do
        state="$(sinfo -h -n "$node" -o %t 2>/dev/null | head -n1 || true)"
        case "$state" in
            idle|alloc|mix|comp) log "node $node is $state"; return ;;
            down*|drain*|drng*|fail*)
                scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $node did not become idle (state '${state:-none}'; see $LOG/)"
}

start() {
    need_root start
    for cmd in slurmctld slurmd sinfo sbatch; do
        command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install munge slurmctld slurmd slurm-client"
    done
    mkdir -p "$STATE/ctld" "$STATE/d-$HOST" "$RUN" "$LOG"
    start_munge
    write_conf
    # The bridge first: slurmctld's address is on it. Without --two-nodes, none is left.
    if [ "$TWO" = 1 ]; then pair_up; else pair_down; fi
    if ! alive "$RUN/slurmctld.pid"; then
        log "starting slurmctld"
        slurmctld
    fi
    if ! alive "$RUN/slurmd-$HOST.pid"; then
        log "starting slurmd"
        slurmd
    fi
    if [ "$TWO" = 1 ]; then pair_slurmd; fi
    wait_idle "$HOST"
    if [ "$TWO" = 1 ]; then wait_idle "${PAIR[0]}"; wait_idle "${PAIR[1]}"; fi
    log "partition $PARTITION ready$([ "$TWO" = 1 ] && echo "; partition pair ready")"
}

stop_daemons() {
    local pidfile pid
    for pidfile in "$RUN"/slurmd*.pid "$RUN/slurmctld.pid"; do
        if alive "$pidfile"; then
            pid="$(cat "$pidfile")"
            log "stopping $(basename "$pidfile" .pid) ($pid)"
            kill "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    done
}

stop() {
    need_root stop
    local pid
    stop_daemons
    pair_down
    if [ -e "$RUN/munged.ours" ] && alive /run/munge/munged.pid; then
        pid="$(cat /run/munge/munged.pid)"
        log "stopping munged ($pid)"
        kill "$pid"
        rm -f "$RUN/munged.ours"
    fi
}

status() {
    local f
    if alive "$RUN/slurmctld.pid"; then echo "slurmctld: running ($(cat "$RUN/slurmctld.pid"))"
    else echo "slurmctld: stopped"; fi
    for f in "$RUN"/slurmd*.pid; do
        if alive "$f"; then echo "$(basename "$f" .pid): running ($(cat "$f"))"; fi
    done
    sinfo 2>/dev/null || true
}

if [ "${2:-}" = "--two-nodes" ]; then TWO=1; fi
case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac
