#!/usr/bin/env bash
# Copies the GPU-relevant build outputs into a small, git-ignored folder (default .gpu/) with
# the same relative layout, so their $ORIGIN run paths still find libepcomm.so.1. Used to
# carry a build made here to a GPU machine: `tools/gpu/stage.sh build .gpu`.
set -euo pipefail
build=${1:-build}
stage=${2:-.gpu}
rm -rf "$stage"
mkdir -p "$stage/capi" "$stage/tests/gpu" "$stage/bench"
cp -a "$build"/capi/libepcomm.so* "$stage/capi/"
for exe in tests/gpu/epcomm-gpu-tests tests/gpu/epcomm-gpu-threads bench/epcomm-info; do
  [ -f "$build/$exe" ] && cp -a "$build/$exe" "$stage/$exe"
done
for extra in bench/epcomm-bench bench/epcomm-ll-latency; do
  [ -f "$build/$extra" ] && cp -a "$build/$extra" "$stage/$extra"
done
du -sh "$stage"
