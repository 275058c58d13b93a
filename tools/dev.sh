#!/usr/bin/env bash
# The commands of the README, and what they need:
#   tools/dev.sh demo [epcomm-info flags]   build, then bring up a group on every local GPU
#                                           (on a machine without GPU: print the plan)
#   tools/dev.sh test [meson test flags]    build, then run every test suite
#                                           (the gpu suite is skipped where no GPU is visible)
#   tools/dev.sh bench [epcomm-bench flags] build, then run the benchmark on every local GPU
# Missing build tools (meson, ninja, pkg-config, GoogleTest, Go, pytest, numpy, matplotlib) are installed from
# PyPI and Debian's packages first. The CUDA toolkit (nvcc) and NCCL >= 2.28 must already be there;
# the Meson configure step says precisely what is missing otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${EPCOMM_BUILD_DIR:-build}

log() { printf '[dev.sh] %s\n' "$*" >&2; }

apt_install() {
  if ! command -v apt-get >/dev/null; then
    log "missing $*, and no apt-get to install it with: install it by hand"
    exit 1
  fi
  log "installing $* from Debian's packages"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

ensure_tools() {
  if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  command -v python3 >/dev/null || apt_install python3 python3-pip
  if ! command -v meson >/dev/null || ! meson --version | awk -F. '{exit !($1 > 1 || ($1 == 1 && $2 >= 1))}'; then
    log "installing meson from PyPI"
    python3 -m pip install -q --upgrade 'meson>=1.1'
  fi
  command -v ninja >/dev/null || { log "installing ninja from PyPI"; python3 -m pip install -q ninja; }
  command -v pkg-config >/dev/null || apt_install pkg-config
  if ! pkg-config --exists gtest 2>/dev/null; then apt_install libgtest-dev; fi
  command -v nm >/dev/null || apt_install binutils
  # Binding suites: Go (cgo) and pytest. Rust uses the cargo already on the machine; its
  # tests are skipped with a message where there is none.
  command -v go >/dev/null || apt_install golang-go
  python3 -c 'import pytest' 2>/dev/null || { log "installing pytest from PyPI"; python3 -m pip install -q pytest; }
  # numpy's DLPack export exercises the Python binding's capsule parsing on the CPU.
  python3 -c 'import numpy' 2>/dev/null || { log "installing numpy from PyPI"; python3 -m pip install -q numpy; }
  # bench/plot.py draws the benchmark's charts; the unit suite plots the committed sample.
  python3 -c 'import matplotlib' 2>/dev/null || { log "installing matplotlib from PyPI"; python3 -m pip install -q matplotlib; }
}

build() {
  ensure_tools
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    meson setup "$BUILD_DIR"
  fi
  meson compile -C "$BUILD_DIR"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)
    build
    exec "$BUILD_DIR/bench/epcomm-info" "$@"
    ;;
  test)
    build
    exec meson test -C "$BUILD_DIR" --print-errorlogs "$@"
    ;;
  bench)
    build
    exec "$BUILD_DIR/bench/epcomm-bench" "$@"
    ;;
  build)
    build
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
