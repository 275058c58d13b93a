#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the GPU suite and the main job on a GPU machine from staged binaries
# (tools/gpu/stage.sh), logging everything to $OUT (or ./gpu-logs) and printing a summary
# last. Usage: tools/gpu/run_suite.sh [STAGE_DIR] [RANK_COUNTS...]   (default: .gpu 2 3 4)
set -uo pipefail
stage=${1:-.gpu}
shift || true
rank_counts=${*:-2 3 4}
out=${OUT:-./gpu-logs}
mkdir -p "$out"

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Prefer an NCCL of the same series as the headers we compiled against.
for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
} >"$out/machine.txt" 2>&1

summary=()
run() {
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E '^(\[rank 0\] )?\[  (PASSED|FAILED)  \]|passed|failed|^OK:|^FAILED:|SKIP' "$out/$name.log" | tail -n 2 | tr '\n' ' ')")")
}

for n in $rank_counts; do
  run "gpu-$n-ranks" "$stage/tests/gpu/epcomm-gpu-tests" --ranks="$n" --time-limit="${TIME_LIMIT:-360}"
done
# Every rank on a "host" of its own: groups need GIN, which these machines lack, so creation
# must be refused with NCCL's reason (or, given GIN, match the reference).
run gpu-separate-hosts "$stage/tests/gpu/epcomm-gpu-hosts" --ranks=2 --time-limit="${TIME_LIMIT:-360}"
run gpu-threads "$stage/tests/gpu/epcomm-gpu-threads"
# The credit ring's device ends on one GPU (kernels/ht/ht_ring.cuh), without NCCL.
run gpu-ring "$stage/tests/gpu/epcomm-ring-tests"
# Device parts one rank cannot reach (a peer's packed rows), without NCCL.
run gpu-parts "$stage/tests/gpu/epcomm-parts-tests"
run epcomm-info "$stage/bench/epcomm-info"

# The Python binding against the same library, GPU tests included (torch and pytest are on
# the GPU machines; the other bindings' GPU tests need toolchains those machines lack).
if [ -d bindings/python/tests ] && python3 -c 'import pytest' 2>/dev/null; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  run python-binding env EPCOMM_LIB="$PWD/$stage/capi/libepcomm.so.2" EPCOMM_TEST_GPUS="$gpus" \
    PYTHONPATH=bindings/python PYTHONDONTWRITEBYTECODE=1 \
    python3 -m pytest -q -p no:cacheprovider bindings/python/tests
fi

# The runtime NCCL check: an older NCCL of the same series (the system copy on our GPU
# machines is 2.28.3) must be refused with a message, not crash.
system_nccl=/usr/lib/x86_64-linux-gnu
if [ -f "$system_nccl/libnccl.so.2" ]; then
  LD_LIBRARY_PATH="$system_nccl" "$stage/bench/epcomm-info" >"$out/nccl-mismatch.log" 2>&1
  rc=$?
  msg=$(grep -o 'the NCCL loaded at run time.*' "$out/nccl-mismatch.log" | head -n 1)
  summary+=("$(printf '%-22s rc=%-3s expected non-zero with a message: %s' nccl-mismatch "$rc" "${msg:-NO MESSAGE}")")
fi

echo "== machine"
head -n 5 "$out/machine.txt"
echo "== summary"
printf '%s\n' "${summary[@]}"
