# SPDX-License-Identifier: Apache-2.0
"""Low-latency dispatch and combine with torch on real GPUs, one thread per GPU.

Every rank dispatches known tokens, checks what it received against the host model
(ll_model.py), feeds a known function of the received rows to combine, and checks the
combined tokens bit for bit. The handle is created without routing (as before graph
capture) and routed with update() at every step; every dispatch also writes the counts'
host copy and adds them to the accumulated counts. Step 0 runs each call whole with a bf16
out; step 1 runs each call as
send_only + complete into a float32 out; step 2 runs whole into a float16 out. Local errors
that need a live group (shapes, fields the layout has no column for, calls out of order,
what 2.0 does not serve) are checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 1, where torch
sees that many GPUs (one is enough); skipped otherwise. The streams are torch's current ones: no call names
one.
"""

import pytest

import epcomm
from gpu_support import bits, requested_gpus, run_ranks
from ll_model import LlCase, bf16_bits, f16_bits, first_difference

MAX_TOPK = 4


def group_config(case):
    """The low-latency group every rank of `case` creates."""
    return epcomm.GroupConfig(
        num_experts=case.experts,
        hidden=case.hidden,
        max_tokens_per_rank=case.max_tokens,
        max_topk=MAX_TOPK,
        timeout_ms=20000,
    )


class Rank:
    """One rank's tensors on its GPU, sized for the largest step."""

    def __init__(self, torch, case, rank, device):
        self.torch, self.case, self.rank, self.device = torch, case, rank, device
        experts, rows, h = case.experts_per_rank, case.rows_per_expert, case.hidden
        zeros = dict(device=device)
        self.out_x = torch.zeros(experts, rows, h, dtype=torch.bfloat16, **zeros)
        self.out_counts = torch.zeros(experts, dtype=torch.int32, **zeros)
        self.host_counts = torch.zeros(experts, dtype=torch.int32, pin_memory=True)
        self.acc_counts = torch.zeros(experts, dtype=torch.int64, **zeros)
        self.expert_out = torch.zeros(experts, rows, h, dtype=torch.bfloat16, **zeros)
        # The expert computation: local expert l of rank q scales its rows by
        # expert_scale(q*L + l) (the model's definition).
        scales = [case.expert_scale(rank * experts + e) for e in range(experts)]
        self.scales = torch.tensor(scales, device=device).view(experts, 1, 1)

    def inputs(self, step, out_dtype):
        torch, case, rank = self.torch, self.case, self.rank
        idx = torch.tensor(case.topk_idx(step, rank), dtype=torch.int64, device=self.device)
        weights = torch.tensor(case.topk_weights(step, rank), dtype=torch.float32, device=self.device)
        values = [[case.x_value(step, rank, t, c) for c in range(case.hidden)] for t in range(case.tokens(step, rank))]
        x = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).to(self.device)
        out = torch.zeros(case.tokens(step, rank), case.hidden, dtype=out_dtype, device=self.device)
        for buffer in (self.out_x, self.out_counts, self.expert_out, self.host_counts):
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
        want_counts = self.check_dispatch_device_counts(step)
        assert self.host_counts.tolist() == want_counts, f"step {step}: host counts"
        return want_counts

    def check_dispatch_device_counts(self, step):
        """check_dispatch without the host copy of the counts."""
        self.torch.cuda.synchronize(self.device)
        want_counts, want_rows = self.case.dispatch(step, self.rank)
        counts = self.out_counts.cpu().tolist()
        assert counts == want_counts, f"step {step}: counts {counts}, expected {want_counts}"
        for e, count in enumerate(counts):
            got = bits(self.torch, self.out_x[e, :count])
            problem = first_difference(f"step {step}: local expert {e}", got, want_rows[e])
            assert not problem, problem
        return want_counts

    def check_combine(self, step, out):
        torch = self.torch
        torch.cuda.synchronize(self.device)
        sums = self.case.combine_sums(step, self.rank)
        if out.dtype == torch.bfloat16:
            problem = first_difference(
                f"step {step}: combined tokens", bits(torch, out), self.case.combine(step, self.rank)
            )
            assert not problem, problem
        elif out.dtype == torch.float32:
            assert out.cpu().tolist() == sums, f"step {step}: float32 combined tokens"
        else:
            got = (out.cpu().view(torch.int16).to(torch.int32) & 0xFFFF).tolist()
            assert got == [[f16_bits(v) for v in row] for row in sums], f"step {step}: float16 combined tokens"


