#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the benchmark on a GPU machine from staged binaries (tools/gpu/stage.sh), writing JSON,
# tables (<run>.txt), PNG charts and logs into $OUT (or ./bench-out), and prints the tables
# last.
# Usage: tools/gpu/run_bench.sh [STAGE_DIR] [RANKS]   (default: .gpu, every visible GPU)
#        LL=0, HT=0, VNODES=0 or MOE=0 in the environment skip that part; CUPTI=0 runs every
#        benchmark with --cupti=off (no kernel-span columns, no LL floor; docs/measuring.md).
#
# Low-latency (LL=0 skips):
#  1. ll_sweep: 1, 2, 4, ..., 256 tokens per rank, hidden 7168, top-8, 256 experts, bf16,
#     uniform routing, with the NCCL baseline and the LSA ceiling (about a minute on 4 H200:
#     9 points x (ours + baseline + ceiling) x 220 steps, plus start-up);
#  2. ll_paths: a short run of the other paths (send-only + complete, CUDA graph replay,
#     skewed and masked routing) at 1 and 128 tokens, without baseline and ceiling, so that a
#     failure there cannot cost the sweep's results;
#  3. ll_fp8: fp8 dispatch (epc_ll_dispatch_fp8) at 1 and 128 tokens, with graph replay.
# High-throughput (HT=0 skips), each in a group sized for 16384 tokens per rank (about 2 GB
# of window per GPU at hidden 7168 on 4 ranks, plus outputs and the baseline's buffers):
#  4. ht_sweep: 1024, 2048, ..., 16384 tokens per rank, bf16, exact sizing, with the NCCL
#     baseline, the ceiling (every SM and our SM budget) and graph replay; 5 warm-up and 30
#     timed steps per measurement, 3 and 10 from 8192 tokens (a 16384-token step moves about
#     1 GB per GPU);
#  5. ht_fp8: the same sweep with caller-quantized fp8 payloads (e4m3 + fp32 scales);
#  6. ht_capacity: capacity sizing (no host synchronisation; epc_handle_update timed) with
#     graph replay at 4096 tokens, without baseline and ceiling.
# Virtual nodes (VNODES=0 skips; LL=0 and HT=0 skip their half), one small point per run,
# our side only (the baseline and the ceiling do not use virtual nodes), with graph replay:
#  7. ll_vnodes2, ht_vnodes2: --virtual-node-size=2 (two nodes of 2 on 4 ranks; only when the
#     rank count is even and above 2), LL at 32 tokens and HT at 1024 tokens per rank;
#  8. ll_vnodes1, ht_vnodes1: --virtual-node-size=1 (every rank its own node: every peer
#     through the network transport's NVLink stand-in). The outputs are checked as in every
#     run; the JSON and tables split the wire bytes into NVLink and network. A few seconds
#     each, mostly start-up.
# Then:
#  9. the charts of every run but the one-point virtual-node runs, and HT bf16 against fp8
#     side by side (bench/plot.py);
# 10. bench/moe_layer.py (torch): a real MoE layer checked against one GPU and timed against
#     torch.distributed.all_to_all_single, on our LL path at decode sizes (1..128 tokens per
#     rank) and on our HT path at prefill sizes (1024 and 4096 tokens per rank, a handle per
#     layer, 24 SMs) (MOE=0 skips it).
# Worst case (every step at its time limit): 240 + 90 + 90 + 300 + 300 + 120 + 4 x 60 + 300 s.
set -uo pipefail
stage=${1:-.gpu}
ranks=${2:-}
out=${OUT:-./bench-out}
mkdir -p "$out"

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Prefer an NCCL of the same series as the headers we compiled against.
for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
rank_flag=()
[ -n "$ranks" ] && rank_flag=(--ranks="$ranks")
cupti_flag=()
[ "${CUPTI:-1}" = 0 ] && cupti_flag=(--cupti=off)

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$out/machine.txt" 2>&1

status=0
runs=()              # in the order they ran
declare -A rc secs   # per run

# bench NAME TIME_LIMIT FLAGS...: one epcomm-bench run writing NAME.json, NAME.log (the
# harness's relayed lines, then the table), NAME.progress.log (also on the terminal) and
# NAME.txt (the table alone).
bench() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  "$stage/bench/epcomm-bench" "${rank_flag[@]}" --time-limit="$limit" "${cupti_flag[@]}" "$@" --out="$out/$name.json" \
    >"$out/$name.log" 2> >(tee "$out/$name.progress.log" >&2)
  rc[$name]=$?
  secs[$name]=$((SECONDS - start))
  runs+=("$name")
  [ "${rc[$name]}" -ne 0 ] && status=1
  sed -n '/^FORMAT SAMPLE\|^epcomm-bench /,$p' "$out/$name.log" >"$out/$name.txt"
}

