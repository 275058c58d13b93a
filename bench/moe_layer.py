#!/usr/bin/env python3
"""A real MoE layer on epcomm's low-latency path, checked and timed against torch.

    python3 bench/moe_layer.py [--gpus N] [--tokens 1,4,16,64,128] [--out moe.json]

Needs torch with CUDA and NCCL, and libepcomm ($EPCOMM_LIB, else .gpu/ or build/ in this
checkout). One process per GPU (torch.multiprocessing). Each rank holds experts/N experts
(a SiLU MLP: y = silu(x W1) W2, bf16) and runs, for decode-size batches:
  ours:     router (x Wr, fp32) -> top-k -> softmax weights -> epc_handle_update ->
            epc_ll_dispatch -> one matmul pair per local expert on its received rows ->
            epc_ll_combine;
  baseline: the same layer on torch.distributed.all_to_all_single: sort the (token, expert)
            selections by expert, exchange counts, all_to_all the rows, compute, all_to_all
            back, weighted sum.
Both are checked against the same layer computed on one GPU (rank 0 holds every expert and
every rank's tokens), then timed with CUDA events around the whole layer (median of the
slowest rank). Reports tokens per second for the whole group (N x tokens per rank / time).
Both paths read the per-expert row counts on the host once per layer (ours: out_counts;
the baseline: its split sizes), so both synchronise once.

The Python binding has no handle/dispatch wrappers yet; the raw ctypes declarations of
bindings/python/epcomm/_ffi.py are called directly.
"""
import argparse
import ctypes
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=0, help="ranks (default: every visible GPU)")
    p.add_argument("--tokens", default="1,4,16,64,128", help="tokens per rank, comma-separated")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=1024, help="expert intermediate size")
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--topk", type=int, default=6)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tolerance", type=float, default=2e-2,
                   help="max |out - reference| / max |reference| allowed (bf16 layer)")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args(argv)
    try:
        args.token_list = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        p.error(f"--tokens: expected comma-separated integers, got {args.tokens!r}")
    if any(t < 1 for t in args.token_list):
        p.error("--tokens: every value must be at least 1")
    if args.hidden % 8:
        p.error("--hidden must be a multiple of 8")
    return args


def find_library():
    if os.environ.get("EPCOMM_LIB"):
        return os.environ["EPCOMM_LIB"]
    for candidate in (".gpu", "build"):
        path = os.path.join(ROOT, candidate, "capi", "libepcomm.so.1")
        if os.path.exists(path):
            return path
    return None


# ---- the layer's parts shared by every version -----------------------------------------------

def make_weights(torch, args, experts, device):
    """Router and the given experts' weights, identical on every rank (seeded per expert)."""
    g = torch.Generator(device=device)
    g.manual_seed(args.seed)
    router = torch.randn(args.hidden, args.experts, generator=g, device=device) / args.hidden ** 0.5
    w1, w2 = [], []
    for e in experts:
        g.manual_seed(args.seed * 1000003 + e)
        w1.append((torch.randn(args.hidden, args.ffn, generator=g, device=device)
                   / args.hidden ** 0.5).to(torch.bfloat16))
        w2.append((torch.randn(args.ffn, args.hidden, generator=g, device=device)
                   / args.ffn ** 0.5).to(torch.bfloat16))
    return router, w1, w2


def route(torch, x, router, topk):
    logits = x.float() @ router
    top, idx = torch.topk(logits, topk, dim=1)
    return idx.contiguous(), torch.softmax(top, dim=1).contiguous()


def expert(torch, rows, w1, w2):
    return torch.nn.functional.silu(rows @ w1) @ w2


def reference_layer(torch, x, router, w1, w2, topk):
    """Every expert on one GPU: out[t] = sum_k w[t,k] * expert_idx[t,k](x[t]), fp32 sum."""
    idx, weights = route(torch, x, router, topk)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(len(w1)):
        token, slot = (idx == e).nonzero(as_tuple=True)
        if token.numel():
            y = expert(torch, x[token], w1[e], w2[e]).float()
            out.index_add_(0, token, y * weights[token, slot].unsqueeze(1))
    return out.to(torch.bfloat16)


