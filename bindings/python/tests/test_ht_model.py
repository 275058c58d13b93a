# SPDX-License-Identifier: Apache-2.0
"""The host model of the GPU high-throughput test (ht_model.py), checked without a GPU."""

from ht_model import expert_rows, ht_combine, ht_dispatch, rank_of, returned_weights
from ll_model import LlCase


def test_each_token_reaches_exactly_the_ranks_of_its_experts():
    case = LlCase(nranks=2, hidden=64)
    for step in range(2):
        received = [ht_dispatch(case, step, q) for q in range(case.nranks)]
        unmasked = 0
        for r in range(case.nranks):
            for t in range(case.tokens(step, r)):
                experts = [e for e in case.topk_idx(step, r)[t] if e >= 0]
                unmasked += len(experts)
                holders = [q for q in range(case.nranks) if (r, t) in received[q].sources]
                assert holders == sorted({rank_of(case, e) for e in experts}), (step, r, t)
        # Rows are ordered by (source rank, source token); duplicates count twice.
        for got in received:
            assert got.sources == sorted(got.sources)
        assert sum(sum(got.expert_counts) for got in received) == unmasked


def test_combine_sums_the_rows_and_returns_each_entrys_weight_from_its_rank():
    case = LlCase(nranks=2, hidden=64)
    step = 0
    received = [ht_dispatch(case, step, q) for q in range(case.nranks)]
    rows = [expert_rows(case, q, received[q]) for q in range(case.nranks)]
    weights = [returned_weights(q, received[q]) for q in range(case.nranks)]
    for r in range(case.nranks):
        out, back = ht_combine(case, step, r, rows, weights)
        assert all(v == 0 for v in out[4]), "token 4 is fully masked"
        assert back[4] == [0.0, 0.0] and back[2][1] == 0.0, "masked entries get 0"
        first = rank_of(case, case.expert(step, r, 0, 0))
        assert back[0][0] == case.weight(step, r, 0, 0) + 16 * (first + 1)
        # With these experts, HT combine equals the LL model's per-rank prereduced combine.
        assert out == case.combine(step, r)
        assert ht_combine(case, step, r, rows, rounded=False)[0] == case.combine_sums(step, r)
        assert ht_combine(case, step, r, rows)[1] == []
