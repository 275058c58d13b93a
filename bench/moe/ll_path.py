# SPDX-License-Identifier: Apache-2.0
"""Ours at decode sizes: the layer on epcomm.torch's low-latency dispatch and combine.

Per layer: router -> top-k -> softmax weights -> Buffer.ll_dispatch (routes and dispatches:
each local expert's rows, expert-major, with their count; the batch, the same on every rank,
is the step's bound) -> one matmul pair per local
expert on its received rows -> Buffer.ll_combine (weights applied and summed by the library:
per rank in top-k order, then over ranks). Reading the per-expert counts on the host is the
layer's one synchronisation.
"""

from .layer import expert, route


class LlLayer:
    def __init__(self, torch, ept, args, nranks, max_tokens, weights):
        """A low-latency Buffer on the default process group for up to `max_tokens` tokens
        per rank; `weights` is layer.local_weights of this rank."""
        self.torch, self.args = torch, args
        self.local = args.experts // nranks
        self.buffer = ept.Buffer(
            num_experts=args.experts, hidden=args.hidden, max_tokens_per_rank=max_tokens, max_topk=args.topk
        )
        dev = self.buffer.device
        rows = nranks * max_tokens
        self.out_x = torch.empty(self.local, rows, args.hidden, dtype=torch.bfloat16, device=dev)
        self.expert_y = torch.zeros_like(self.out_x)
        self.counts = torch.zeros(self.local, dtype=torch.int32, device=dev)
        self.router, self.w1, self.w2 = weights

    def forward(self, x):
        torch = self.torch
        idx, weights = route(torch, x, self.router, self.args.topk)
        # Every rank runs the same batch (as a data-parallel decode padded to one graph size
        # does), so that batch is a step bound they share: small steps move as line records.
        self.buffer.ll_dispatch(
            x, idx, weights, out_x=self.out_x, out_expert_counts=self.counts, max_step_tokens=x.shape[0]
        )
        for l, n in enumerate(self.counts.tolist()):  # the one host synchronisation
            if n:
                self.expert_y[l, :n] = expert(torch, self.out_x[l, :n], self.w1[l], self.w2[l])
        return self.buffer.ll_combine(self.expert_y, idx)

    def close(self):
        self.torch.cuda.synchronize()
        self.buffer.close()
