#!/usr/bin/env bash
# Sets the CPU weight of docker's containers, all of them together, against the host's own
# processes:
#   scripts/kind/cpu-weight.sh SHARES    # 1024: the kernel's default, one process's weight
# On a cgroup v1 host with docker's cgroupfs driver (this project's CI machine) every container
# sits below one "docker" group, which the scheduler weighs as one process of the host's. up.sh
# raises it while the images build cold (their RUN steps are containers): on a fresh machine
# those builds got a sliver of the cores beside the Spark tier's busy threads while the e2e
# tier waited for them (docs/ci.md). Elsewhere (cgroup v2, the systemd driver, no permission)
# it says so and changes nothing.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
shares=${1:?usage: cpu-weight.sh SHARES}
group=/sys/fs/cgroup/cpu/docker
if [ -w "$group/cpu.shares" ]; then
  echo "$shares" >"$group/cpu.shares"
  log "docker's containers weigh $(cat "$group/cpu.shares") (1024: one process of the host)"
else
  log "no writable $group/cpu.shares (not cgroup v1 with docker's cgroupfs driver): weights unchanged"
fi
