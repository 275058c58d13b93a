# SPDX-License-Identifier: Apache-2.0
"""What every version of the layer shares: the weights, the router, one expert's MLP, and
the layer computed on one GPU (the reference every version is checked against).

Every function takes the torch module as its first argument (this package imports no torch).
"""


def make_weights(torch, args, experts, device):
    """Router and the given experts' weights, identical on every rank (seeded per expert)."""
    g = torch.Generator(device=device)
    g.manual_seed(args.seed)
    router = torch.randn(args.hidden, args.experts, generator=g, device=device) / args.hidden**0.5
    w1, w2 = [], []
    for e in experts:
        g.manual_seed(args.seed * 1000003 + e)
        w1.append(
            (torch.randn(args.hidden, args.ffn, generator=g, device=device) / args.hidden**0.5).to(torch.bfloat16)
        )
        w2.append((torch.randn(args.ffn, args.hidden, generator=g, device=device) / args.ffn**0.5).to(torch.bfloat16))
    return router, w1, w2


def local_weights(torch, args, rank, nranks, device):
    """make_weights for the experts rank `rank` hosts: rank * L .. (rank + 1) * L - 1."""
    local = args.experts // nranks
    return make_weights(torch, args, range(rank * local, (rank + 1) * local), device)


def route(torch, x, router, topk):
    """topk_idx [B, K] int64 and softmax weights [B, K] fp32 of the fp32 router logits."""
    logits = x.float() @ router
    top, idx = torch.topk(logits, topk, dim=1)
    return idx.contiguous(), torch.softmax(top, dim=1).contiguous()


def expert(torch, rows, w1, w2):
    """One expert, a SiLU MLP in bf16: y = silu(x W1) W2."""
    return torch.nn.functional.silu(rows @ w1) @ w2


def reference_layer(torch, x, router, w1, w2, topk):
    """Every expert on one GPU: out[t] = sum_k w[t,k] * expert_idx[t,k](x[t]), fp32 sum."""
    idx, weights = route(torch, x, router, topk)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(len(w1)):
        token, slot = (idx == e).nonzero(as_tuple=True)
        if token.numel():
            y = expert(torch, x[token], w1[e], w2[e]).float()
            out.index_add_(0, token, y * weights[token, slot].unsqueeze(1))
    return out.to(torch.bfloat16)
