#!/usr/bin/env bash
# Sets the CPU weight of docker against the host's own processes:
#   scripts/kind/cpu-weight.sh SHARES NICE    # 1024 0: the kernel's defaults
# SHARES weighs docker's containers, all of them together: on a cgroup v1 host with docker's
# cgroupfs driver (this project's CI machine) every container sits below one "docker" group,
# which the scheduler weighs as one process of the host's (1024). NICE is the daemon's own
# (every thread of dockerd: it commits the layers a build makes and compresses what it pushes).
# up.sh raises both while the images build cold: on a fresh machine those builds and the
# pushes got a sliver of the cores beside the Spark tier's dozens of busy threads while the e2e
# tier waited for them (docs/ci.md). What the host does not allow (cgroup v2, the systemd
# driver, no privilege) it says and leaves.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
shares=${1:?usage: cpu-weight.sh SHARES NICE} nice=${2:?usage: cpu-weight.sh SHARES NICE}
group=/sys/fs/cgroup/cpu/docker
if [ -w "$group/cpu.shares" ]; then
  echo "$shares" >"$group/cpu.shares"
  log "docker's containers weigh $(cat "$group/cpu.shares") (1024: one process of the host)"
else
  log "no writable $group/cpu.shares (not cgroup v1 with docker's cgroupfs driver): weights unchanged"
fi
daemon=$(pgrep -o -x dockerd || true)
[ -n "$daemon" ] || { log "no dockerd running: its priority unchanged"; exit 0; }
# renice -p takes one thread (a task id); threads started later inherit their creator's
for task in /proc/"$daemon"/task/*; do
  renice -n "$nice" -p "${task##*/}" >/dev/null 2>&1 || { log "dockerd's priority unchanged (no privilege)"; exit 0; }
done
log "dockerd runs at nice $nice"
