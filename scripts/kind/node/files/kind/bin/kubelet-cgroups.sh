#!/bin/bash
# Runs before every kubelet start. kind configures the kubelet with cgroupRoot /kubelet, which
# the systemd cgroup driver maps to kubelet.slice, and the kubelet refuses to start unless that
# cgroup exists for every controller it uses. systemd creates slices only in the hierarchies it
# manages, so create the rest here.
set -euo pipefail
cg=/sys/fs/cgroup
if [ -f "$cg/cgroup.controllers" ]; then
  # cgroup v2: delegate every available controller down to kubelet.slice.
  controllers=$(sed 's/\([^ ]*\)/+\1/g' "$cg/cgroup.controllers")
  echo "$controllers" >"$cg/cgroup.subtree_control" 2>/dev/null || true
  mkdir -p "$cg/kubelet.slice"
  echo "$controllers" >"$cg/kubelet.slice/cgroup.subtree_control" 2>/dev/null || true
  exit 0
fi
for hierarchy in "$cg"/*/; do
  hierarchy=${hierarchy%/}
  case "${hierarchy##*/}" in unified) continue ;; esac
  mountpoint -q "$hierarchy" || continue
  mkdir -p "$hierarchy/kubelet.slice"
  # A new cpuset cgroup starts with no CPUs and no memory nodes: inherit the parent's.
  if [ -f "$hierarchy/cpuset.cpus" ]; then
    for f in cpuset.cpus cpuset.mems; do
      [ -n "$(cat "$hierarchy/kubelet.slice/$f")" ] || cat "$hierarchy/$f" >"$hierarchy/kubelet.slice/$f"
    done
  fi
done
