#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the bindings' GPU tests on a GPU machine from a staging folder made here by
# tools/gpu/stage.sh (Rust and Go test binaries in STAGE_DIR/bindings, the library in
# STAGE_DIR/capi) plus the Python tests from this checkout, all against
# STAGE_DIR/capi/libepcomm.so.2. Logs go to $OUT (or ./gpu-logs); a summary is printed last.
# Usage: tools/gpu/run_bindings.sh [STAGE_DIR]   (default .gpu; run from the repository root)
# EPCOMM_TEST_GPUS (default 2) is the rank count; TIME_LIMIT (default 300 s) bounds each run.
set -uo pipefail
stage=$(cd "${1:-.gpu}" && pwd) || exit 1
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-./gpu-logs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
limit=${TIME_LIMIT:-300}

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# An NCCL of the series the library was compiled against, then the staged library
# (ahead of the RUNPATH of the linked Rust binaries, which names this machine's build).
for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$stage/capi"
export EPCOMM_LIB=$stage/capi/libepcomm.so.2
export EPCOMM_ABI_JSON=$root/capi/abi.json
export EPCOMM_TEST_GPUS=${EPCOMM_TEST_GPUS:-2}
export RUST_BACKTRACE=1

{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  echo "EPCOMM_LIB=$EPCOMM_LIB"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "EPCOMM_TEST_GPUS=$EPCOMM_TEST_GPUS"
} >"$out/bindings-machine.txt" 2>&1

summary=()
failed=0
# run NAME PATTERN COMMAND...: run with a time limit, log to $out/NAME.log, and summarise
# with the log's last lines matching PATTERN; a "skipped" note (or ignored Rust tests) counts
# as a failure here, since this script exists to run the GPU tests.
run() {
  local name=$1 pattern=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq 0 ] && grep -qiE 'gpu .*test skipped|--- SKIP: .*OnGPUs|SKIPPED .*GPU| [1-9][0-9]* ignored;' "$out/$name.log"; then
    rc=77
  fi
  local why=""
  if [ "$rc" -ne 0 ]; then
    failed=1
    # The first rank's complaint, if a rank complained (each test prefixes it so).
    why=$(grep -m 1 -oE 'rank [0-9]+( failed)?: .{0,160}' "$out/$name.log")
  fi
  summary+=("$(printf '%-20s rc=%-3s %4ss  %s%s' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E "$pattern" "$out/$name.log" | tail -n 2 | tr '\n' ' ')" "${why:+ | $why}")")
}

bins=$stage/bindings
rust_pattern='^gpu (ll |ht )?test|^test result'
for test in gpu_ll gpu_ht; do
  for variant in linked dlopen; do
    if [ -x "$bins/rust-$test-$variant" ]; then
      # The GPU tests are #[ignore = "needs a GPU"]; run them with the host-model ones.
      run "rust-$test-$variant" "$rust_pattern" "$bins/rust-$test-$variant" --include-ignored --nocapture
    else
      summary+=("rust-$test-$variant  MISSING: run tools/gpu/stage.sh on a machine with cargo")
      failed=1
    fi
  done
done
[ -x "$bins/rust-gpu-linked" ] && run rust-gpu-linked "$rust_pattern" "$bins/rust-gpu-linked" --include-ignored --nocapture
# The example runs on one GPU whatever EPCOMM_TEST_GPUS says.
[ -x "$bins/rust-ll_step" ] && run rust-ll_step '^one LL step|^Error' "$bins/rust-ll_step"

if [ -x "$bins/go-epcomm.test" ]; then
  # Every test of the package against the staged library (-short skips building the README
  # example, which needs a Go toolchain), from the package directory as `go test` would.
  run go "^(--- (PASS|FAIL|SKIP): Test.*OnGPUs|ok|PASS|FAIL)" \
    bash -c "cd '$root/bindings/go/epcomm' && '$bins/go-epcomm.test' -test.v -test.short -test.count=1"
else
  summary+=("go                   MISSING: run tools/gpu/stage.sh on a machine with go")
  failed=1
fi
[ -x "$bins/go-llstep" ] && run go-llstep '^one LL step|epcomm:' "$bins/go-llstep"

# The Python binding's tests, GPU ones included, with the first interpreter that has
# torch and pytest.
python=""
for candidate in ${PYTHON:-} python3 /opt/torch/.venv/bin/python; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch, pytest' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -n "$python" ]; then
  run python '(passed|failed|error)' env PYTHONPATH="$root/bindings/python" PYTHONDONTWRITEBYTECODE=1 \
    "$python" -m pytest -q -p no:cacheprovider -rs "$root/bindings/python/tests"
else
  summary+=("python               MISSING: no python3 with torch and pytest")
  failed=1
fi

echo "== machine"
head -n 4 "$out/bindings-machine.txt"
echo "== bindings on $EPCOMM_TEST_GPUS GPUs (logs in $out)"
printf '%s\n' "${summary[@]}"
exit "$failed"
