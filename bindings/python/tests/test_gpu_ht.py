# SPDX-License-Identifier: Apache-2.0
"""High-throughput dispatch and combine with torch on real GPUs, one thread per GPU.

Every rank dispatches the low-latency test's tokens and routing (ll_model.py) on a
high-throughput group and compares everything the library writes, bit for bit, with the
host model of the HT semantics (ht_model.py): step 0 on an EXACT-sized handle with every
optional output, then combine with backward weights; step 1 on a CAPACITY-sized handle
created with step 0's routing and updated to step 1's. The experts run on the GPU with
torch, in the order the model defines. Local errors that need a live group (a low-latency
handle on a high-throughput group, low-latency calls on a high-throughput handle, updating
an EXACT handle, shapes) are checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 2, where torch
sees that many GPUs; skipped otherwise.
"""

import pytest

import epcomm
from epcomm import _ffi
from epcomm._library import call
from gpu_support import bits, run_ranks, two_or_more_gpus
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

    def outputs(self, rows, tokens):
        """Zeroed outputs of one step, so nothing earlier can pass a check."""
        torch, h, k = self.torch, self.case.hidden, self.case.topk
        on = dict(device=self.device)
        return dict(
            out_x=torch.zeros(rows, h, dtype=torch.bfloat16, **on),
            out_topk_idx=torch.zeros(rows, k, dtype=torch.int32, **on),
            out_topk_weights=torch.zeros(rows, k, dtype=torch.float32, **on),
            out_expert_counts=torch.zeros(self.case.experts_per_rank, dtype=torch.int32, **on),
            out_num_recv=torch.zeros(1, dtype=torch.int32, **on),
            out=torch.zeros(tokens, h, dtype=torch.bfloat16, **on),
            back=torch.zeros(tokens, k, dtype=torch.float32, **on),
        )

    def experts(self, o):
        """Per row, bf16 of the float32 sum over its local entries in top-k order of
        weight * bf16(x * scale); and the backward weights: received + 16 * (rank + 1)."""
        torch = self.torch
        x = o["out_x"].float()
        acc = torch.zeros_like(x)
        for k in range(self.case.topk):
            local = o["out_topk_idx"][:, k].long()
            y = (x * self.scales[local.clamp(min=0)].view(-1, 1)).to(torch.bfloat16).float()
            term = o["out_topk_weights"][:, k : k + 1] * y
            acc = acc + torch.where((local >= 0).view(-1, 1), term, torch.zeros_like(term))
        return acc.to(torch.bfloat16), o["out_topk_weights"] + 16.0 * (self.rank + 1)

    def check_dispatch(self, step, o):
        self.torch.cuda.synchronize(self.device)
        want = ht_dispatch(self.case, step, self.rank)
        n = len(want.sources)
        assert o["out_num_recv"].item() == n, f"step {step}: num_recv"
        assert o["out_expert_counts"].tolist() == want.expert_counts, f"step {step}: counts"
        assert o["out_topk_idx"][:n].tolist() == want.topk_idx, f"step {step}: topk_idx"
        assert o["out_topk_weights"][:n].tolist() == want.topk_weights, f"step {step}: weights"
        problem = first_difference(f"step {step}: received tokens", bits(self.torch, o["out_x"][:n]), want.x)
        assert not problem, problem

    def check_combine(self, step, o, backward):
        self.torch.cuda.synchronize(self.device)
        case = self.case
        received = [ht_dispatch(case, step, q) for q in range(case.nranks)]
        rows = [expert_rows(case, q, received[q]) for q in range(case.nranks)]
        weights = [returned_weights(q, received[q]) for q in range(case.nranks)]
        out, back = ht_combine(case, step, self.rank, rows, weights)
        problem = first_difference(f"step {step}: combined tokens", bits(self.torch, o["out"]), out)
        assert not problem, problem
        if backward:
            assert o["back"].tolist() == back, f"step {step}: backward weights"


def step(r, handle, number, weights, x, backward):
    """Dispatch with every optional output, check, run the experts, combine, check."""
    o = r.outputs(handle.rows, x.shape[0])
    handle.dispatch(
        x,
        o["out_x"],
        topk_weights=weights,
        out_topk_weights=o["out_topk_weights"],
        out_topk_idx=o["out_topk_idx"],
        out_expert_counts=o["out_expert_counts"],
        out_num_recv=o["out_num_recv"],
    )
    r.check_dispatch(number, o)
    y, returned = r.experts(o)
    if backward:
        handle.combine(y, o["out"], topk_weights=returned, out_topk_weights=o["back"])
    else:
        handle.combine(y, o["out"])
    r.check_combine(number, o, backward)


def local_errors(r, group, exact, idx, x):
    """Refused by the library before any communication; every rank makes the same calls."""
    torch, h = r.torch, r.case.hidden
    on = dict(device=r.device)
    live = exact._live()  # noqa: SLF001 (the raw calls below check the library's own refusal)
    cases = [
        (lambda: epcomm.Handle.create(group, idx), "high-throughput mode"),
        (lambda: exact.update(idx), "EPC_HT_SIZING_EXACT"),
        (
            lambda: exact.dispatch(x, torch.zeros(exact.rows + 1, h, dtype=torch.bfloat16, **on)),
            "tensor out_x has shape",
        ),
        (
            lambda: exact.combine(torch.zeros(exact.rows, h, dtype=torch.bfloat16, **on), x[:-1].clone()),
            "tensor out has shape",
        ),
        (lambda: call("epc_complete", live, None), "belongs to a high-throughput group"),
        (
            lambda: call("epc_ll_combine", live, None, None, _ffi.EpcFlags(0), None),
            "epc_ll_combine: the handle belongs to a high-throughput group",
        ),
    ]
    for make_call, words in cases:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
        assert words in caught.value.message, caught.value


def test_ht_dispatch_and_combine_match_the_host_model():
    nranks, torch = two_or_more_gpus("HT")
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
            with epcomm.HtHandle.create(group, idx) as exact:
                assert exact.rows == len(ht_dispatch(case, 0, rank).sources)
                step(r, exact, 0, weights, x, backward=True)
                local_errors(r, group, exact, idx, x)
            with epcomm.HtHandle.create(group, idx, sizing="capacity") as capacity:
                assert capacity.rows == nranks * case.max_tokens
                idx, weights, x = r.inputs(1)
                capacity.update(idx)
                step(r, capacity, 1, weights, x, backward=False)
            with pytest.raises(epcomm.EpcError, match="the handle is closed"):
                capacity.dispatch(x, x)

    run_ranks(nranks, rank_main)
