# SPDX-License-Identifier: Apache-2.0
"""Ours at decode sizes: the layer on epcomm's low-latency dispatch and combine.

Per layer: router -> top-k -> softmax weights -> Handle.update (one Handle per batch size,
created without routing on first use) -> dispatch (each local expert's rows, expert-major,
with their count) -> one matmul pair per local expert on its received rows -> combine
(weights applied and summed by the library: per rank in top-k order, then over ranks). Reading the
per-expert counts on the host is the layer's one synchronisation.
"""

from .layer import expert, route


class LlLayer:
    def __init__(self, torch, epcomm, comm, args, nranks, max_tokens, weights):
        """A low-latency group for up to `max_tokens` tokens per rank; `weights` is
        layer.local_weights of this rank."""
        self.torch, self.epcomm, self.args = torch, epcomm, args
        self.local = args.experts // nranks
        config = epcomm.GroupConfig(
            num_experts=args.experts, hidden=args.hidden, max_tokens_per_rank=max_tokens, max_topk=args.topk
        )
        self.group = epcomm.Group.create(comm, config)
        dev = torch.device("cuda", torch.cuda.current_device())
        rows = nranks * max_tokens
        self.out_x = torch.empty(self.local, rows, args.hidden, dtype=torch.bfloat16, device=dev)
        self.expert_y = torch.zeros_like(self.out_x)
        self.counts = torch.zeros(self.local, dtype=torch.int32, device=dev)
        self.router, self.w1, self.w2 = weights
        self.handles = {}

    def handle_for(self, idx, stream):
        """One handle per batch size, created once (local, no routing); every layer updates
        its routing."""
        batch = idx.shape[0]
        handle = self.handles.get(batch)
        if handle is None:
            handle = self.handles[batch] = self.epcomm.Handle.create(self.group)
        handle.update(idx, stream=stream)
        return handle

    def forward(self, x):
        torch = self.torch
        stream = torch.cuda.current_stream()
        idx, weights = route(torch, x, self.router, self.args.topk)
        handle = self.handle_for(idx, stream)
        handle.dispatch(x, out_x=self.out_x, topk_weights=weights, out_expert_counts=self.counts, stream=stream)
        for l, n in enumerate(self.counts.tolist()):  # the one host synchronisation
            if n:
                self.expert_y[l, :n] = expert(torch, self.out_x[l, :n], self.w1[l], self.w2[l])
        out = torch.empty_like(x)
        handle.combine(self.expert_y, out=out, stream=stream)
        return out

    def close(self):
        self.torch.cuda.synchronize()
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()
        self.group.close()
