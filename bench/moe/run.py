# SPDX-License-Identifier: Apache-2.0
"""One rank of moe_layer.py (one process per GPU): build the layers, then for every point
check ours and the baseline against the layer on one GPU and time both.

Points: the decode sizes (--tokens) on the low-latency path ("ll"), then the prefill sizes
(--prefill-tokens) on the high-throughput path ("ht"); the baseline is the same
all_to_all_single layer at every size. Times are CUDA events around the whole layer, the
median over --iters layers after --warmup, of the slowest rank.
"""

import json
import os
import subprocess
import sys
import time

from .baseline import AllToAllLayer
from .cli import BINDINGS, recorded_config
from .ht_path import HtLayer
from .layer import local_weights, make_weights, reference_layer
from .ll_path import LlLayer


def build_commit():
    """The commit the library under test was built from: EPCOMM_COMMIT (tools/gpu/stage.sh
    writes it beside a staged build; run_bench.sh passes it), else this checkout's, else None."""
    if os.environ.get("EPCOMM_COMMIT"):
        return os.environ["EPCOMM_COMMIT"]
    try:
        return (
            subprocess.run(
                [
                    "git",
                    "-C",
                    os.path.dirname(os.path.abspath(__file__)),
                    "describe",
                    "--always",
                    "--dirty",
                    "--abbrev=12",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def timed(torch, forward, x, warmup, iters):
    for _ in range(warmup):
        forward(x)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        forward(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    times.sort()
    return times[len(times) // 2]


class Rank:
    """What every point of one rank needs: torch, the process group, the one-GPU reference
    weights (rank 0 only) and the baseline layer."""

    def __init__(self, torch, dist, args, rank, nranks, base):
        self.torch, self.dist, self.args = torch, dist, args
        self.rank, self.nranks, self.base = rank, nranks, base
        self.device = torch.device("cuda", rank)
        self.reference = None
        if rank == 0:  # rank 0 holds every expert and checks every rank's tokens
            self.reference = make_weights(torch, args, range(args.experts), self.device)

    def tokens(self, count):
        g = self.torch.Generator(device=self.device)
        g.manual_seed(self.args.seed * 7919 + self.rank * 104729 + count)
        return self.torch.randn(count, self.args.hidden, generator=g, device=self.device).to(self.torch.bfloat16)

    def errors(self, x, y_ours, y_base):
        """max |y - reference| / max |reference| of ours and of the baseline, over every
        rank's tokens, the same on every rank."""
        torch, dist = self.torch, self.dist
        gathered = []
        for t in (x, y_ours, y_base):
            parts = [torch.empty_like(t) for _ in range(self.nranks)]
            dist.all_gather(parts, t)
            gathered.append(torch.cat(parts))
        errors = torch.zeros(2, device=self.device)
        if self.rank == 0:
            xs, ys_ours, ys_base = gathered
            ref = reference_layer(torch, xs, *self.reference, self.args.topk).float()
            scale = ref.abs().max().clamp_min(1e-6)
            errors[0] = (ys_ours.float() - ref).abs().max() / scale
            errors[1] = (ys_base.float() - ref).abs().max() / scale
        dist.broadcast(errors, 0)
        return errors.tolist()

    def point(self, mode, ours, tokens):
        """Check, then time, ours (`mode`'s layer) and the baseline at `tokens` per rank."""
        torch, dist, args = self.torch, self.dist, self.args
        x = self.tokens(tokens)
        err_ours, err_base = self.errors(x, ours.forward(x), self.base.forward(x))
        ok = err_ours <= args.tolerance and err_base <= args.tolerance  # same on every rank
        t_ours = timed(torch, ours.forward, x, args.warmup, args.iters) if ok else float("nan")
        t_base = timed(torch, self.base.forward, x, args.warmup, args.iters) if ok else float("nan")
        slowest = torch.tensor([t_ours, t_base], device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        t_ours, t_base = slowest.tolist()
        if self.rank == 0:
            if ok:
                print(
                    f"[moe_layer] {mode} {tokens} tokens per rank: ours {t_ours:.1f} us, all_to_all {t_base:.1f} us",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                print(
                    f"moe_layer: {mode} {tokens} tokens per rank: result differs from the "
                    f"one-GPU reference (ours {err_ours:.3g}, baseline {err_base:.3g}, "
                    f"tolerance {args.tolerance}); not timed",
                    file=sys.stderr,
                    flush=True,
                )
        per_s = self.nranks * tokens * 1e6
        return {
            "mode": mode,
            "tokens_per_rank": tokens,
            "ours_us": t_ours,
            "baseline_us": t_base,
            "ours_tokens_per_s": per_s / t_ours if ok else None,
            "baseline_tokens_per_s": per_s / t_base if ok else None,
            "ours_max_rel_error": err_ours,
            "baseline_max_rel_error": err_base,
            "checked": ok,
        }


def rank_main(rank, nranks, port, args, library, result_path):
    os.environ["EPCOMM_LIB"] = library
    sys.path.insert(0, BINDINGS)
    import torch
    import torch.distributed as dist

    import epcomm.torch as ept

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks, device_id=dev)
    weights = local_weights(torch, args, rank, nranks, dev)  # shared by every version
    layers = [("ll", LlLayer(torch, ept, args, nranks, max(args.token_list), weights), args.token_list)]
    if args.prefill_list:
        layers.append(("ht", HtLayer(torch, ept, args, nranks, max(args.prefill_list), weights), args.prefill_list))
    me = Rank(torch, dist, args, rank, nranks, AllToAllLayer(torch, dist, args, nranks, weights))
    points = [me.point(mode, ours, tokens) for mode, ours, sizes in layers for tokens in sizes]
    for _, ours, _ in reversed(layers):
        ours.close()
    dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": " ".join(["python3", "bench/moe_layer.py", *sys.argv[1:]]),
                    "commit": build_commit(),
                    "gpus": nranks,
                    "gpu_name": torch.cuda.get_device_name(dev),
                    "torch": torch.__version__,
                    "config": recorded_config(args),
                    "points": points,
                },
                f,
                indent=2,
            )
    if not all(p["checked"] for p in points):
        sys.exit(1)
