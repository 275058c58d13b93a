# SPDX-License-Identifier: Apache-2.0
"""High-throughput dispatch and combine with torch on real GPUs, one thread per GPU.

Every rank dispatches the low-latency test's tokens and routing (ll_model.py) on a
high-throughput group and compares everything the library writes, bit for bit, with the
host model of the HT semantics (ht_model.py): step 0 on an EXACT-sized handle created with
its routing, with every optional output (the counts' host copy and accumulation too), then
combine with backward weights; the EXACT handle is then updated to step 1's routing and its
rows follow. Step 1 runs on a CAPACITY-sized handle created without routing, with global
expert ids, combining into a float32 out. The experts run on the GPU with torch, in the
order the model defines. Local errors that need a live group (layouts, fields and flags
the flat layout has no use for, calls out of order, shapes) are checked too. Runs with
EPCOMM_TEST_GPUS=N, N >= 1, where torch sees that many GPUs (one is enough); skipped
otherwise. The streams are torch's current ones: no call names one.
"""

import pytest

import epcomm
from gpu_support import bits, requested_gpus, run_ranks
from ht_model import expert_rows, ht_combine, ht_dispatch, returned_weights
from ll_model import LlCase, first_difference

MAX_TOPK = 4


class HtRank:
    """One rank's inputs, outputs and experts on its GPU."""

    def __init__(self, torch, case, rank):
        self.torch, self.case, self.rank = torch, case, rank
        self.device = torch.device("cuda", rank)
        # Local expert l of rank q scales its rows by expert_scale(q*L + l) (the model's).
        self.scales = torch.tensor(
            [case.expert_scale(rank * case.experts_per_rank + l) for l in range(case.experts_per_rank)],
            device=self.device,
        )

    def tensor(self, values, dtype):
        return self.torch.tensor(values, dtype=dtype, device=self.device)

    def inputs(self, step):
        """topk_idx, topk_weights and x of `step`."""
        torch, case, rank = self.torch, self.case, self.rank
        values = [[case.x_value(step, rank, t, c) for c in range(case.hidden)] for t in range(case.tokens(step, rank))]
        return (
            self.tensor(case.topk_idx(step, rank), torch.int64),
            self.tensor(case.topk_weights(step, rank), torch.float32),
            self.tensor(values, torch.float32).to(torch.bfloat16),
        )

    def outputs(self, rows, tokens, out_dtype):
        """Zeroed outputs of one step, so nothing earlier can pass a check."""
        torch, h, k = self.torch, self.case.hidden, self.case.topk
        on = dict(device=self.device)
        return dict(
            out_x=torch.zeros(rows, h, dtype=torch.bfloat16, **on),
            out_topk_idx=torch.zeros(rows, k, dtype=torch.int32, **on),
            out_topk_weights=torch.zeros(rows, k, dtype=torch.float32, **on),
            out_expert_counts=torch.zeros(self.case.experts_per_rank, dtype=torch.int32, **on),
            out_num_recv=torch.zeros(1, dtype=torch.int32, **on),
            host_counts=torch.zeros(self.case.experts_per_rank, dtype=torch.int32, pin_memory=True),
            acc_counts=torch.zeros(self.case.experts_per_rank, dtype=torch.int64, **on),
            out=torch.zeros(tokens, h, dtype=out_dtype, **on),
            back=torch.zeros(tokens, k, dtype=torch.float32, **on),
        )

    def experts(self, o, global_ids):
        """Per row, bf16 of the float32 sum over its local entries in top-k order of
        weight * bf16(x * scale); and the backward weights: received + 16 * (rank + 1)."""
        torch = self.torch
        x = o["out_x"].float()
        acc = torch.zeros_like(x)
        first = self.rank * self.case.experts_per_rank if global_ids else 0
        for k in range(self.case.topk):
            ids = o["out_topk_idx"][:, k].long()
            local = torch.where(ids >= 0, ids - first, ids)
            y = (x * self.scales[local.clamp(min=0)].view(-1, 1)).to(torch.bfloat16).float()
            term = o["out_topk_weights"][:, k : k + 1] * y
            acc = acc + torch.where((local >= 0).view(-1, 1), term, torch.zeros_like(term))
        return acc.to(torch.bfloat16), o["out_topk_weights"] + 16.0 * (self.rank + 1)

    def check_dispatch(self, step, o, global_ids):
        self.torch.cuda.synchronize(self.device)
        want = ht_dispatch(self.case, step, self.rank)
        n = len(want.sources)
        assert o["out_num_recv"].item() == n, f"step {step}: num_recv"
        assert o["out_expert_counts"].tolist() == want.expert_counts, f"step {step}: counts"
        assert o["host_counts"].tolist() == want.expert_counts, f"step {step}: host counts"
        assert o["acc_counts"].tolist() == want.expert_counts, f"step {step}: accumulated counts"
        first = self.rank * self.case.experts_per_rank if global_ids else 0
        ids = [[e + first if e >= 0 else -1 for e in row] for row in want.topk_idx]
        assert o["out_topk_idx"][:n].tolist() == ids, f"step {step}: topk_idx"
        assert o["out_topk_weights"][:n].tolist() == want.topk_weights, f"step {step}: weights"
        problem = first_difference(f"step {step}: received tokens", bits(self.torch, o["out_x"][:n]), want.x)
        assert not problem, problem

    def check_combine(self, step, o, backward):
        self.torch.cuda.synchronize(self.device)
        case = self.case
        received = [ht_dispatch(case, step, q) for q in range(case.nranks)]
        rows = [expert_rows(case, q, received[q]) for q in range(case.nranks)]
        weights = [returned_weights(q, received[q]) for q in range(case.nranks)]
        rounded = o["out"].dtype == self.torch.bfloat16
        out, back = ht_combine(case, step, self.rank, rows, weights, rounded=rounded)
        if rounded:
            problem = first_difference(f"step {step}: combined tokens", bits(self.torch, o["out"]), out)
            assert not problem, problem
        else:
            assert o["out"].cpu().tolist() == out, f"step {step}: float32 combined tokens"
        if backward:
            assert o["back"].tolist() == back, f"step {step}: backward weights"