common=(--hidden=7168 --topk=8 --experts=256)
if [ "${LL:-1}" != 0 ]; then
  bench ll_sweep 240 --mode=ll --tokens=1..256 "${common[@]}" --dtype=bf16 --routing=uniform \
    --warmup=20 --iters=200 --graph
  bench ll_paths 90 --mode=ll --tokens=1,128 "${common[@]}" --routing=skewed --hot-share=0.5 \
    --masked=0.05 --send-only --graph --baseline=off --ceiling=off --iters=100
  bench ll_fp8 90 --mode=ll --tokens=1,128 "${common[@]}" --dtype=fp8 --routing=uniform \
    --graph --baseline=off --ceiling=off --iters=200
fi
if [ "${HT:-1}" != 0 ]; then
  ht_sweep=(--mode=ht --tokens=1024..16384 "${common[@]}" --routing=uniform --ht-sizing=exact
            --warmup=5 --iters=30 --large-from=8192 --large-warmup=3 --large-iters=10 --graph)
  bench ht_sweep 300 "${ht_sweep[@]}" --dtype=bf16
  bench ht_fp8 300 "${ht_sweep[@]}" --dtype=fp8
  bench ht_capacity 120 --mode=ht --tokens=4096 "${common[@]}" --dtype=bf16 --routing=uniform \
    --ht-sizing=capacity --warmup=5 --iters=30 --graph --baseline=off --ceiling=off
fi

if [ "${VNODES:-1}" != 0 ]; then
  # The world the runs above used: RANKS, else what the launcher would start.
  world=${ranks:-${EPC_TEST_RANKS:-}}
  if [ -z "$world" ] && [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    world=$(awk -F, '{print NF}' <<<"$CUDA_VISIBLE_DEVICES")
  fi
  [ -n "$world" ] || world=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  node_sizes=()
  [ "$world" -gt 2 ] && [ $((world % 2)) -eq 0 ] && node_sizes+=(2)
  [ "$world" -ge 2 ] && node_sizes+=(1)
  for n in "${node_sizes[@]}"; do
    if [ "${LL:-1}" != 0 ]; then
      bench "ll_vnodes$n" 60 --mode=ll --tokens=32 "${common[@]}" --dtype=bf16 --routing=uniform \
        --virtual-node-size="$n" --warmup=5 --iters=50 --graph --baseline=off --ceiling=off
    fi
    if [ "${HT:-1}" != 0 ]; then
      bench "ht_vnodes$n" 60 --mode=ht --tokens=1024 "${common[@]}" --dtype=bf16 --routing=uniform \
        --ht-sizing=exact --virtual-node-size="$n" --warmup=3 --iters=10 --graph --baseline=off --ceiling=off
    fi
  done
fi

for name in "${runs[@]}"; do
  [ -s "$out/$name.json" ] || continue
  case $name in *_vnodes*) continue ;; esac  # one point: nothing to chart
  python3 bench/plot.py "$out/$name.json" --out "$out" >>"$out/plot.log" 2>&1 ||
    { echo "plot.py failed on $name.json (see $out/plot.log)"; status=1; }
done
if [ -s "$out/ht_sweep.json" ] && [ -s "$out/ht_fp8.json" ]; then
  python3 bench/plot.py "$out/ht_sweep.json" "$out/ht_fp8.json" --out "$out" --name ht_bf16_vs_fp8 \
    >>"$out/plot.log" 2>&1 || { echo "plot.py failed on the HT comparison (see $out/plot.log)"; status=1; }
fi

rc_moe=skipped
if [ "${MOE:-1}" != 0 ]; then
  start=$SECONDS
  EPCOMM_COMMIT=$(cat "$stage/COMMIT" 2>/dev/null) timeout 300 python3 bench/moe_layer.py ${ranks:+--gpus=$ranks} --tokens=1,4,16,64,128 \
    --prefill-tokens=1024,4096 --ht-sms=24 --out "$out/moe_layer.json" >"$out/moe_layer.log" 2>&1
  rc_moe=$?
  moe_s=$((SECONDS - start))
  [ $rc_moe -ne 0 ] && status=1
fi

echo "== machine"
cat "$out/machine.txt"
if [ "$rc_moe" != skipped ]; then
  echo "== MoE layer: ours (LL decode, HT prefill) vs torch all_to_all_single (rc=$rc_moe," \
    "${moe_s}s; log $out/moe_layer.log)"
  tail -n 16 "$out/moe_layer.log"
fi
# The sweeps last, so that their tables end the output.
for name in ll_paths ll_fp8 ht_capacity ll_vnodes2 ht_vnodes2 ll_vnodes1 ht_vnodes1 ht_fp8 ll_sweep ht_sweep; do
  [ -n "${rc[$name]+set}" ] || continue
  echo "== $name (rc=${rc[$name]}, ${secs[$name]}s; log $out/$name.log, table $out/$name.txt)"
  cat "$out/$name.txt"
  [ "${rc[$name]}" -ne 0 ] && tail -n 30 "$out/$name.log"
done
ls "$out"
exit $status
