#!/usr/bin/env bash
# Install Slurm and munge from Debian/Ubuntu packages when sbatch is missing (needs root, as `make slurm-test` runs).
set -euo pipefail
if command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "error: Slurm is not installed and this is not a root shell with apt-get: install slurm-wlm and munge" >&2
    exit 2
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
