#!/usr/bin/env bash
# Builds the project's base image from Debian packages alone (no registry): a minbase bookworm
# rootfs made with debootstrap, imported with `docker import`, and prints its tag on stdout:
#   streamingjob/debian:bookworm-<YYYYMMDD>      (the day the packages were taken from the mirror)
#
# Every other image (Spark, operator, Kafka, the kind node and its component images) builds
# FROM this tag. The rootfs tarball is cached under $STREAMJOB_CACHE/images/, so a machine whose
# docker storage was wiped re-imports it in seconds instead of re-bootstrapping. The newest cached
# snapshot is reused; STREAMJOB_BASE_REFRESH=1 takes a new one (security updates).
# Env: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR (default: the machine's own apt sources).
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
exec 3>&1 1>&2

SUITE=bookworm
# apt_uri SUITE: the first URI of this machine's apt sources (one-line or deb822) serving SUITE
apt_uri() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && cat "$f"
  done | awk -v suite="$1" '
    found { next }
    /^deb / { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) { uri = $i; break }
              for (j = i + 1; j <= NF; j++) if ($j == suite) { found = uri }
              next }
    /^URIs:/ { uri = $2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri != "") found = uri }
    /^$/ { uri = "" }
    END { print found }'
}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(apt_uri "$SUITE")}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$(apt_uri "$SUITE-security")}
[ -n "$DEBIAN_MIRROR" ] && [ -n "$DEBIAN_SECURITY_MIRROR" ] ||
  die "no apt source for $SUITE / $SUITE-security on this machine: set DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR"
REPO=streamingjob/debian
cache="$STREAMJOB_CACHE/images"
mkdir -p "$cache"
exec 9>"$cache/.base.lock"
flock 9

newest=$(ls "$cache"/debian-$SUITE-*.tar.zst 2>/dev/null | sort | tail -n1 || true)
if [ -n "$newest" ] && [ "${STREAMJOB_BASE_REFRESH:-0}" != 1 ]; then
  date=${newest##*/debian-$SUITE-}; date=${date%.tar.zst}
  tag="$REPO:$SUITE-$date"
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    log "importing cached rootfs $newest as $tag"
    zstd -dc "$newest" | docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
  fi
  echo "$tag" >&3
  exit 0
fi

date=$(date -u +%Y%m%d)
tag="$REPO:$SUITE-$date"
[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || die "debootstrap missing (apt-get install debootstrap)"
start=$SECONDS
root=$(mktemp -d "${TMPDIR:-/var/tmp}/streamingjob-rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT
log "debootstrap $SUITE (minbase) from $DEBIAN_MIRROR into $root"
/usr/sbin/debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$DEBIAN_MIRROR" >"$root.log" 2>&1 ||
  { tail -n 30 "$root.log"; die "debootstrap failed (log: $root.log)"; }
rm -f "$root.log"

# Keep images slim: no docs, man pages or translations for anything installed later either.
cat >"$root/etc/dpkg/dpkg.cfg.d/90-streamingjob-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
cat >"$root/etc/apt/apt.conf.d/90-streamingjob" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
CFG
cat >"$root/etc/apt/sources.list" <<SRC
deb $DEBIAN_MIRROR $SUITE main
deb $DEBIAN_MIRROR $SUITE-updates main
deb $DEBIAN_SECURITY_MIRROR $SUITE-security main
SRC
# Security and point updates, then drop everything apt downloaded.
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade && apt-get clean' >"$root.log" 2>&1 ||
  { tail -n 30 "$root.log"; die "apt-get upgrade in the new rootfs failed (log: $root.log)"; }
rm -f "$root.log"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log "$root"/var/log/apt/*
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
: >"$root/etc/machine-id"
rm -f "$root/etc/hostname" "$root/etc/resolv.conf"

out="$cache/debian-$SUITE-$date.tar.zst"
tar --numeric-owner --xattrs -C "$root" -c . | zstd -q -T0 -10 -o "$out.tmp"
mv "$out.tmp" "$out"
zstd -dc "$out" | docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
log "base image $tag built in $((SECONDS - start))s ($(du -h "$out" | cut -f1) cached as $out)"
echo "$tag" >&3
