#!/usr/bin/env bash
# Stop the daemons start.sh started (by their pid files in $SLURM_TEST_DIR) and cancel what they still run.
set -uo pipefail
dir=${SLURM_TEST_DIR:-/tmp/torch-scaffold-slurm}
export SLURM_CONF=$dir/slurm.conf
[ -f "$SLURM_CONF" ] && scancel --full --quiet --partition=test 2>/dev/null
for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if [ -f "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        rm -f "$pidfile"
    fi
done
echo "Slurm stopped"
