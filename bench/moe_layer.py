#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A real MoE layer on epcomm, checked against one GPU and timed against torch.

    python3 bench/moe_layer.py [--gpus N] [--tokens 1,4,16,64,128]
                               [--prefill-tokens 1024,4096] [--ht-sms 24]
                               [--ht-alignment 128] [--out moe.json]

Needs torch with CUDA and NCCL, and libepcomm ($EPCOMM_LIB, else .gpu/ or build/ in this
checkout). One process per GPU (torch.multiprocessing). Each rank holds experts/N experts
(a SiLU MLP: y = silu(x W1) W2, bf16) and runs the layer, router (x Wr, fp32) -> top-k ->
softmax weights -> dispatch -> experts -> combine, in three versions:
  ours, ll (decode sizes, --tokens): epcomm.torch's low-latency Buffer on the process
        group: Buffer.ll_dispatch (routing and dispatch, the batch as the step's bound,
        max_step_tokens, since every rank runs the same) -> one matmul pair per local
        expert on its received rows -> Buffer.ll_combine (bench/moe/ll_path.py);
  ours, ht (prefill sizes, --prefill-tokens; '' skips them): epcomm.torch's high-throughput
        Buffer (--ht-sms SMs) on the expert-packed layout: Buffer.ht_dispatch_packed (the
        layout exchange is part of the timed layer) -> one matmul pair per local expert
        on its zone of rows (zones aligned to --ht-alignment rows) -> Buffer.ht_combine,
        which weights each row on the expert's rank (bench/moe/ht_path.py);
  baseline, at every size: the same layer on torch.distributed.all_to_all_single: sort the
        (token, expert) selections by expert, exchange counts, all_to_all the rows, compute,
        all_to_all back, weighted sum (bench/moe/baseline.py).
Each point is checked against the same layer computed on one GPU (rank 0 holds every expert
and every rank's tokens), then timed with CUDA events around the whole layer (median of the
slowest rank). Reports tokens per second for the whole group (N x tokens per rank / time).
Host synchronisations per layer: the baseline reads its split sizes; ll reads the
per-expert counts; ht reads the per-expert counts and offsets.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from moe.cli import BINDINGS, find_library, parse_args  # noqa: E402
from moe.report import print_table  # noqa: E402


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        sys.exit("moe_layer.py: torch is not installed (it needs torch with CUDA and NCCL)")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        sys.exit("moe_layer.py: no CUDA GPU is visible; nothing was measured")
    nranks = args.gpus or torch.cuda.device_count()
    if nranks > torch.cuda.device_count():
        sys.exit(f"moe_layer.py: --gpus={nranks} but {torch.cuda.device_count()} GPUs are visible")
    if args.experts % nranks:
        sys.exit(f"moe_layer.py: --experts={args.experts} is not divisible by {nranks} ranks")
    library = find_library()
    if library is None:
        sys.exit("moe_layer.py: libepcomm.so.2 not found: set EPCOMM_LIB (or build into build/, or stage into .gpu/)")
    os.environ["EPCOMM_LIB"] = library
    sys.path.insert(0, BINDINGS)
    from moe.run import rank_main

    result_path = args.out or os.path.join(os.getcwd(), "moe_layer.json")
    if os.path.exists(result_path):
        os.remove(result_path)  # a stale file must not pass for this run's result
    failed = False
    try:
        mp.spawn(rank_main, args=(nranks, free_port(), args, library, result_path), nprocs=nranks, join=True)
    except Exception as error:  # noqa: BLE001 (a rank failed: report and exit non-zero)
        print(f"moe_layer.py: a rank failed: {error}", file=sys.stderr)
        failed = True
    if not os.path.exists(result_path):
        return 1
    with open(result_path, encoding="utf-8") as f:
        record = json.load(f)
    print_table(record, result_path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