# ---- ours: epcomm's low-latency dispatch and combine -----------------------------------------

class EpcommLayer:
    def __init__(self, torch, epcomm, comm, args, rank, nranks, max_tokens):
        from epcomm import _ffi
        self.torch, self.epcomm, self._ffi = torch, epcomm, _ffi
        self.lib = epcomm.load_library()
        self.args, self.rank, self.nranks = args, rank, nranks
        self.local = args.experts // nranks
        self.max_tokens = max_tokens
        config = epcomm.GroupConfig(num_experts=args.experts, hidden=args.hidden,
                                    max_tokens_per_rank=max_tokens, max_topk=args.topk)
        self.group = epcomm.Group.create(comm, config)
        self.group_ptr = ctypes.cast(ctypes.c_void_p(self.group.handle), ctypes.POINTER(_ffi.EpcGroup))
        dev = torch.device("cuda", torch.cuda.current_device())
        rows = nranks * max_tokens
        self.out_x = torch.empty(self.local, rows, args.hidden, dtype=torch.bfloat16, device=dev)
        self.expert_y = torch.zeros_like(self.out_x)
        self.counts = torch.zeros(self.local, dtype=torch.int32, device=dev)
        self.router, self.w1, self.w2 = make_weights(
            torch, args, range(rank * self.local, (rank + 1) * self.local), dev)
        self.handles = {}

    def stream(self):
        return ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)

    def call(self, name, *args):
        self.lib.call(name, *args)

    def handle_for(self, idx):
        """One handle per batch size, created once; every forward updates its routing."""
        batch = idx.shape[0]
        t = self.epcomm.as_tensor(idx)
        if batch not in self.handles:
            out = ctypes.POINTER(self._ffi.EpcHandle)()
            self.call("epc_handle_create", self.group_ptr, t.byref(), self.stream(), ctypes.byref(out))
            self.handles[batch] = (out, t)
        else:
            self.call("epc_handle_update", self.handles[batch][0], t.byref(), self.stream())
            self.handles[batch] = (self.handles[batch][0], t)  # keep idx alive until used
        return self.handles[batch][0]

    def forward(self, x):
        torch, as_tensor = self.torch, self.epcomm.as_tensor
        idx, weights = route(torch, x, self.router, self.args.topk)
        handle = self.handle_for(idx)
        tx, tw = as_tensor(x), as_tensor(weights)
        tox, tc = as_tensor(self.out_x), as_tensor(self.counts)
        self.call("epc_ll_dispatch", handle, tx.byref(), tw.byref(), tox.byref(), tc.byref(), 0, self.stream())
        for l, n in enumerate(self.counts.tolist()):  # the one host synchronisation
            if n:
                self.expert_y[l, :n] = expert(torch, self.out_x[l, :n], self.w1[l], self.w2[l])
        out = torch.empty_like(x)
        ty, to = as_tensor(self.expert_y), as_tensor(out)
        self.call("epc_ll_combine", handle, ty.byref(), to.byref(), 0, self.stream())
        return out

    def close(self):
        torch = self.torch
        torch.cuda.synchronize()
        for handle, _ in self.handles.values():
            self.call("epc_handle_destroy", handle)
        self.handles.clear()
        self.group.close()


# ---- the baseline: torch.distributed.all_to_all_single ---------------------------------------

