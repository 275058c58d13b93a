# SPDX-License-Identifier: Apache-2.0
"""Ours at prefill sizes: the layer on epcomm.torch's high-throughput dispatch and combine,
on the expert-packed layout.

Per layer (routing changes every layer, so the layout is part of the layer):
  router -> top-k -> softmax weights
  -> Buffer.ht_dispatch_packed: routes (the layout exchange, collective; no allocation and no
     host synchronisation) and dispatches one row per (token, entry) to the entry's expert:
     the rows of local expert l are out_x[offsets[l] : offsets[l] + counts[l]], zones
     aligned to --ht-alignment rows, as a grouped GEMM takes them
  -> one matmul pair per local expert on its zone, written in place (no argsort, no gather)
  -> Buffer.ht_combine: each row weighted by its entry's weight on the expert's rank, a
     token's rows summed per rank, the partials summed at home.
Reading the per-expert counts and offsets on the host is the layer's one synchronisation.
"""

from .layer import expert, route


class HtLayer:
    def __init__(self, torch, ept, args, nranks, max_tokens, weights):
        """A high-throughput Buffer on the default process group for up to `max_tokens`
        tokens per rank, with args.ht_sms SMs; `weights` is layer.local_weights of this
        rank."""
        self.torch, self.args = torch, args
        self.local = args.experts // nranks
        self.buffer = ept.Buffer(
            mode="high_throughput",
            num_experts=args.experts,
            hidden=args.hidden,
            max_tokens_per_rank=max_tokens,
            max_topk=args.topk,
            num_sms=args.ht_sms,
        )
        self.router, self.w1, self.w2 = weights
        self.y = None  # the experts' outputs, in the dispatch's layout (allocated once)

    def forward(self, x):
        torch, buffer = self.torch, self.buffer
        idx, weights = route(torch, x, self.router, self.args.topk)
        rows_x, counts, offsets = buffer.ht_dispatch_packed(x, idx, weights, alignment=self.args.ht_alignment)
        if self.y is None:
            self.y = torch.empty_like(rows_x)  # rows outside the zones are never read by combine
        host = torch.cat((counts, offsets)).tolist()  # the one host synchronisation
        counts_h, offsets_h = host[: self.local], host[self.local :]
        for l, (n, start) in enumerate(zip(counts_h, offsets_h)):
            if n:
                self.y[start : start + n] = expert(torch, rows_x[start : start + n], self.w1[l], self.w2[l])
        return buffer.ht_combine(self.y, idx)

    def close(self):
        self.torch.cuda.synchronize()
        self.buffer.close()
