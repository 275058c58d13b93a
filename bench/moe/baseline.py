# SPDX-License-Identifier: Apache-2.0
"""The baseline: the same layer on torch.distributed.all_to_all_single.

Sort the (token, expert) selections by expert, exchange counts, all_to_all the rows (one
per selection), run each local expert on its rows, all_to_all them back, weighted sum.
Reading the split sizes on the host is the layer's one synchronisation. The same code runs
at decode and prefill sizes.
"""

from .layer import expert, route


class AllToAllLayer:
    def __init__(self, torch, dist, args, nranks, weights):
        """`weights` is layer.local_weights of this rank."""
        self.torch, self.dist, self.args = torch, dist, args
        self.nranks = nranks
        self.local = args.experts // nranks
        self.router, self.w1, self.w2 = weights

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
            output_size=sum(recv_splits),
        )
        by_expert = torch.argsort(local_expert, stable=True)
        y = torch.empty_like(recv)
        start = 0
        for l in range(L):
            n = sum(per_expert[s][l] for s in range(R))
            if n:
                rows = by_expert[start : start + n]
                y[rows] = expert(torch, recv[rows], self.w1[l], self.w2[l])
            start += n
        back = torch.empty_like(send)
        dist.all_to_all_single(back, y, send_splits, recv_splits)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        out.index_add_(0, order // K, back.float() * weights.flatten()[order].unsqueeze(1))
        return out.to(torch.bfloat16)
