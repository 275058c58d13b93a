# SPDX-License-Identifier: Apache-2.0
"""The high-throughput semantics (the header and tests/reference/reference.hpp, HT section)
on the low-latency test's LlCase: the same tokens, routing and weights, received
token-major. Pure Python, so the model itself is tested without torch (test_ht_model.py).

- dispatch: a token goes once to each rank hosting one of its unmasked entries; a rank's
  rows are ordered by (source rank, source token); a row's top-k ids are the local expert
  id where that expert lives on the rank, else -1; its weights the weight where local, else
  0; expert counts count (token, entry) pairs per local expert, a duplicate twice.
- the test's experts: rank q's row for a token is bf16 of the weighted sum, in top-k order
  and in float32, of bf16(x * expert_scale(e)) over the token's local entries; the
  backward weights it returns are its received weights plus 16 * (q + 1).
- combine: per token, the float32 sum of its rows from the ranks that received it, in
  ascending rank order, rounded to bf16 once; backward weights: entry k takes the value
  the rank hosting entry k's expert returned for the token (0 where masked).
"""

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from ll_model import LlCase, bf16_bits, bf16_value, f32


@dataclass
class HtReceived:
    """What one rank receives: per row its source (rank, token) and the dispatch outputs."""

    sources: List[Tuple[int, int]] = field(default_factory=list)
    x: List[List[int]] = field(default_factory=list)  # [N, H] bf16 bits
    topk_idx: List[List[int]] = field(default_factory=list)  # [N, K]
    topk_weights: List[List[float]] = field(default_factory=list)  # [N, K]
    expert_counts: List[int] = field(default_factory=list)  # [L]


def rank_of(case: LlCase, expert: int) -> int:
    return -1 if expert < 0 else expert // case.experts_per_rank


def ht_dispatch(case: LlCase, step: int, q: int) -> HtReceived:
    got = HtReceived(expert_counts=[0] * case.experts_per_rank)
    for r in range(case.nranks):
        x = case.x_rows(step, r)
        for t in range(case.tokens(step, r)):
            experts = case.topk_idx(step, r)[t]
            local = [rank_of(case, e) == q for e in experts]
            if not any(local):
                continue
            got.sources.append((r, t))
            got.x.append(x[t])
            got.topk_idx.append([e % case.experts_per_rank if here else -1 for e, here in zip(experts, local)])
            got.topk_weights.append([case.weight(step, r, t, k) if here else 0.0 for k, here in enumerate(local)])
            for e, here in zip(experts, local):
                if here:
                    got.expert_counts[e % case.experts_per_rank] += 1
    return got


def expert_rows(case: LlCase, q: int, got: HtReceived) -> List[List[int]]:
    """Rank q's combine input [N, H] (bf16 bits), from what it received."""
    rows = []
    for x_row, ids, weights in zip(got.x, got.topk_idx, got.topk_weights):
        row = []
        for bits in x_row:
            acc = 0.0
            for local, w in zip(ids, weights):
                if local >= 0:
                    scale = case.expert_scale(q * case.experts_per_rank + local)
                    y = bf16_value(bf16_bits(f32(bf16_value(bits) * scale)))
                    acc = f32(acc + f32(w * y))
            row.append(bf16_bits(acc))
        rows.append(row)
    return rows


def returned_weights(q: int, got: HtReceived) -> List[List[float]]:
    """The backward weights rank q returns for its rows."""
    return [[f32(w + 16.0 * (q + 1)) for w in row] for row in got.topk_weights]


def ht_combine(
    case: LlCase,
    step: int,
    r: int,
    rows_per_rank: List[List[List[int]]],
    weights_per_rank: Optional[List[List[List[float]]]] = None,
    rounded: bool = True,
) -> Tuple[List[List[Any]], List[List[float]]]:
    """What combine gives rank r: [B, H] bf16 bits (rounded=False: the float32 sums a
    float32 out holds) and (with weights_per_rank) [B, K] backward weights, from every rank
    q's rows (and weights) in its dispatch's order."""
    received = [ht_dispatch(case, step, q) for q in range(case.nranks)]
    out, weights = [], []
    for t in range(case.tokens(step, r)):
        row_on = {q: received[q].sources.index((r, t)) for q in range(case.nranks) if (r, t) in received[q].sources}
        sums = [0.0] * case.hidden
        for q in sorted(row_on):  # ascending rank order
            sums = [f32(acc + bf16_value(v)) for acc, v in zip(sums, rows_per_rank[q][row_on[q]])]
        out.append([bf16_bits(v) for v in sums] if rounded else sums)
        if weights_per_rank is not None:
            entry_ranks = [rank_of(case, e) for e in case.topk_idx(step, r)[t]]
            weights.append([weights_per_rank[q][row_on[q]][k] if q >= 0 else 0.0 for k, q in enumerate(entry_ranks)])
    return out, weights