class AllToAllLayer:
    def __init__(self, torch, dist, args, rank, nranks):
        self.torch, self.dist, self.args = torch, dist, args
        self.rank, self.nranks = rank, nranks
        self.local = args.experts // nranks
        dev = torch.device("cuda", torch.cuda.current_device())
        self.router, self.w1, self.w2 = make_weights(
            torch, args, range(rank * self.local, (rank + 1) * self.local), dev)

    def forward(self, x):
        torch, dist = self.torch, self.dist
        R, L, K = self.nranks, self.local, self.args.topk
        idx, weights = route(torch, x, self.router, K)
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)  # selections grouped by expert, so by rank
        send = x[order // K]
        counts = torch.bincount(flat, minlength=self.args.experts).to(torch.int32)
        recv_counts = torch.empty_like(counts)  # [R * L]: each source's rows per local expert
        dist.all_to_all_single(recv_counts, counts)
        both = torch.stack([counts.view(R, L).sum(1), recv_counts.view(R, L).sum(1)]).tolist()
        per_expert = recv_counts.view(R, L).tolist()  # the one host synchronisation
        send_splits, recv_splits = both
        recv = x.new_empty(sum(recv_splits), x.shape[1])
        dist.all_to_all_single(recv, send, recv_splits, send_splits)
        # Received rows are grouped by (source, local expert); run each expert on its rows.
        local_expert = torch.repeat_interleave(
            torch.arange(L, device=x.device).repeat(R),
            torch.tensor([c for row in per_expert for c in row], device=x.device),
            output_size=sum(recv_splits))
        by_expert = torch.argsort(local_expert, stable=True)
        y = torch.empty_like(recv)
        start = 0
        for l in range(L):
            n = sum(per_expert[s][l] for s in range(R))
            if n:
                rows = by_expert[start:start + n]
                y[rows] = expert(torch, recv[rows], self.w1[l], self.w2[l])
            start += n
        back = torch.empty_like(send)
        dist.all_to_all_single(back, y, send_splits, recv_splits)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        out.index_add_(0, order // K, back.float() * weights.flatten()[order].unsqueeze(1))
        return out.to(torch.bfloat16)


# ---- one rank ---------------------------------------------------------------------------

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


def rank_main(rank, nranks, uid_hex, port, args, library, result_path):
    os.environ["EPCOMM_LIB"] = library
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import torch
    import torch.distributed as dist
    import epcomm

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nranks, device_id=dev)
    comm = epcomm.Comm.init(epcomm.UniqueId.from_hex(uid_hex), nranks, rank, device=rank)
    max_tokens = max(args.token_list)
    ours = EpcommLayer(torch, epcomm, comm, args, rank, nranks, max_tokens)
    base = AllToAllLayer(torch, dist, args, rank, nranks)
    reference = None
    if rank == 0:
        router, w1, w2 = make_weights(torch, args, range(args.experts), dev)
        reference = (router, w1, w2)
    rows = []
    failed = False
    for tokens in args.token_list:
        g = torch.Generator(device=dev)
        g.manual_seed(args.seed * 7919 + rank * 104729 + tokens)
        x = torch.randn(tokens, args.hidden, generator=g, device=dev).to(torch.bfloat16)
        y_ours, y_base = ours.forward(x), base.forward(x)
        # Check on rank 0 against every rank's tokens through one GPU.
        xs = [torch.empty_like(x) for _ in range(nranks)]
        ys_ours = [torch.empty_like(x) for _ in range(nranks)]
        ys_base = [torch.empty_like(x) for _ in range(nranks)]
        dist.all_gather(xs, x)
        dist.all_gather(ys_ours, y_ours)
        dist.all_gather(ys_base, y_base)
        errors = torch.zeros(2, device=dev)
        if rank == 0:
            ref = reference_layer(torch, torch.cat(xs), *reference, args.topk).float()
            scale = ref.abs().max().clamp_min(1e-6)
            errors[0] = (torch.cat(ys_ours).float() - ref).abs().max() / scale
            errors[1] = (torch.cat(ys_base).float() - ref).abs().max() / scale
        dist.broadcast(errors, 0)
        err_ours, err_base = errors.tolist()
        ok = err_ours <= args.tolerance and err_base <= args.tolerance
        t_ours = timed(torch, ours.forward, x, args.warmup, args.iters) if ok else float("nan")
        t_base = timed(torch, base.forward, x, args.warmup, args.iters) if ok else float("nan")
        slowest = torch.tensor([t_ours, t_base], device=dev)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        t_ours, t_base = slowest.tolist()
        rows.append({"tokens_per_rank": tokens, "ours_us": t_ours, "baseline_us": t_base,
                     "ours_tokens_per_s": nranks * tokens / t_ours * 1e6 if ok else None,
                     "baseline_tokens_per_s": nranks * tokens / t_base * 1e6 if ok else None,
                     "ours_max_rel_error": err_ours, "baseline_max_rel_error": err_base,
                     "checked": ok})
        if not ok:
            failed = True
            if rank == 0:
                print(f"moe_layer: {tokens} tokens per rank: result differs from the one-GPU "
                      f"reference (ours {err_ours:.3g}, baseline {err_base:.3g}, tolerance "
                      f"{args.tolerance}); not timed", file=sys.stderr)
        elif rank == 0:
            print(f"[moe_layer] {tokens} tokens per rank: ours {t_ours:.1f} us, all_to_all "
                  f"{t_base:.1f} us", file=sys.stderr, flush=True)
    ours.close()
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        gpu = torch.cuda.get_device_name(dev)
        with open(result_path, "w", encoding="utf-8") as f:
            json.dump({"gpus": nranks, "gpu_name": gpu, "torch": torch.__version__,
                       "config": {k: v for k, v in vars(args).items() if k != "token_list"},
                       "points": rows}, f, indent=2)
    if failed:
        sys.exit(1)


def free_port():
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
        sys.exit("moe_layer.py: libepcomm.so.1 not found: set EPCOMM_LIB (or build into build/, "
                 "or stage into .gpu/)")
    os.environ["EPCOMM_LIB"] = library
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import epcomm
    uid = epcomm.UniqueId.create()  # this process keeps NCCL's bootstrap root alive
    result_path = args.out or os.path.join(os.getcwd(), "moe_layer.json")
    if os.path.exists(result_path):
        os.remove(result_path)  # a stale file must not pass for this run's result
    failed = False
    try:
        mp.spawn(rank_main, args=(nranks, uid.hex(), free_port(), args, library, result_path),
                 nprocs=nranks, join=True)
    except Exception as error:  # noqa: BLE001 (a rank failed: report and exit non-zero)
        print(f"moe_layer.py: a rank failed: {error}", file=sys.stderr)
        failed = True
    if not os.path.exists(result_path):
        return 1
    with open(result_path, encoding="utf-8") as f:
        record = json.load(f)
    print(f"MoE layer on {nranks} x {record['gpu_name']}: hidden {args.hidden}, ffn {args.ffn}, "
          f"{args.experts} experts, top-{args.topk}, bf16; median of the slowest rank over "
          f"{args.iters} layers")
    print(f"{'tokens/rank':>11} | {'ours us':>9} | {'a2a us':>9} | {'ours tok/s':>11} | "
          f"{'a2a tok/s':>11} | {'speed-up':>8} | max rel err ours / a2a")
    for r in record["points"]:
        if not r["checked"]:
            print(f"{r['tokens_per_rank']:>11} | WRONG RESULT (ours {r['ours_max_rel_error']:.3g}, "
                  f"a2a {r['baseline_max_rel_error']:.3g}): not timed")
            continue
        print(f"{r['tokens_per_rank']:>11} | {r['ours_us']:>9.1f} | {r['baseline_us']:>9.1f} | "
              f"{r['ours_tokens_per_s']:>11.0f} | {r['baseline_tokens_per_s']:>11.0f} | "
              f"{r['baseline_us'] / r['ours_us']:>8.2f} | {r['ours_max_rel_error']:.2g} / "
              f"{r['baseline_max_rel_error']:.2g}")
    print(f"(JSON: {result_path})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
