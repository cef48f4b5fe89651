#!/usr/bin/env bash
# A real single-node Slurm (Debian's Slurm 22.05 + munge) for the integration tests.
#
#   tests/slurm/cluster.sh install   apt-get the daemons (idempotent; skips when present)
#   tests/slurm/cluster.sh start     write the config, start munged/slurmctld/slurmd, wait for idle
#   tests/slurm/cluster.sh stop      stop the daemons this script started (by their pid files)
#   tests/slurm/cluster.sh status    sinfo, or exit 1 when the cluster is not up
#
# One node, `localhost`, sized from this machine (CPUs from nproc, RealMemory below `free -m`),
# with partitions `gpu` (generation/measurement, fake GPUs), `sandbox` (scoring of model-written
# code, CPU only) and `cpu` (light jobs). The fake GPUs are char devices made with mknod: Slurm
# schedules them and sets CUDA_VISIBLE_DEVICES; nothing on them computes. No systemd: the daemons
# run as plain processes, root, state under $QL_SLURM_DIR. Why each setting is there: docs/slurm.md
# and the comments beside it below.
set -euo pipefail

DIR=${QL_SLURM_DIR:-/tmp/quantladder-slurm}
N_GPUS=${QL_SLURM_GPUS:-4}
GPU_MODEL=${QL_SLURM_GPU_MODEL:-fakegpu}
CONF=/etc/slurm/slurm.conf
PACKAGES="slurmctld slurmd slurm-client munge"

log() { echo "cluster.sh: $*" >&2; }

have_binaries() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null
}

install() {
    if have_binaries; then
        log "slurm and munge already installed ($(slurmctld -V))"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # The packages' postinst scripts try to start services; without systemd that only warns.
    apt-get install -y -qq --no-install-recommends $PACKAGES >"$DIR.apt.log" 2>&1 || {
        tail -30 "$DIR.apt.log" >&2; log "apt-get install failed"; exit 1; }
    have_binaries || { log "packages installed but binaries missing"; exit 1; }
    log "installed $(slurmctld -V)"
}

write_config() {
    mkdir -p "$DIR"/{state,spool,log,munge,munge-run,dev}
    local cpus mem
    cpus=$(nproc)
    # Leave the OS and the test head some memory; Slurm drains a node that reports less than this.
    mem=$(free -m | awk '/^Mem:/ {print int($2 * 0.8)}')

    # munge: key/log/seed in a 0700 dir owned by munge, socket dir 0711.
    chown munge:munge "$DIR/munge" "$DIR/munge-run"
    chmod 0700 "$DIR/munge"
    chmod 0711 "$DIR/munge-run"
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi

    # Fake GPUs: several, so that a pending GPU job cannot hold the shared node back from CPU jobs.
    local gres=""
    for i in $(seq 0 $((N_GPUS - 1))); do
        [ -e "$DIR/dev/nvidia$i" ] || mknod "$DIR/dev/nvidia$i" c 195 "$i"
        gres+="NodeName=localhost Name=gpu Type=$GPU_MODEL File=$DIR/dev/nvidia$i"$'\n'
    done

    mkdir -p /etc/slurm
    cat >"$DIR/slurm.conf" <<CONF
# Written by tests/slurm/cluster.sh: a single-node test cluster.
ClusterName=quantladder-test
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge-run/munge.socket.2
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# squeue-based status needs finished jobs to stay visible (>= 3x the plugin's init interval);
# the tests also read the partitions of finished jobs from scontrol, so keep them an hour.
MinJobAge=3600
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=100000
MessageTimeout=30
KillWait=5
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:$GPU_MODEL:$N_GPUS State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=sandbox Nodes=localhost MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=localhost MaxTime=INFINITE State=UP
CONF
    printf 'AutoDetect=off\n%s' "$gres" >"$DIR/gres.conf"
    # The jobstep plugin clears SLURM_CONF before its nested srun: the config must be at the
    # compiled-in path. gres.conf is read from beside slurm.conf.
    ln -sf "$DIR/slurm.conf" "$CONF"
    ln -sf "$DIR/gres.conf" /etc/slurm/gres.conf
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    have_binaries || install
    if status >/dev/null 2>&1; then
        log "already running"; status; return 0
    fi
    stop >/dev/null 2>&1 || true
    write_config
    if ! pid_alive "$DIR/munged.pid"; then
        runuser -u munge -- /usr/sbin/munged --socket="$DIR/munge-run/munge.socket.2" \
            --key-file=/etc/munge/munge.key --log-file="$DIR/munge/munged.log" \
            --pid-file="$DIR/munge-run/munged.pid" --seed-file="$DIR/munge/munged.seed" --force
        cp "$DIR/munge-run/munged.pid" "$DIR/munged.pid" 2>/dev/null || true
    fi
    # A fresh cluster each start: no jobs from an earlier one (-c clears the saved state).
    rm -rf "$DIR/state" "$DIR/spool" && mkdir -p "$DIR/state" "$DIR/spool"
    /usr/sbin/slurmctld -c -i -f "$CONF"
    /usr/sbin/slurmd -N localhost -f "$CONF"
    local i
    for i in $(seq 1 100); do
        if sinfo -h -N -o '%T' 2>/dev/null | grep -qx 'idle'; then
            log "up: $(sinfo -h -o '%P %a %D %T' | tr '\n' ';')"
            return 0
        fi
        # A node left drained by an earlier mismatch stays drained until told otherwise.
        if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq 'drain|down'; then
            scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
        fi
        sleep 0.2
    done
    log "node did not reach idle in 20 s:"
    sinfo -N -l >&2 || true
    tail -20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    exit 1
}

stop_pidfile() {
    local f=$1 name=$2 i
    if pid_alive "$f"; then
        local pid; pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        log "stopped $name ($pid)"
    fi
    rm -f "$f"
}

stop() {
    # Jobs first, so no slurmstepd outlives the cluster (only with a live controller: scancel
    # would otherwise retry for a minute).
    if pid_alive "$DIR/slurmctld.pid" && command -v scancel >/dev/null; then
        timeout 20 scancel --full --signal=KILL --user=root 2>/dev/null || true
    fi
    stop_pidfile "$DIR/slurmd.pid" slurmd
    stop_pidfile "$DIR/slurmctld.pid" slurmctld
    stop_pidfile "$DIR/munge-run/munged.pid" munged
    rm -f "$DIR/munged.pid"
    # Without a controller, every Slurm client call (and so every snakemake start, which loads the
    # Slurm plugin and asks `scontrol show config`) would wait ~30 s for it: take our config away.
    for f in "$CONF" /etc/slurm/gres.conf; do
        case "$(readlink "$f" 2>/dev/null)" in "$DIR"/*) rm -f "$f" ;; esac
    done
}

status() {
    pid_alive "$DIR/slurmctld.pid" && pid_alive "$DIR/slurmd.pid" || { echo "not running"; return 1; }
    sinfo -o '%P %a %D %T %G'
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 {install|start|stop|status}" >&2; exit 2 ;;
esac
