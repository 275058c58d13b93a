#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copies the GPU-relevant build outputs into a small, git-ignored folder (default .gpu/) with
# the same relative layout, so their $ORIGIN run paths still find libepcomm.so.2. Used to
# carry a build made here to a GPU machine: `tools/gpu/stage.sh build .gpu`. It also builds
# the Rust and Go bindings' GPU test binaries into $stage/bindings/ (the GPU machines have
# no cargo or go; tools/gpu/build_bindings.sh, run them with tools/gpu/run_bindings.sh).
set -euo pipefail
build=${1:-build}
stage=${2:-.gpu}
rm -rf "$stage"
mkdir -p "$stage/capi" "$stage/tests/gpu" "$stage/bench"
# The library and its links, not the build's object folder beside them (libepcomm.so.*.p).
for lib in "$build"/capi/libepcomm.so*; do
  [ -d "$lib" ] || cp -a "$lib" "$stage/capi/"
done
for exe in tests/gpu/epcomm-gpu-tests tests/gpu/epcomm-gpu-hosts tests/gpu/epcomm-gpu-threads tests/gpu/epcomm-ring-tests \
           tests/gpu/epcomm-parts-tests \
           bench/epcomm-info \
           bench/epcomm-bench bench/epcomm-fence-probe bench/epcomm-release-probe bench/epcomm-line-probe; do
  if [ ! -f "$build/$exe" ]; then
    echo "stage.sh: $build/$exe is missing: build first (ninja -C $build)" >&2
    exit 1
  fi
  cp -a "$build/$exe" "$stage/$exe"
  # Host debug info only: the library keeps its own, and the stage must stay small enough
  # to carry to a GPU machine (64 MiB with the working tree).
  if command -v strip >/dev/null; then strip --strip-debug "$stage/$exe"; fi
done
# CUPTI beside the bench, which looks for it there when the loader cannot find one (its
# kernel-span columns; bench/cupti_library.hpp): the GPU machine need not have a toolkit.
cuda_home=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
for dir in "$cuda_home/lib64" "$cuda_home/lib" "$cuda_home/extras/CUPTI/lib64"; do
  if [ -e "$dir/libcupti.so.13" ]; then
    cp -L "$dir/libcupti.so.13" "$stage/bench/"
    break
  fi
done
# The Python tools (bench/plot.py, bench/moe_layer.py, bindings/python) run from the
# working tree, which the GPU machine has too.
# The commit the staged build came from, for results written by scripts (bench/moe_layer.py)
# on machines whose copy of the tree has no git history.
git -C "$(dirname "$0")/../.." describe --always --dirty --abbrev=12 >"$stage/COMMIT" 2>/dev/null ||
  echo unknown >"$stage/COMMIT"
tools_dir=$(dirname "$0")
"$tools_dir/build_bindings.sh" "$build" "$stage/bindings"
du -sh "$stage"
