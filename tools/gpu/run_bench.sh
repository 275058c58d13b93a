#!/usr/bin/env bash
# Runs the benchmark on a GPU machine from staged binaries (tools/gpu/stage.sh), writing JSON,
# PNG charts and logs into $OUT (or ./bench-out), and prints the tables last.
# Usage: tools/gpu/run_bench.sh [STAGE_DIR] [RANKS]   (default: .gpu, every visible GPU)
#
#  1. the low-latency sweep: 1, 2, 4, ..., 256 tokens per rank, hidden 7168, top-8, 256
#     experts, bf16, uniform routing, with the NCCL baseline and the LSA ceiling (about a
#     minute on 4 H200: 9 points x (ours + baseline + ceiling) x 220 steps, plus start-up);
#  2. a short second run of the other paths (send-only + complete, CUDA graph replay, skewed
#     and masked routing) at 1 and 128 tokens, without baseline and ceiling, so that a
#     failure there cannot cost the sweep's results;
#  3. fp8 dispatch (epc_ll_dispatch_fp8) at 1 and 128 tokens, with graph replay;
#  4. the charts of every run (bench/plot.py, matplotlib);
#  5. bench/moe_layer.py (torch): a real MoE layer on our LL path checked against one GPU and
#     timed against torch.distributed.all_to_all_single (skip it with MOE=0).
# Worst case (every step at its time limit): 240 + 90 + 90 + 200 s.
set -uo pipefail
stage=${1:-.gpu}
ranks=${2:-}
out=${OUT:-./bench-out}
mkdir -p "$out"

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Prefer an NCCL of the same series as the headers we compiled against (GPU.md).
for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
rank_flag=()
[ -n "$ranks" ] && rank_flag=(--ranks="$ranks")

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$out/machine.txt" 2>&1

status=0
start=$SECONDS
# stdout (the harness's relayed lines, then the table) to a log; stderr (progress) to the
# terminal and a log.
"$stage/bench/epcomm-bench" "${rank_flag[@]}" --time-limit=240 \
  --mode=ll --tokens=1..256 --hidden=7168 --topk=8 --experts=256 --dtype=bf16 \
  --routing=uniform --warmup=20 --iters=200 --graph --out="$out/ll_sweep.json" \
  >"$out/ll_sweep.log" 2> >(tee "$out/ll_sweep.progress.log" >&2)
rc_sweep=$?
sweep_s=$((SECONDS - start))
[ $rc_sweep -ne 0 ] && status=1

start=$SECONDS
"$stage/bench/epcomm-bench" "${rank_flag[@]}" --time-limit=90 \
  --mode=ll --tokens=1,128 --hidden=7168 --topk=8 --experts=256 --routing=skewed --hot-share=0.5 \
  --masked=0.05 --send-only --graph --baseline=off --ceiling=off --iters=100 \
  --out="$out/ll_paths.json" >"$out/ll_paths.log" 2> >(tee "$out/ll_paths.progress.log" >&2)
rc_paths=$?
paths_s=$((SECONDS - start))
[ $rc_paths -ne 0 ] && status=1

start=$SECONDS
"$stage/bench/epcomm-bench" "${rank_flag[@]}" --time-limit=90 \
  --mode=ll --tokens=1,128 --hidden=7168 --topk=8 --experts=256 --dtype=fp8 --routing=uniform \
  --graph --baseline=off --ceiling=off --iters=200 \
  --out="$out/ll_fp8.json" >"$out/ll_fp8.log" 2> >(tee "$out/ll_fp8.progress.log" >&2)
rc_fp8=$?
fp8_s=$((SECONDS - start))
[ $rc_fp8 -ne 0 ] && status=1

for json in "$out/ll_sweep.json" "$out/ll_paths.json" "$out/ll_fp8.json"; do
  [ -s "$json" ] || continue
  python3 bench/plot.py "$json" --out "$out" >>"$out/plot.log" 2>&1 || { echo "plot.py failed on $json (see $out/plot.log)"; status=1; }
done

rc_moe=skipped
if [ "${MOE:-1}" != 0 ]; then
  start=$SECONDS
  timeout 200 python3 bench/moe_layer.py ${ranks:+--gpus=$ranks} --out "$out/moe_layer.json" \
    >"$out/moe_layer.log" 2>&1
  rc_moe=$?
  moe_s=$((SECONDS - start))
  [ $rc_moe -ne 0 ] && status=1
fi

echo "== machine"
cat "$out/machine.txt"
if [ "$rc_moe" != skipped ]; then
  echo "== MoE layer: ours vs torch all_to_all_single (rc=$rc_moe, ${moe_s}s; log $out/moe_layer.log)"
  tail -n 12 "$out/moe_layer.log"
fi
echo "== run 2: send-only + graph, skewed and masked routing (rc=$rc_paths, ${paths_s}s; log $out/ll_paths.log)"
sed -n '/^FORMAT SAMPLE\|^epcomm-bench /,$p' "$out/ll_paths.log"
echo "== run 3: fp8 dispatch (rc=$rc_fp8, ${fp8_s}s; log $out/ll_fp8.log)"
sed -n '/^FORMAT SAMPLE\|^epcomm-bench /,$p' "$out/ll_fp8.log"
echo "== run 1: the low-latency sweep (rc=$rc_sweep, ${sweep_s}s; log $out/ll_sweep.log)"
sed -n '/^FORMAT SAMPLE\|^epcomm-bench /,$p' "$out/ll_sweep.log"
[ $rc_sweep -ne 0 ] && tail -n 30 "$out/ll_sweep.log"
ls "$out"
exit $status
