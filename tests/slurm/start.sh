#!/usr/bin/env bash
# A one-node Slurm on localhost for tests/test_slurm.py: munge, one slurmctld, one slurmd.
#
# Everything (config, state, spool, logs, pid files) lives in $SLURM_TEST_DIR, so stop.sh can end exactly
# the daemons this script started. Clients find the cluster through SLURM_CONF=$SLURM_TEST_DIR/slurm.conf.
# A job in the partition `urgent` preempts the jobs of `test` (the default): they are requeued, their steps
# warned with SIGTERM GraceTime seconds before the end, as clusters with preemptible partitions do.
set -euo pipefail
dir=${SLURM_TEST_DIR:-/tmp/torch-scaffold-slurm}
bash "$(dirname "$0")/stop.sh" >/dev/null  # daemons of an earlier start, if any
rm -rf "$dir/state" "$dir/spool"  # a fresh cluster: no jobs of an earlier run
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
host=$(hostname -s)
# The node as slurmd sees it (CPUs, sockets, memory): a node line that disagrees would drain the node.
node=$(slurmd -C | head -n 1)
cat >"$dir/slurm.conf" <<CONF
ClusterName=scaffoldtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=${SLURM_TEST_PORT:-6817}
SlurmdPort=$((${SLURM_TEST_PORT:-6817} + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=30
MinJobAge=3600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
$node State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=urgent Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
CONF
# munge: its own socket and pid file in $dir, the key the package installed.
munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" \
    --log-file="$dir/munge/munged.log" --force
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
        echo "Slurm is up: export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 1
done
echo "error: the test node did not become idle within 60 s; see $dir/slurmctld.log and $dir/slurmd.log" >&2
sinfo -N -l >&2 || true
exit 1
