#!/usr/bin/env bash
# Sets the CPU weight of docker's containers, all of them together (the kind bed's nodes), against
# the host's own processes:
#   scripts/kind/cpu-weight.sh SHARES    # 1024: the kernel's default, one process's weight
# On a cgroup v1 host with docker's cgroupfs driver (this project's CI machine) every container
# sits below one "docker" group, and the scheduler weighs that whole group as one process of
# the host's (cpu.shares 1024): three nodes with their drivers, executors, brokers and API
# server got the share of one local test process while the Spark tier's JVMs ran beside them,
# so the e2e tier waited on CPU and ended minutes after the Spark tier, the cores idle behind
# it. `make test` gives the bed the weight of two processes while the e2e tier runs. Elsewhere
# (cgroup v2, the systemd driver, no permission) it says so and changes nothing.
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
