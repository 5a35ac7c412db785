#!/usr/bin/env bash
# Builds (once per source, cached) the wheel of the source's native read path (native/: Rust,
# librdkafka built from rdkafka-sys's bundled source, arrow-rs, pyo3; maturin) and prints its path.
#   scripts/native.sh                 build or reuse the wheel
#   scripts/native.sh --install VENV  also install it into VENV (once per wheel)
#   scripts/native.sh --check         rustfmt, clippy (warnings are errors) and cargo test
# The wheel is keyed by native/'s sources, Cargo.lock, rustc and Python; cargo's target directory
# stays under the cache, so a changed source rebuilds only this crate (seconds), a fresh machine
# everything (~4 min on 2 busy cores, mostly librdkafka and arrow-rs). Needs cargo (rustup) and
# Debian's OpenSSL, Cyrus SASL and zlib headers (installed here when missing). Not on `make run`'s
# path: without the wheel the source reads with pure Python.
set -euo pipefail
source "$(dirname "$0")/common.sh"
MATURIN_VERSION=1.16.0

install_into= check=
case "${1:-}" in
  --install) install_into=${2:?usage: native.sh [--install VENV | --check]} ;;
  --check) check=1 ;;
esac

command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] \
  || die "cargo not found: install Rust (rustup, stable) to build the native read path"
export PATH="$HOME/.cargo/bin:$PATH"

need_pkgs=()
for h in openssl/ssl.h:libssl-dev sasl/sasl.h:libsasl2-dev zlib.h:zlib1g-dev; do
  [ -f "/usr/include/${h%%:*}" ] || need_pkgs+=("${h#*:}")
done
for t in make:make cc:gcc pkg-config:pkg-config perl:perl; do
  command -v "${t%%:*}" >/dev/null || need_pkgs+=("${t#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  log "installing ${need_pkgs[*]} from Debian (librdkafka's TLS, SASL and zlib)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

dir="$STREAMJOB_CACHE/native"
mkdir -p "$dir"
exec 8>"$dir/.lock"
flock 8  # one build at a time; the second caller reuses the first one's wheel
python=python3
[ -n "$install_into" ] && python="$install_into/bin/python"
key=$( {
  cd "$REPO_ROOT/native" && find Cargo.toml Cargo.lock pyproject.toml src -type f | LC_ALL=C sort | xargs sha256sum
  cargo --version; rustc --version; "$python" --version
} | sha256sum | cut -c1-12)
if [ -n "$check" ]; then
  # these sources passed these checks with this toolchain before: a clean clone's new file
  # times would make cargo compile the crate again (a minute of CI) for the same answer
  stamp="$dir/checked/$key"
  [ -f "$stamp" ] && exit 0
  cd "$REPO_ROOT/native"
  export CARGO_TARGET_DIR="$dir/target"
  cargo fmt --check
  cargo clippy -q --release --locked --all-targets -- -D warnings
  cargo test -q --release --locked --no-default-features # the pure-Rust parts (no Python)
  mkdir -p "$dir/checked" && touch "$stamp"
  exit 0
fi
wheels="$dir/wheels/$key"
if [ ! -f "$wheels/.complete" ]; then
  tools="$dir/maturin-$MATURIN_VERSION"
  if [ ! -x "$tools/bin/maturin" ]; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q --require-hashes -r "$REPO_ROOT/requirements/maturin.txt" >&2
  fi
  log "building the native read path (cargo target dir $dir/target)"
  start=$SECONDS
  rm -rf "$wheels" && mkdir -p "$wheels"
  CARGO_TARGET_DIR="$dir/target" PYO3_PYTHON="$python" "$tools/bin/maturin" build -q --release \
    --manifest-path "$REPO_ROOT/native/Cargo.toml" --interpreter "$python" \
    --compatibility linux --out "$wheels" >&2
  touch "$wheels/.complete"
  log "native read path built in $((SECONDS - start))s"
fi
wheel=$(ls "$wheels"/streamingjob_native-*.whl)
if [ -n "$install_into" ] && [ ! -f "$install_into/.native-$key" ]; then
  "$install_into/bin/pip" install -q --no-deps --force-reinstall "$wheel" >&2
  rm -f "$install_into"/.native-* && touch "$install_into/.native-$key"
fi
echo "$wheel"
