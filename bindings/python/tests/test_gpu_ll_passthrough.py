# SPDX-License-Identifier: Apache-2.0
"""Low-latency EPC_QUANT_PASSTHROUGH through the binding, with torch on real GPUs.

Every rank dispatches caller-quantized rows (uint8 tensors named fp8_e4m3 or fp4_e2m1x2
through as_tensor's dtype) with scales (fp32, or e4m3 bytes with NVFP4's x_global_scale)
in each LL layout, and checks that every received row holds its source token's bytes at the
row a small host model gives (expert-padded: per local expert in (source rank, token, slot)
order; rank-major and flat: one row per received token), that the scales arrived through a
column-major out_scales (a transposed view), and that rows nothing was sent to keep their
poison. Combine then takes bf16 expert outputs as after any dispatch. Runs with
EPCOMM_TEST_GPUS=N, N >= 1.
"""

import pytest

import epcomm
from gpu_support import requested_gpus, run_ranks

EXPERTS_PER_RANK, HIDDEN, TOKENS, TOPK = 4, 256, 10, 3
POISON = 0xA5


def routing(rank, nranks):
    """Rank `rank`'s [TOKENS, TOPK] expert ids (no duplicates, some masked) and weights."""
    experts = EXPERTS_PER_RANK * nranks
    idx = [[(rank * 3 + t * 5 + k * 2) % experts for k in range(TOPK)] for t in range(TOKENS)]
    for t in range(TOKENS):
        if t % 3 == 1:
            idx[t][2] = -1
        if t == 6:
            idx[t] = [-1] * TOPK  # sent nowhere
    weights = [[0.5] * TOPK for _ in range(TOKENS)]
    return idx, weights


def token_bytes(torch, rank, width, salt):
    """[TOKENS, width] uint8 naming (rank, token, byte)."""
    t = torch.arange(TOKENS).view(-1, 1)
    b = torch.arange(width).view(1, -1)
    return ((rank * 101 + t * 29 + b * 7 + salt) % 256).to(torch.uint8)


def sources(layout, rank, nranks):
    """Per out_x row (flattened) the (source rank, token) this rank receives, None elsewhere."""
    L = EXPERTS_PER_RANK
    if layout == "expert_padded":
        rows = nranks * TOKENS
        placed = [None] * (L * rows)
        filled = [0] * L
        for s in range(nranks):
            idx, _ = routing(s, nranks)
            for t in range(TOKENS):
                for e in idx[t]:
                    if e >= 0 and e // L == rank:
                        placed[(e % L) * rows + filled[e % L]] = (s, t)
                        filled[e % L] += 1
        return placed
    placed = [None] * (nranks * TOKENS)
    row = 0
    for s in range(nranks):
        if layout == "rank_major":
            row = s * TOKENS
        idx, _ = routing(s, nranks)
        for t in range(TOKENS):
            if any(e >= 0 and e // L == rank for e in idx[t]):
                placed[row] = (s, t)
                row += 1
    return placed


@pytest.mark.parametrize("layout", ["expert_padded", "rank_major", "flat"])
@pytest.mark.parametrize("payload", ["e4m3_fp32", "nvfp4"])
def test_ll_passthrough_rows_and_scales_arrive_as_sent(layout, payload):
    nranks, torch = requested_gpus()
    config = epcomm.GroupConfig(
        num_experts=EXPERTS_PER_RANK * nranks,
        hidden=HIDDEN,
        max_tokens_per_rank=TOKENS,
        max_topk=TOPK,
        timeout_ms=20000,
    )
    uid = epcomm.UniqueId.create()
    L, rows = EXPERTS_PER_RANK, nranks * TOKENS
    nvfp4 = payload == "nvfp4"
    row_bytes = HIDDEN // 2 if nvfp4 else HIDDEN
    scales = HIDDEN // 16 if nvfp4 else HIDDEN // 128  # e4m3 bytes, or fp32 (4 bytes each)
    scale_bytes = scales if nvfp4 else 4 * scales
    x_dtype = "fp4_e2m1x2" if nvfp4 else "fp8_e4m3"
    s_dtype = "fp8_e4m3" if nvfp4 else "float32"

    def rank_main(rank):
        torch.cuda.set_device(rank)
        on = dict(device=torch.device("cuda", rank))
        idx, weights = routing(rank, nranks)
        x = token_bytes(torch, rank, row_bytes, 1).to(**on)
        xs = token_bytes(torch, rank, scale_bytes, 3).to(**on)
        zones = (L, rows) if layout == "expert_padded" else (nranks, TOKENS) if layout == "rank_major" else (rows,)
        out_x = torch.full(zones + (row_bytes,), POISON, dtype=torch.uint8, **on)
        # Column-major over rows: the transposed view of a [.., S, rows] buffer, poisoned
        # byte by byte.
        element = 1 if nvfp4 else 4
        column = torch.full(zones[:-1] + (scales, zones[-1] * element), POISON, dtype=torch.uint8, **on)
        typed = column if nvfp4 else column.view(torch.float32)  # [.., S, rows]
        out_s = typed.transpose(-2, -1)  # [.., rows, S], row stride 1
        global_scale = torch.ones(1, dtype=torch.float32, **on)
        expert_out = torch.ones(zones + (HIDDEN,), dtype=torch.bfloat16, **on)
        out = torch.full((TOKENS, HIDDEN), float("nan"), dtype=torch.bfloat16, **on)
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            routed = torch.tensor(idx, dtype=torch.int64, **on)
            with epcomm.Handle.create(group, layout=layout, routing=routed) as handle:
                handle.dispatch(
                    epcomm.as_tensor(x, dtype=x_dtype),
                    out_x=epcomm.as_tensor(out_x, dtype=x_dtype),
                    quant="passthrough",
                    x_scales=epcomm.as_tensor(xs if nvfp4 else xs.view(torch.float32), dtype=s_dtype),
                    out_scales=epcomm.as_tensor(out_s, dtype=s_dtype),
                    x_global_scale=global_scale if nvfp4 else None,
                    topk_weights=torch.tensor(weights, dtype=torch.float32, **on),
                )
                handle.combine(expert_out, out=out)
                torch.cuda.synchronize()
        got_x = out_x.reshape(-1, row_bytes).cpu()
        # Back to row-major bytes: [rows, S * element].
        got_s = out_s.contiguous().view(torch.uint8).reshape(-1, scale_bytes).cpu()
        for i, source in enumerate(sources(layout, rank, nranks)):
            if source is None:
                assert (got_x[i] == POISON).all() and (got_s[i] == POISON).all(), (layout, payload, i)
                continue
            s, t = source
            assert torch.equal(got_x[i], token_bytes(torch, s, row_bytes, 1)[t]), (layout, payload, i, s, t)
            assert torch.equal(got_s[i], token_bytes(torch, s, scale_bytes, 3)[t]), (layout, payload, i, s, t)
        # Combine of expert outputs of 1.0: weights 0.5 per entry on EXPERT_PADDED, the number
        # of receiving ranks on the token layouts; tokens sent nowhere come back as 0.
        for t in range(TOKENS):
            entries = [e for e in idx[t] if e >= 0]
            want = 0.5 * len(entries) if layout == "expert_padded" else float(len({e // L for e in entries}))
            assert (out[t].float().cpu() == want).all(), (layout, payload, t)

    run_ranks(nranks, rank_main)
