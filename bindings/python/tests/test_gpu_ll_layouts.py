# SPDX-License-Identifier: Apache-2.0
"""Low-latency RANK_MAJOR and FLAT handles through the binding, with torch on real GPUs.

Every rank dispatches known tokens, checks the received rows, their top-k ids and weights
and the counts against a small host model (one row per received token: FLAT in (source rank,
source token) order, RANK_MAJOR from row 0 of the source's zone), then combines the
received rows as they are: each token comes back as the sum over the ranks that received
it, which the chosen values keep exact in bf16. Runs with EPCOMM_TEST_GPUS=N, N >= 1.
"""

import pytest

import epcomm
from gpu_support import requested_gpus, run_ranks

EXPERTS_PER_RANK, HIDDEN, TOKENS, TOPK = 4, 256, 12, 3


def routing(torch, rank, nranks):
    """Rank `rank`'s [TOKENS, TOPK] expert ids (some masked, some duplicated) and weights."""
    experts = EXPERTS_PER_RANK * nranks
    idx = [[(rank * 5 + t * 3 + k * 7) % experts for k in range(TOPK)] for t in range(TOKENS)]
    for t in range(TOKENS):
        if t % 4 == 1:
            idx[t][0] = -1
        if t % 5 == 2:
            idx[t][2] = idx[t][1]  # a duplicate
        if t == 7:
            idx[t] = [-1] * TOPK  # sent nowhere
    weights = [[0.25 * (k + 1) + t for k in range(TOPK)] for t in range(TOKENS)]
    return idx, weights


def row_values(torch, rank):
    """Token t channel c of `rank`: (1 + (t + c + rank) % 4) / 4, exact in bf16 and in sums."""
    t = torch.arange(TOKENS).view(-1, 1)
    c = torch.arange(HIDDEN).view(1, -1)
    return ((1 + (t + c + rank) % 4).float() / 4).to(torch.bfloat16)


@pytest.mark.parametrize("layout", ["rank_major", "flat"])
def test_ll_token_layouts_match_the_host_model(layout):
    nranks, torch = requested_gpus()
    config = epcomm.GroupConfig(
        num_experts=EXPERTS_PER_RANK * nranks,
        hidden=HIDDEN,
        max_tokens_per_rank=TOKENS,
        max_topk=TOPK,
        timeout_ms=20000,
    )
    uid = epcomm.UniqueId.create()
    rows = nranks * TOKENS
    L = EXPERTS_PER_RANK

    def rank_main(rank):
        torch.cuda.set_device(rank)
        on = dict(device=torch.device("cuda", rank))
        idx, weights = routing(torch, rank, nranks)
        x = row_values(torch, rank).to(**on)
        # What this rank receives, per source in token order.
        received = []
        for s in range(nranks):
            s_idx, s_weights = routing(torch, s, nranks)
            mine = [t for t in range(TOKENS) if any(e >= 0 and e // L == rank for e in s_idx[t])]
            received.append([(t, s_idx[t], s_weights[t]) for t in mine])
        rank_major = layout == "rank_major"
        shape = (nranks, TOKENS) if rank_major else (rows,)
        out_x = torch.full(shape + (HIDDEN,), float("nan"), dtype=torch.bfloat16, **on)
        out_idx = torch.full(shape + (TOPK,), -7, dtype=torch.int32, **on)
        out_w = torch.full(shape + (TOPK,), -7.0, dtype=torch.float32, **on)
        counts = torch.full((L,), -1, dtype=torch.int32, **on)
        rank_counts = torch.full((nranks,), -1, dtype=torch.int32, **on)
        num_recv = torch.full((1,), -1, dtype=torch.int32, **on)
        out = torch.full((TOKENS, HIDDEN), float("nan"), dtype=torch.bfloat16, **on)
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            routed = torch.tensor(idx, dtype=torch.int64, **on)
            with epcomm.Handle.create(group, layout=layout, routing=routed) as handle:
                assert handle.query().layout == (epcomm.Layout.RANK_MAJOR if rank_major else epcomm.Layout.FLAT)
                outputs = (
                    dict(out_rank_counts=rank_counts)
                    if rank_major
                    else dict(out_expert_counts=counts, out_num_recv=num_recv)
                )
                handle.dispatch(
                    x,
                    out_x=out_x,
                    topk_weights=torch.tensor(weights, dtype=torch.float32, **on),
                    out_topk_idx=out_idx,
                    out_topk_weights=out_w,
                    **outputs,
                )
                handle.combine(out_x, out=out)  # the rows as given: EPC_WEIGHTING_NONE
                torch.cuda.synchronize()
        flat_x, flat_idx, flat_w = (t.reshape(rows, -1).cpu() for t in (out_x, out_idx, out_w))
        row = 0
        expert_counts = [0] * L
        for s in range(nranks):
            if rank_major:
                row = s * TOKENS
            for t, s_idx, s_weights in received[s]:
                assert torch.equal(flat_x[row], row_values(torch, s)[t]), (layout, s, t)
                want_idx = [e % L if e >= 0 and e // L == rank else -1 for e in s_idx]
                want_w = [w if i >= 0 else 0.0 for i, w in zip(want_idx, s_weights)]
                assert flat_idx[row].tolist() == want_idx, (layout, s, t)
                assert flat_w[row].tolist() == want_w, (layout, s, t)
                for i in want_idx:
                    if i >= 0:
                        expert_counts[i] += 1
                row += 1
        if rank_major:
            assert rank_counts.tolist() == [len(r) for r in received]
            unwritten = [s * TOKENS + i for s in range(nranks) for i in range(len(received[s]), TOKENS)]
        else:
            assert counts.tolist() == expert_counts
            assert num_recv.tolist() == [sum(len(r) for r in received)]
            unwritten = list(range(row, rows))
        for u in unwritten:  # never written: still the poison
            assert torch.isnan(flat_x[u].float()).all() and flat_idx[u].tolist() == [-7] * TOPK, (layout, u)
        # Combine: each token is its row times the number of ranks that received it.
        for t in range(TOKENS):
            ranks = len({e // L for e in idx[t] if e >= 0})
            want = (row_values(torch, rank)[t].float() * ranks).to(torch.bfloat16)
            assert torch.equal(out[t].cpu(), want), (layout, t)

    run_ranks(nranks, rank_main)
