#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Everything the multi-GPU runs cover, in the order of their priority, in one command that
# fits one device call (machines with several GPUs are lent rarely and briefly): the GPU
# suite at RANKS, the bindings' GPU tests, memcheck and racecheck, then the benchmark with
# the MoE layer. Each part runs under its own time limit, logs into $OUT/<part>/ and the
# whole is tarred into $OUT/multi.tgz (one file comes back from a device call however many
# logs there are); a summary of every part is printed last.
# Usage: tools/gpu/run_multi.sh [STAGE_DIR] [RANKS]   (default: .gpu, every visible GPU)
#        PARTS="suite bindings sanitizers bench" (the default) picks and orders the parts.
# On 2 H200 the parts took about four minutes together; the limits below are caps, which
# add up to more than one device call may last, so where a part runs long split PARTS over
# two calls. Stage with bindings (tools/gpu/stage.sh) for the bindings part.
set -uo pipefail
stage=${1:-.gpu}
ranks=${2:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
out=${OUT:-./gpu-logs}
mkdir -p "$out"
tools=$(dirname "$0")

summary=()
part() {  # part NAME LIMIT_S COMMAND...: runs COMMAND with OUT=$out/NAME, keeps its last lines
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  mkdir -p "$out/$name"
  OUT="$out/$name" timeout --kill-after=20 "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  summary+=("== $name: rc=$rc in $((SECONDS - start)) s (log $out/$name.txt)")
  while IFS= read -r line; do summary+=("   $line"); done < <(tail -n "${TAIL:-14}" "$out/$name.txt" | cut -c1-220)
}

for p in ${PARTS:-suite bindings sanitizers bench}; do
  case $p in
    suite) part suite 240 env TIME_LIMIT=180 "$tools/run_suite.sh" "$stage" "$ranks" ;;
    bindings) part bindings 150 env EPCOMM_TEST_GPUS="$ranks" TIME_LIMIT=120 "$tools/run_bindings.sh" "$stage" ;;
    sanitizers)
      part memcheck 240 env TOOLS=memcheck TIME_LIMIT=200 "$tools/run_sanitizers.sh" "$stage" "$ranks"
      part racecheck 130 env TOOLS=racecheck TIME_LIMIT=100 "$tools/run_sanitizers.sh" "$stage" "$ranks"
      ;;
    bench) part bench 420 "$tools/run_bench.sh" "$stage" "$ranks" ;;
    *) echo "run_multi.sh: unknown part '$p' (suite, bindings, sanitizers, bench)" >&2; exit 2 ;;
  esac
done
(cd "$out" && tar czf multi.tgz --exclude=multi.tgz . 2>/dev/null)
printf '%s\n' "${summary[@]}"