def step(r, handle, number, idx, x, weights, out, send_only, max_step_tokens=0):
    """One step; returns the dispatch's counts."""
    handle.update(idx)
    handle.dispatch(
        x,
        out_x=r.out_x,
        topk_weights=weights,
        out_expert_counts=r.out_counts,
        out_expert_counts_host=r.host_counts,
        acc_expert_counts=r.acc_counts,
        send_only=send_only,
        max_step_tokens=max_step_tokens,
    )
    if send_only:
        assert handle.query().pending == epcomm.Pending.DISPATCH
        with pytest.raises(epcomm.InvalidUsageError):
            handle.dispatch(x, out_x=r.out_x, topk_weights=weights, out_expert_counts=r.out_counts)
        with pytest.raises(epcomm.InvalidUsageError):
            handle.update(idx)
        handle.complete()
    assert handle.query().pending == epcomm.Pending.NONE
    counts = r.check_dispatch(number)
    r.run_experts()
    handle.combine(r.expert_out, out=out, send_only=send_only)
    if send_only:
        assert handle.query().pending == epcomm.Pending.COMBINE
        handle.complete()
    r.check_combine(number, out)
    return counts


def local_errors(r, group, handle, x, weights, out):
    """Refused by the library before any communication, and one dispatch without weights that
    it serves; every rank makes the same calls."""
    torch = r.torch
    on = dict(device=r.device)
    good = dict(out_x=r.out_x, topk_weights=weights, out_expert_counts=r.out_counts)
    invalid, unsupported = epcomm.Status.INVALID_ARGUMENT, epcomm.Status.UNSUPPORTED
    cases = [
        (lambda: handle.update(torch.zeros(4, 2, dtype=torch.float32, **on)), invalid, "topk_idx"),
        (lambda: handle.update(torch.zeros(4, MAX_TOPK + 1, dtype=torch.int64, **on)), invalid, "topk_idx"),
        (lambda: epcomm.Handle.create(group, sizing="exact"), invalid, "sizing"),
        (lambda: epcomm.Handle.create(group, layout="expert_packed"), unsupported, "layout"),
        (lambda: epcomm.Handle.create(group, capacity=7), unsupported, "capacity"),
        (
            lambda: handle.dispatch(x, **dict(good, out_x=r.out_x[:, :, : r.case.hidden // 2].contiguous())),
            invalid,
            "out_x",
        ),
        (
            lambda: handle.dispatch(x, **good, out_topk_idx=torch.zeros(1, dtype=torch.int32, **on)),
            invalid,
            "out_topk_idx",
        ),
        (
            lambda: handle.dispatch(x, **good, out_num_recv=torch.zeros(1, dtype=torch.int32, **on)),
            invalid,
            "out_num_recv",
        ),
        (lambda: handle.dispatch(x, **good, pow2_scales=True), invalid, "EPC_DISPATCH_POW2_SCALES"),
        (lambda: handle.dispatch(x, **good, quant="nvfp4"), unsupported, "quant"),
        (
            lambda: handle.dispatch(x, **good, out_expert_counts_host=r.out_counts),  # device memory
            invalid,
            "out_expert_counts_host",
        ),
        (lambda: handle.combine(r.expert_out, out=out[:-1]), invalid, "out"),
        (lambda: handle.combine(r.expert_out, out=out, weighting="none"), unsupported, "weighting"),
        (lambda: handle.combine(r.expert_out, out=out, weighting="home"), invalid, "home_topk_weights"),
        (lambda: handle.combine(r.expert_out.half(), out=out), unsupported, "x"),
    ]
    for make_call, status, words in cases:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        assert caught.value.status == status, caught.value
        assert words in caught.value.message, caught.value
    # Weights at combine only: a dispatch without topk_weights is served (every rank makes it),
    # and its default, sender-weighted combine is refused naming the weighting.
    handle.dispatch(x, **dict(good, topk_weights=None))
    with pytest.raises(epcomm.EpcError) as caught:
        handle.combine(r.expert_out, out=out)
    assert caught.value.status == invalid and "weighting" in caught.value.message, caught.value
    with pytest.raises(epcomm.InvalidUsageError):
        handle.complete()  # nothing is pending
    with epcomm.Handle.create(group) as unrouted:
        info = unrouted.query()
        assert (info.num_tokens, info.topk) == (0, 0)
        with pytest.raises(epcomm.InvalidUsageError):
            unrouted.dispatch(x, **good)
    # The binding refuses a non-contiguous view by name before the library sees it.
    with pytest.raises(epcomm.InvalidTensorError, match="out_x: .*not contiguous"):
        handle.dispatch(x, **dict(good, out_x=r.out_x[:, :, ::2]))
    with pytest.raises(epcomm.EpcError, match="still open"):
        group.close()


def test_ll_dispatch_and_combine_match_the_host_model():
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks)
    config = group_config(case)
    uid = epcomm.UniqueId.create()
    out_dtypes = [torch.bfloat16, torch.float32, torch.float16]

    def rank_main(rank):
        torch.cuda.set_device(rank)
        r = Rank(torch, case, rank, torch.device("cuda", rank))
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            with epcomm.Handle.create(group) as handle:  # no routing yet: local, allocates
                info = handle.query()
                assert (info.mode, info.layout, info.sizing) == (
                    epcomm.Mode.LOW_LATENCY,
                    epcomm.Layout.EXPERT_PADDED,
                    epcomm.Sizing.CAPACITY,
                )
                assert info.capacity == info.rows == case.rows_per_expert
                total = [0] * case.experts_per_rank
                for number, dtype in enumerate(out_dtypes):
                    idx, weights, x, out = r.inputs(number, dtype)
                    counts = step(r, handle, number, idx, x, weights, out, send_only=number == 1)
                    total = [a + b for a, b in zip(total, counts)]
                    info = handle.query()
                    assert (info.num_tokens, info.topk) == (case.tokens(number, rank), case.topk)
                # Every step added its counts to acc_expert_counts.
                assert r.acc_counts.tolist() == total
                local_errors(r, group, handle, x, weights, out)
            with pytest.raises(epcomm.EpcError, match="the handle is closed"):
                handle.complete()

    run_ranks(nranks, rank_main)


def test_ll_bounded_steps_match_the_host_model():
    """ABI 2.2's max_step_tokens on a group of T 24, whose steps here have 5 to 7 tokens: steps
    0 and 3 pass no bound (records behind each rank's signal), steps 1 and 2 the most tokens
    any rank has in the step, alike on every rank (on one node, line records: docs/tuning.md,
    "Line steps"), step 2 as send_only + complete. Every step matches the host model bit for
    bit. A bound below this rank's tokens, or above T, is refused by name."""
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks, max_tokens=24)
    config = group_config(case)
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        r = Rank(torch, case, rank, torch.device("cuda", rank))
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            with epcomm.Handle.create(group) as handle:
                for number in range(4):
                    bound = max(case.tokens(number, q) for q in range(nranks)) if number in (1, 2) else 0
                    idx, weights, x, out = r.inputs(number, torch.bfloat16)
                    step(r, handle, number, idx, x, weights, out, send_only=number == 2, max_step_tokens=bound)
                tokens = case.tokens(3, rank)
                good = dict(out_x=r.out_x, topk_weights=weights, out_expert_counts=r.out_counts)
                for bound in (tokens - 1, case.max_tokens + 1):
                    with pytest.raises(epcomm.EpcError) as caught:
                        handle.dispatch(x, **good, max_step_tokens=bound)
                    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
                    assert f"max_step_tokens is {bound}" in caught.value.message, caught.value
                assert handle.query().pending == epcomm.Pending.NONE

    run_ranks(nranks, rank_main)


def test_ll_weights_at_combine_match_the_host_model():
    """Weighting.HOME on a group with GroupFlags.COMBINE_PER_ENTRY: every entry's row returns
    and this rank weights it by home_topk_weights (ll_model.combine_home_sums), bf16 out
    whole, then float32 out send_only + complete."""
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks)
    config = group_config(case)
    config.flags = epcomm.GroupFlags.COMBINE_PER_ENTRY
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        r = Rank(torch, case, rank, device)
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            with epcomm.Handle.create(group) as handle:
                for number, dtype in enumerate([torch.bfloat16, torch.float32]):
                    idx, weights, x, out = r.inputs(number, dtype)
                    home = torch.tensor(case.home_weights(number, rank), dtype=torch.float32, device=device)
                    send_only = number == 1
                    handle.update(idx)
                    handle.dispatch(x, out_x=r.out_x, topk_weights=weights, out_expert_counts=r.out_counts)
                    r.check_dispatch_device_counts(number)
                    r.run_experts()
                    handle.combine(r.expert_out, out=out, weighting="home", home_topk_weights=home, send_only=send_only)
                    if send_only:
                        handle.complete()
                    torch.cuda.synchronize(device)
                    sums = case.combine_home_sums(number, rank)
                    if dtype == torch.float32:
                        assert out.cpu().tolist() == sums, f"step {number}: float32 combined tokens at home"
                    else:
                        want = [[bf16_bits(v) for v in row] for row in sums]
                        problem = first_difference(f"step {number}: combined tokens at home", bits(torch, out), want)
                        assert not problem, problem

    run_ranks(nranks, rank_main)


def test_reused_epc_tensors_survive_ten_steps():
    """Issue 25, part 4: EpcTensors built once (DLPack, from torch) for the static buffers
    out_x, out_expert_counts and the expert output are passed to 10 steps; each step's
    results match the host model and the descriptors are never released by the handle."""
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks)
    config = group_config(case)
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        r = Rank(torch, case, rank, torch.device("cuda", rank))
        static = [epcomm.as_tensor(t) for t in (r.out_x, r.out_counts, r.expert_out)]
        out_x, out_counts, expert_out = static
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            with epcomm.Handle.create(group) as handle:
                for number in range(10):
                    idx, weights, x, out = r.inputs(number, torch.bfloat16)
                    handle.update(idx)
                    handle.dispatch(x, out_x=out_x, topk_weights=weights, out_expert_counts=out_counts)
                    r.check_dispatch_device_counts(number)
                    r.run_experts()
                    handle.combine(expert_out, out=out)
                    r.check_combine(number, out)
                    assert not any(t.released for t in static), f"step {number}"
        assert not any(t.released for t in static)
        for t in static:
            t.release()

    run_ranks(nranks, rank_main)
