#!/usr/bin/env bash
# Makes a working docker daemon available for the kind bed, and nothing more:
#   - installs Debian's docker.io (+ the small tools the kind scripts use) when missing;
#   - on hosts whose capability bounding set lacks CAP_SYS_RESOURCE (privileged containers fail
#     there, see scripts/kind/runc-capfilter), registers the capability filter as dockerd's
#     default runtime; elsewhere the daemon configuration is left alone;
#   - starts dockerd when it is not running (systemd if it is PID 1, else a background daemon).
# Idempotent: a second run only checks.
set -euo pipefail
source "$(dirname "$0")/../common.sh"

SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
SHIM=/usr/local/sbin/runc-capfilter
DAEMON_JSON=/etc/docker/daemon.json

need_pkgs=()
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || need_pkgs+=(docker.io)
command -v docker >/dev/null || need_pkgs+=(docker.io)
for t in jq:jq zstd:zstd capsh:libcap2-bin debootstrap:debootstrap; do
  command -v "${t%%:*}" >/dev/null || [ -x "/usr/sbin/${t%%:*}" ] || need_pkgs+=("${t#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]} from Debian"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

cap_sys_resource_missing() {
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (((0x$bnd >> 24 & 1) == 0))
}

daemon_changed=0
if cap_sys_resource_missing; then
  if ! cmp -s "$REPO_ROOT/scripts/kind/runc-capfilter" "$SHIM"; then
    log "CAP_SYS_RESOURCE missing from the bounding set: installing $SHIM"
    $SUDO install -m 0755 "$REPO_ROOT/scripts/kind/runc-capfilter" "$SHIM"
  fi
  current='{}'
  [ -s "$DAEMON_JSON" ] && current=$(cat "$DAEMON_JSON")
  wanted=$(jq --arg shim "$SHIM" \
    '.runtimes["runc-capfilter"] = {path: $shim} | .["default-runtime"] = "runc-capfilter"' <<<"$current")
  if [ "$(jq -S . <<<"$current")" != "$(jq -S . <<<"$wanted")" ]; then
    log "registering runc-capfilter as dockerd's default runtime in $DAEMON_JSON"
    $SUDO mkdir -p "$(dirname "$DAEMON_JSON")"
    jq . <<<"$wanted" | $SUDO tee "$DAEMON_JSON" >/dev/null
    daemon_changed=1
  fi
fi

# A machine restored from a snapshot keeps the pid files of daemons that no longer run, and
# dockerd refuses to start over them ("pid file found"). Only files whose process is gone go.
clear_stale_pid_files() {
  local f pid
  for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    # A reused pid belongs to some other program: the file is stale all the same.
    if ! grep -qsx -e dockerd -e containerd "/proc/${pid:-0}/comm"; then
      log "removing stale $f (pid ${pid:-none} is not a running docker daemon)"
      $SUDO rm -f "$f"
    fi
  done
}

if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ]; then
    log "starting docker with systemd"
    $SUDO systemctl start docker
  else
    log "starting dockerd in the background (log: /var/log/dockerd.log)"
    clear_stale_pid_files
    # Close every descriptor but 0-2: callers such as up.sh hand out results on fd 3, and
    # a daemon holding it open would make $(up.sh) wait forever.
    # setsid: a signal to the group of the run that started it (a stopped test run) spares it
    $SUDO sh -c 'setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &'
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || die "dockerd did not come up; see /var/log/dockerd.log"
elif [ "$daemon_changed" = 1 ]; then
  # runtimes and default-runtime are reloaded on SIGHUP; no restart, running containers stay.
  log "reloading dockerd's configuration"
  $SUDO kill -HUP "$(pgrep -o -x dockerd)"
  sleep 1
fi

if cap_sys_resource_missing; then
  rt=$(docker info --format '{{.DefaultRuntime}}')
  [ "$rt" = runc-capfilter ] || die "dockerd's default runtime is '$rt', expected runc-capfilter"
fi
log "docker $(docker version --format '{{.Server.Version}}') ready (default runtime $(docker info --format '{{.DefaultRuntime}}'))"
