#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host time of one eager dispatch from Python with torch tensors, minus the same call made
from C in the same process, on one GPU with one rank.

    python3 bench/python_overhead.py [--iters 200] [--out overhead.json]

Needs torch with CUDA and NCCL, a C compiler (`cc`), and libepcomm ($EPCOMM_LIB, else the
package's usual search). Sets up a one-rank NCCL process group (tcp://127.0.0.1) and two
epcomm.torch Buffers, low latency (hidden 7168, 64 experts, 128 tokens, top-8) and high
throughput (hidden 7168, 64 experts, 1024 tokens, top-8), then times, per path:

  python   `buffer.ll_dispatch(x, topk_idx, topk_weights, out_x=..., out_expert_counts=...)`
           (routing update + dispatch: 2 C calls, 5 tensors) and `buffer.ht_dispatch(...)`
           with its 5 outputs preallocated (routing update + dispatch: 2 C calls, 8 tensors);
  c        the same two C calls (epc_handle_update, epc_dispatch) with the same structs,
           made by a loop in a small C file this script compiles at run time (cc -O2) and
           loads with ctypes: the loop takes the C functions' addresses, the handle, the
           structs' addresses and the stream, and times each pair with clock_gettime, so
           no Python runs inside the timed region. The structs are the ones the Python call
           filled (a C caller builds its structs once for static buffers too; filling them
           costs a C caller a few ns);
  core     for information: the core API's `handle.update(topk_idx)` + `handle.dispatch(...)`
           with the same torch tensors (a new EpcTensor per tensor per call).

Every sample is one call on an idle GPU: the stream is synchronised before each timed call
(a queue full of kernels would time the GPU instead), and combine runs untimed after each
dispatch. Reports the median, 10th and 90th percentiles in microseconds and the overhead
(median python - median c). No target is asserted.
"""

import argparse
import ctypes
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

C_LOOP = r"""
#include <stdint.h>
#include <time.h>
typedef int (*step_fn)(void*, const void*, void*);
typedef int (*sync_fn)(void*);
static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
/* n times: synchronise, time update + dispatch, run combine untimed. Returns the first
 * non-zero status, else 0; out_ns[i] is the i-th pair's host time. */
int time_steps(step_fn update, step_fn dispatch, step_fn combine, void* handle,
               const void* routing, const void* dispatch_args, const void* combine_args,
               void* stream, sync_fn sync, int n, int64_t* out_ns) {
  for (int i = 0; i < n; ++i) {
    if (sync(stream)) return -1;
    int64_t t0 = now_ns();
    int s = update(handle, routing, stream);
    if (!s) s = dispatch(handle, dispatch_args, stream);
    int64_t t1 = now_ns();
    if (!s) s = combine(handle, combine_args, stream);
    if (s) return s;
    out_ns[i] = t1 - t0;
  }
  return sync(stream) ? -1 : 0;
}
"""


def c_loop(directory):
    source = os.path.join(directory, "python_overhead_loop.c")
    library = os.path.join(directory, "python_overhead_loop.so")
    with open(source, "w") as f:
        f.write(C_LOOP)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    loop = ctypes.CDLL(library)
    loop.time_steps.restype = ctypes.c_int
    loop.time_steps.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    return loop


def summary(samples_ns):
    us = sorted(s / 1000 for s in samples_ns)
    pick = lambda q: us[min(len(us) - 1, int(q * len(us)))]  # noqa: E731
    return {"median_us": round(statistics.median(us), 2), "p10_us": round(pick(0.1), 2), "p90_us": round(pick(0.9), 2)}


def time_python(torch, call, combine, iters):
    samples = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        combine()
        samples.append(t1 - t0)
    torch.cuda.synchronize()
    return samples


def time_c(torch, loop, buffer, state, dispatch_args, combine_args, iters):
    from epcomm import _library

    cuda = ctypes.CDLL("libcuda.so.1")
    sync = ctypes.cast(cuda.cuStreamSynchronize, ctypes.c_void_p).value
    addr = lambda name: ctypes.cast(_library.library().function(name), ctypes.c_void_p).value  # noqa: E731
    out = (ctypes.c_int64 * iters)()
    stream = torch.cuda.current_stream().cuda_stream
    status = loop.time_steps(
        addr("epc_handle_update"), addr("epc_dispatch"), addr("epc_combine"), state.address,
        state.routing.address, dispatch_args.address, combine_args.address, stream, sync, iters, out,
    )  # fmt: skip
    if status:
        raise RuntimeError(f"the C loop failed with status {status}: {_library.last_error()}")
    return list(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        sys.exit("python_overhead.py: torch is not installed; nothing was measured")
    if not torch.cuda.is_available():
        sys.exit("python_overhead.py: no CUDA GPU is visible; nothing was measured")
    import epcomm
    import epcomm.torch as ept

    torch.cuda.set_device(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    hidden, experts, topk = 7168, 64, 8
    results = {"device": torch.cuda.get_device_name(0), "cpu": platform.processor() or platform.machine(),
               "python": platform.python_version(), "torch": torch.__version__, "iters": args.iters}  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        loop = c_loop(directory)
        for mode, tokens in (("low_latency", 128), ("high_throughput", 1024)):
            buffer = ept.Buffer(
                num_experts=experts, hidden=hidden, max_tokens_per_rank=tokens, max_topk=topk, mode=mode
            )
            try:
                g = torch.Generator(device="cuda").manual_seed(0)
                x = torch.randn(tokens, hidden, device="cuda", generator=g).to(torch.bfloat16)
                idx = torch.stack([torch.randperm(experts, device="cuda", generator=g)[:topk] for _ in range(tokens)])
                w = torch.full((tokens, topk), 1.0 / topk, device="cuda")
                state = buffer._slot(0)  # noqa: SLF001
                if mode == "low_latency":
                    outs = buffer.ll_dispatch(x, idx, w)
                    expert_out, out = outs[0].clone(), torch.empty_like(x)
                    call = lambda: buffer.ll_dispatch(x, idx, w, out_x=outs[0], out_expert_counts=outs[1])  # noqa: E731
                    combine = lambda: buffer.ll_combine(expert_out, idx, out=out)  # noqa: E731
                    dispatch_args = state.ll_dispatch
                    core_kwargs = dict(out_x=outs[0], topk_weights=w, out_expert_counts=outs[1])
                else:
                    outs = buffer.ht_dispatch(x, idx, w)
                    expert_out, out = outs[0].clone(), torch.empty_like(x)
                    names = ("out_x", "out_topk_idx", "out_topk_weights", "out_expert_counts", "out_num_recv")
                    kw = dict(zip(names, outs))
                    call = lambda: buffer.ht_dispatch(x, idx, w, **kw)  # noqa: E731
                    combine = lambda: buffer.ht_combine(expert_out, idx, out=out)  # noqa: E731
                    dispatch_args = state.ht_dispatch
                    core_kwargs = dict(topk_weights=w, **kw)
                time_python(torch, call, combine, args.warmup)
                python = time_python(torch, call, combine, args.iters)
                c = time_c(torch, loop, buffer, state, dispatch_args, state.combine, args.iters)
                handle = state.handle

                def core():
                    handle.update(idx)
                    handle.dispatch(x, **core_kwargs)

                time_python(torch, core, combine, args.warmup)
                core_samples = time_python(torch, core, combine, args.iters)
                entry = {"tokens": tokens, "hidden": hidden, "experts": experts, "topk": topk,
                         "python": summary(python), "c": summary(c), "core_api": summary(core_samples)}  # fmt: skip
                entry["overhead_us"] = round(entry["python"]["median_us"] - entry["c"]["median_us"], 2)
                entry["core_api_overhead_us"] = round(entry["core_api"]["median_us"] - entry["c"]["median_us"], 2)
                entry["comm_source"] = buffer.comm_source
                results[mode] = entry
                print(f"{mode}: python {entry['python']}, c {entry['c']}, core API {entry['core_api']}; "
                      f"overhead {entry['overhead_us']} us (core API {entry['core_api_overhead_us']} us)", flush=True)  # fmt: skip
            finally:
                torch.cuda.synchronize()
                buffer.close()
    dist.destroy_process_group()
    print(json.dumps(results, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    del epcomm
    return 0


if __name__ == "__main__":
    sys.exit(main())
