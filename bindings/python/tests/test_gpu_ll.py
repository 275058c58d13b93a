# SPDX-License-Identifier: Apache-2.0
"""Low-latency dispatch and combine with torch on real GPUs, one thread per GPU.

Every rank dispatches known tokens, checks what it received against the host model
(ll_model.py), feeds a known function of the received rows to combine, and checks the
combined tokens bit for bit. Step 0 runs each call whole; step 1 updates the routing and
runs each call as send_only + complete. Local errors that need a live group (tensor shapes,
complete with nothing pending, a dispatch while one is pending, high-throughput calls on a
low-latency group or handle) are checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 2, where
torch sees that many GPUs; skipped otherwise.
"""

import pytest

import epcomm
from epcomm import _ffi
from epcomm._library import call
from gpu_support import bits, run_ranks, two_or_more_gpus
from ll_model import LlCase, first_difference

MAX_TOPK = 4


class Rank:
    """One rank's tensors on its GPU, sized for the largest step."""

    def __init__(self, torch, case, rank, device):
        self.torch, self.case, self.rank, self.device = torch, case, rank, device
        experts, rows, h = case.experts_per_rank, case.rows_per_expert, case.hidden
        zeros = dict(device=device)
        self.out_x = torch.zeros(experts, rows, h, dtype=torch.bfloat16, **zeros)
        self.out_counts = torch.zeros(experts, dtype=torch.int32, **zeros)
        self.expert_out = torch.zeros(experts, rows, h, dtype=torch.bfloat16, **zeros)
        # The expert computation: local expert l of rank q scales its rows by
        # expert_scale(q*L + l) (the model's definition).
        scales = [case.expert_scale(rank * experts + l) for l in range(experts)]
        self.scales = torch.tensor(scales, device=device).view(experts, 1, 1)

    def inputs(self, step):
        torch, case, rank = self.torch, self.case, self.rank
        idx = torch.tensor(case.topk_idx(step, rank), dtype=torch.int64, device=self.device)
        weights = torch.tensor(case.topk_weights(step, rank), dtype=torch.float32, device=self.device)
        values = [[case.x_value(step, rank, t, c) for c in range(case.hidden)] for t in range(case.tokens(step, rank))]
        x = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).to(self.device)
        out = torch.zeros(case.tokens(step, rank), case.hidden, dtype=torch.bfloat16, device=self.device)
        for buffer in (self.out_x, self.out_counts, self.expert_out):
            buffer.zero_()  # nothing left from an earlier step may pass a check
        return idx, weights, x, out

    def run_experts(self):
        """expert_out = bf16(out_x * scale) for the counted rows, zeros past them."""
        torch = self.torch
        rows = torch.arange(self.case.rows_per_expert, device=self.device).view(1, -1, 1)
        counted = rows < self.out_counts.view(-1, 1, 1).to(torch.int64)
        scaled = (self.out_x.float() * self.scales).to(torch.bfloat16)
        self.expert_out.copy_(torch.where(counted, scaled, torch.zeros_like(scaled)))

    def check_dispatch(self, step):
        self.torch.cuda.synchronize(self.device)
        want_counts, want_rows = self.case.dispatch(step, self.rank)
        counts = self.out_counts.cpu().tolist()
        assert counts == want_counts, f"step {step}: counts {counts}, expected {want_counts}"
        for l, count in enumerate(counts):
            got = bits(self.torch, self.out_x[l, :count])
            problem = first_difference(f"step {step}: local expert {l}", got, want_rows[l])
            assert not problem, problem

    def check_combine(self, step, out):
        self.torch.cuda.synchronize(self.device)
        problem = first_difference(
            f"step {step}: combined tokens", bits(self.torch, out), self.case.combine(step, self.rank)
        )
        assert not problem, problem


def step(r, handle, number, x, weights, out, send_only):
    handle.ll_dispatch(x, weights, r.out_x, r.out_counts, send_only=send_only)
    if send_only:
        with pytest.raises(epcomm.EpcError, match="epc_complete first"):
            handle.ll_dispatch(x, weights, r.out_x, r.out_counts)
        handle.complete()
    r.check_dispatch(number)
    r.run_experts()
    handle.ll_combine(r.expert_out, out, send_only=send_only)
    if send_only:
        handle.complete()
    r.check_combine(number, out)


def local_errors(r, group, handle, x, weights, out):
    """Refused by the library before any communication; every rank makes the same calls."""
    torch = r.torch
    on = dict(device=r.device)
    cases = [
        (lambda: epcomm.Handle.create(group, torch.zeros(1, 4, 2, dtype=torch.int64, **on)), "3 dimensions"),
        (lambda: epcomm.Handle.create(group, torch.zeros(4, MAX_TOPK + 1, dtype=torch.int64, **on)), "max_topk"),
        (lambda: handle.update(torch.zeros(4, 2, dtype=torch.float32, **on)), "dtype"),
        (lambda: epcomm.HtHandle.create(group, torch.zeros(4, 2, dtype=torch.int64, **on)), "low-latency mode"),
        # The library itself refuses a low-latency handle in a high-throughput call.
        (
            lambda: call(
                "epc_ht_combine",
                handle._live(),
                None,
                None,
                None,
                None,  # noqa: SLF001
                _ffi.EpcFlags(0),
                None,
            ),
            "epc_ht_combine: the handle belongs to a low-latency group",
        ),
        (lambda: handle.complete(), "nothing is pending"),
        (
            lambda: handle.ll_dispatch(x, weights, r.out_x[:, :, : r.case.hidden // 2].contiguous(), r.out_counts),
            "tensor out_x has shape",
        ),
        (lambda: handle.ll_combine(r.expert_out, out[:-1]), "tensor out has shape"),
    ]
    for make_call, words in cases:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
        assert words in caught.value.message, caught.value
    # The binding refuses a non-contiguous view by name before the library sees it.
    with pytest.raises(epcomm.InvalidTensorError, match="out_x: .*not contiguous"):
        handle.ll_dispatch(x, weights, r.out_x[:, :, ::2], r.out_counts)
    with pytest.raises(epcomm.EpcError, match="still open"):
        group.close()


def test_ll_dispatch_and_combine_match_the_host_model():
    nranks, torch = two_or_more_gpus("LL")
    case = LlCase(nranks=nranks)
    config = epcomm.GroupConfig(
        num_experts=case.experts,
        hidden=case.hidden,
        max_tokens_per_rank=case.max_tokens,
        max_topk=MAX_TOPK,
        timeout_ms=20000,
    )
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        r = Rank(torch, case, rank, torch.device("cuda", rank))
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            idx, weights, x, out = r.inputs(0)
            with epcomm.Handle.create(group, idx) as handle:
                step(r, handle, 0, x, weights, out, send_only=False)
                idx, weights, x, out = r.inputs(1)
                handle.update(idx)
                step(r, handle, 1, x, weights, out, send_only=True)
                local_errors(r, group, handle, x, weights, out)
            with pytest.raises(epcomm.EpcError, match="the handle is closed"):
                handle.complete()

    run_ranks(nranks, rank_main)
