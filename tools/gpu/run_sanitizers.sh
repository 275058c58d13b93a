#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the GPU suite under compute-sanitizer on a GPU machine from staged binaries
# (tools/gpu/stage.sh): memcheck (out-of-bounds and misaligned device accesses, hardware
# exceptions) and racecheck (shared-memory hazards), logging to $OUT (or ./gpu-logs) and
# printing a summary last that quotes the sanitizer's ERROR SUMMARY and RACECHECK SUMMARY
# lines and GoogleTest's PASSED/FAILED lines.
#
# Usage: tools/gpu/run_sanitizers.sh [STAGE_DIR] [RANKS]   (default: .gpu 2)
# Environment:
#   TOOLS             tools to run, in order (default "memcheck racecheck")
#   TIME_LIMIT        the launcher's --time-limit per tool in seconds (default 1200); e.g.
#                     TOOLS=memcheck TIME_LIMIT=540 for a run that must end within 10 minutes
#   MEMCHECK_FILTER   gtest filter for memcheck (default: the suite without its big cases and
#                     without the tests of the timeout itself, whose timing the sanitizer skews)
#   RACECHECK_FILTER  gtest filter for racecheck (default: a few small cases of each kind)
#   EPCOMM_TEST_TIMEOUT_MS  the test groups' timeout (default here 300000 ms: sanitized
#                     kernels run 10-100x slower, and a rank may wait that long for a peer)
#   API_ERRORS        compute-sanitizer --report-api-errors (default "no": NCCL probes driver
#                     entry points that may be absent, and some tests provoke CUDA and NCCL
#                     errors on purpose; the tests check every status themselves)
#   SANITIZER_FLAGS   more compute-sanitizer flags (default "--kernel-name-exclude kns=nccl":
#                     NCCL's own kernels, only the tests' all-reduce here, are not checked;
#                     set it to "" to check them too)
#
# The harness starts one process per rank from the launcher (posix_spawn of /proc/self/exe),
# so the sanitizer follows child processes (--target-processes all) and each process prints
# its own summary line.
set -uo pipefail
stage=${1:-.gpu}
ranks=${2:-2}
out=${OUT:-./gpu-logs}
tools=${TOOLS:-memcheck racecheck}
time_limit=${TIME_LIMIT:-1200}
mkdir -p "$out"

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Prefer an NCCL of the same series as the headers we compiled against.
for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export EPCOMM_TEST_TIMEOUT_MS=${EPCOMM_TEST_TIMEOUT_MS:-300000}

sanitizer=$(command -v compute-sanitizer || true)
[ -n "$sanitizer" ] || [ ! -x /usr/local/cuda/bin/compute-sanitizer ] ||
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$sanitizer" ]; then
  echo "run_sanitizers.sh: compute-sanitizer is not on PATH nor in /usr/local/cuda/bin" >&2
  exit 1
fi
binary=$stage/tests/gpu/epcomm-gpu-tests
if [ ! -x "$binary" ]; then
  echo "run_sanitizers.sh: $binary is missing: stage a build first (tools/gpu/stage.sh)" >&2
  exit 1
fi

join() { local IFS=:; echo "$*"; }
# memcheck: everything except the big cases and the tests of the timeout itself; on several
# ranks also the test whose two groups need their kernels resident at once (on 2 H200
# memcheck held Concurrency.TwoThreadsEachDriveTheirOwnGroup
# until the time limit, as racecheck does below: the sanitizers serialise kernels).
memcheck_skip=(
  '*Tokens4096*' '*ThousandTokens*' '*Hidden16384*' '*7168*' '*FiveHundredSteps*'
  '*ThousandSteps*' 'Soak.*' '*Faults.*' 'GroupErrors.BarrierTimeout*'
  # A verdict all-reduce kernel that never ends: under memcheck (kernels serialised) the
  # creation that should time out after it waited until the time limit (2 H200, session 38).
  'CommModes.CreationWithoutOneRank*'
)
[ "$ranks" -gt 1 ] && memcheck_skip+=('Concurrency.TwoThreadsEachDriveTheirOwnGroup')
# racecheck: a few small cases of each kind of kernel. (With memcheck's filter, 31 tests ran
# clean on 2 H200 before Concurrency.TwoThreadsEachDriveTheirOwnGroup hung until the time
# limit: its two groups need their kernels resident at once, which racecheck seems not to
# do; leave it out of racecheck runs.)
racecheck_cases=(
  GroupLifecycle.CreateBarrierQueryDestroyAndCreateAgain LowLatency.RandomRoutingWithMaskedEntries
  LowLatency.SendOnlyThenComplete LowLatency.Fp8DispatchMatchesTheReferenceCast
  '*HighThroughputRouting*RandomH2048TopK8' HighThroughput.BackwardPassOnTheForwardHandle
  '*BadRouting*Queued*'
)
memcheck_filter=${MEMCHECK_FILTER:-"*-$(join "${memcheck_skip[@]}")"}
racecheck_filter=${RACECHECK_FILTER:-"$(join "${racecheck_cases[@]}")"}
# Word splitting of SANITIZER_FLAGS is intended (several flags in one variable).
read -r -a extra_flags <<<"${SANITIZER_FLAGS-"--kernel-name-exclude kns=nccl"}"

"$sanitizer" --version >"$out/sanitizer-version.txt" 2>&1
summary=()
for tool in $tools; do
  case $tool in
    memcheck) filter=$memcheck_filter; tool_flags=(--check-device-heap no) ;;
    racecheck) filter=$racecheck_filter; tool_flags=() ;;
    *) echo "run_sanitizers.sh: unknown tool '$tool' (memcheck or racecheck)" >&2; exit 2 ;;
  esac
  log=$out/sanitizer-$tool-$ranks-ranks.log
  start=$SECONDS
  # The outer timeout only guards against a sanitizer that outlives the launcher's own limit.
  timeout --kill-after=30 $((time_limit + 180)) \
    "$sanitizer" --tool "$tool" --target-processes all --launch-timeout 120 \
    --report-api-errors "${API_ERRORS:-no}" --error-exitcode 86 \
    ${tool_flags[@]+"${tool_flags[@]}"} ${extra_flags[@]+"${extra_flags[@]}"} \
    "$binary" --ranks="$ranks" --time-limit="$time_limit" --gtest_filter="$filter" \
    >"$log" 2>&1
  rc=$?
  summary+=("== $tool on $ranks ranks: rc=$rc in $((SECONDS - start)) s, log $log")
  summary+=("   filter: $filter")
  # One summary line per sanitized process (the launcher and each rank), counted.
  while IFS= read -r line; do summary+=("   $line"); done < <(
    grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | sed -E 's/^.*(ERROR|RACECHECK) SUMMARY/\1 SUMMARY/' |
      sort | uniq -c)
  grep -qE '(ERROR|RACECHECK) SUMMARY' "$log" || summary+=("   no sanitizer summary line in the log")
  while IFS= read -r line; do summary+=("   $line"); done < <(
    grep -E '\[  (PASSED|FAILED)  \]|^rank [0-9]+: |passed, [0-9]+ failed|SKIP' "$log" |
      tail -n 12)
done

echo "== sanitizer"
head -n 2 "$out/sanitizer-version.txt"
printf '%s\n' "${summary[@]}"
