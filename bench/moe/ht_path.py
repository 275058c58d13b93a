# SPDX-License-Identifier: Apache-2.0
"""Ours at prefill sizes: the layer on epcomm's high-throughput dispatch and combine.

Per layer (routing changes every layer, so the layout is part of the layer):
  router -> top-k -> softmax weights
  -> the layer's CAPACITY handle: created at the first layer, then epc_handle_update with the
     new routing (the layout, collective; no allocation and no host synchronisation; rows =
     ranks * max tokens, the first N of them received)
  -> dispatch: each token once to every rank hosting one of its experts; each received row
     carries, per top-k slot, the local expert id or -1 (out_topk_idx) and the weight or 0
     (out_topk_weights), and out_expert_counts gives the (row, slot) pairs per local expert
  -> per local expert: gather the rows where some slot names it and run its MLP; per row,
     the fp32 sum in top-k slot order of weight * y, rounded to bf16 once (expert_rows)
  -> combine: each token's rows from the ranks that received it, summed in fp32.
Reading N and the per-expert counts on the host is the layer's one synchronisation. (An EXACT
handle per layer measured 0.6-0.7x of the all_to_all baseline: creating and destroying a
handle allocates, frees and synchronises.)
"""

from .layer import expert, route


def expert_rows(torch, rows_x, local_idx, local_w, counts, w1, w2):
    """The rows combine sends back: per received row i, bf16 of
    sum over slots k in ascending order of local_w[i, k] * expert_{local_idx[i, k]}(rows_x[i])
    in fp32, over the slots naming a local expert (the others weigh 0).

    rows_x [N, H] bf16, local_idx [N, K] int32 (local expert or -1), local_w [N, K] fp32,
    counts: (row, slot) pairs per local expert, as host ints; w1, w2: the local experts."""
    n, k_slots = local_idx.shape
    hidden, device = rows_x.shape[1], rows_x.device
    total = sum(counts)
    # Every (row, slot) pair, grouped by local expert (stable: by row, then slot, within one);
    # the slots naming no local expert sort last and are dropped.
    flat = local_idx.flatten().long()
    pairs = torch.argsort(flat.masked_fill(flat < 0, len(w1)), stable=True)[:total]
    y = rows_x.new_empty(total + 1, hidden)  # row `total`: zeros, for the non-local slots
    y[total].zero_()
    start = 0
    for l, count in enumerate(counts):
        if count:
            rows = pairs[start : start + count] // k_slots
            y[start : start + count] = expert(torch, rows_x[rows], w1[l], w2[l])
        start += count
    # y_of[i, k]: the row of y holding slot k of received row i.
    y_of = torch.full((n * k_slots,), total, dtype=torch.long, device=device)
    y_of[pairs] = torch.arange(total, device=device)
    y_of = y_of.view(n, k_slots)
    acc = torch.zeros(n, hidden, dtype=torch.float32, device=device)
    for k in range(k_slots):
        acc += y[y_of[:, k]].float() * local_w[:, k : k + 1]
    return acc.to(torch.bfloat16)


class HtLayer:
    def __init__(self, torch, epcomm, comm, args, nranks, max_tokens, weights):
        """A high-throughput group for up to `max_tokens` tokens per rank, with args.ht_sms
        SMs; `weights` is layer.local_weights of this rank."""
        self.torch, self.epcomm, self.args = torch, epcomm, args
        self.local = args.experts // nranks
        config = epcomm.GroupConfig(
            mode=epcomm.Mode.HIGH_THROUGHPUT,
            num_experts=args.experts,
            hidden=args.hidden,
            max_tokens_per_rank=max_tokens,
            max_topk=args.topk,
            num_sms=args.ht_sms,
        )
        self.group = epcomm.Group.create(comm, config)
        self.router, self.w1, self.w2 = weights
        self.handle = None  # created by the first layer, updated by the next ones

    def forward(self, x):
        torch, epcomm, k_slots = self.torch, self.epcomm, self.args.topk
        stream = torch.cuda.current_stream()
        idx, weights = route(torch, x, self.router, k_slots)
        if self.handle is None:
            self.handle = epcomm.Handle.create(self.group, sizing=epcomm.Sizing.CAPACITY, routing=idx, stream=stream)
        else:
            self.handle.update(idx, stream=stream)
        handle = self.handle
        rows, on = handle.rows, dict(device=x.device)
        rows_x = x.new_empty(rows, x.shape[1])
        local_idx = torch.empty(rows, k_slots, dtype=torch.int32, **on)
        local_w = torch.empty(rows, k_slots, dtype=torch.float32, **on)
        counts = torch.empty(self.local + 1, dtype=torch.int32, **on)  # [N, per-expert counts]
        handle.dispatch(
            x,
            out_x=rows_x,
            topk_weights=weights,
            out_topk_idx=local_idx,
            out_topk_weights=local_w,
            out_expert_counts=counts[1:],
            out_num_recv=counts[:1],
            stream=stream,
        )
        host = counts.tolist()
        n = host[0]
        y = x.new_empty(rows, x.shape[1])  # rows past N are never read by combine
        y[:n] = expert_rows(torch, rows_x[:n], local_idx[:n], local_w[:n], host[1:], self.w1, self.w2)
        out = torch.empty_like(x)
        handle.combine(y, out=out, stream=stream)
        return out

    def close(self):
        self.torch.cuda.synchronize()
        if self.handle is not None:
            self.handle.close()
        self.group.close()