def step(r, handle, number, weights, x, backward, out_dtype, global_ids=False):
    """Dispatch with every optional output, check, run the experts, combine, check."""
    o = r.outputs(handle.rows, x.shape[0], out_dtype)
    handle.dispatch(
        x,
        out_x=o["out_x"],
        topk_weights=weights,
        out_topk_weights=o["out_topk_weights"],
        out_topk_idx=o["out_topk_idx"],
        out_expert_counts=o["out_expert_counts"],
        out_num_recv=o["out_num_recv"],
        out_expert_counts_host=o["host_counts"],
        acc_expert_counts=o["acc_counts"],
    )
    r.check_dispatch(number, o, global_ids)
    y, returned = r.experts(o, global_ids)
    if backward:
        handle.combine(y, out=o["out"], topk_weights=returned, out_topk_weights=o["back"])
    else:
        handle.combine(y, out=o["out"])
    r.check_combine(number, o, backward)


def local_errors(r, group, exact, x):
    """Refused by the library before any communication; every rank makes the same calls."""
    torch, h = r.torch, r.case.hidden
    on = dict(device=r.device)
    rows = exact.rows
    y = torch.zeros(rows, h, dtype=torch.bfloat16, **on)
    out_x = torch.zeros(rows, h, dtype=torch.bfloat16, **on)
    out = torch.zeros(x.shape[0], h, dtype=torch.bfloat16, **on)
    invalid, unsupported = epcomm.Status.INVALID_ARGUMENT, epcomm.Status.UNSUPPORTED
    cases = [
        (lambda: epcomm.Handle.create(group, layout="expert_padded"), unsupported, "layout"),
        (lambda: epcomm.Handle.create(group, flags=epcomm.HandleFlags.ZERO_PADDING), invalid, "ZERO_PADDING"),
        (lambda: exact.dispatch(x, out_x=torch.zeros(rows + 1, h, dtype=torch.bfloat16, **on)), invalid, "out_x"),
        (lambda: exact.dispatch(x, out_x=out_x, send_only=True, send_sms=1 << 20), invalid, "send_sms"),
        (lambda: exact.dispatch(x, out_x=out_x, quant="fp8"), unsupported, "quant"),
        (
            lambda: exact.dispatch(x, out_x=out_x, out_expert_offsets=torch.zeros(5, dtype=torch.int32, **on)),
            invalid,
            "out_expert_offsets",
        ),
        (lambda: exact.combine(y, out=x[:-1].clone()), invalid, "out"),
        (lambda: exact.combine(y, out=out, weighting="sender"), invalid, "weighting"),
        (
            lambda: exact.combine(y, out=out, topk_weights=torch.zeros(rows, r.case.topk, **on)),
            invalid,
            "out_topk_weights",
        ),
    ]
    for make_call, status, words in cases:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        assert caught.value.status == status, caught.value
        assert words in caught.value.message, caught.value
    with pytest.raises(epcomm.InvalidUsageError):
        exact.complete()  # nothing is pending


def test_ht_dispatch_and_combine_match_the_host_model():
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks, hidden=256)
    config = epcomm.GroupConfig(
        mode=epcomm.Mode.HIGH_THROUGHPUT,
        num_experts=case.experts,
        hidden=case.hidden,
        max_tokens_per_rank=case.max_tokens,
        max_topk=MAX_TOPK,
        timeout_ms=20000,
    )
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        r = HtRank(torch, case, rank)
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            idx, weights, x = r.inputs(0)
            with epcomm.Handle.create(group, sizing=epcomm.Sizing.EXACT, routing=idx) as exact:
                info = exact.query()
                assert (info.mode, info.layout, info.sizing) == (
                    epcomm.Mode.HIGH_THROUGHPUT,
                    epcomm.Layout.FLAT,
                    epcomm.Sizing.EXACT,
                )
                assert info.rows == len(ht_dispatch(case, 0, rank).sources)
                assert (info.num_tokens, info.topk) == (case.tokens(0, rank), case.topk)
                step(r, exact, 0, weights, x, backward=True, out_dtype=torch.bfloat16)
                local_errors(r, group, exact, x)
                exact.update(r.inputs(1)[0])  # collective; blocking: the rows follow
                assert exact.rows == len(ht_dispatch(case, 1, rank).sources)
            with epcomm.Handle.create(group, flags=epcomm.HandleFlags.GLOBAL_EXPERT_IDS) as capacity:
                assert capacity.rows == capacity.query().capacity == nranks * case.max_tokens
                with pytest.raises(epcomm.InvalidUsageError):
                    capacity.dispatch(
                        x, out_x=torch.zeros(capacity.rows, case.hidden, dtype=torch.bfloat16, device=r.device)
                    )
                idx, weights, x = r.inputs(1)
                capacity.update(idx)
                step(r, capacity, 1, weights, x, backward=False, out_dtype=torch.float32, global_ids=True)
            with pytest.raises(epcomm.EpcError, match="the handle is closed"):
                capacity.dispatch(x, out_x=x)

    run_ranks(nranks, rank_main)
