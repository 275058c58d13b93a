# SPDX-License-Identifier: Apache-2.0
"""The host model of the GPU low-latency test (ll_model.py), checked without a GPU."""

from ll_model import LlCase, bf16_bits, bf16_value, f16_bits


def test_bf16_rounds_to_nearest_even():
    assert bf16_bits(1.0) == 0x3F80 and bf16_bits(-8.0) == 0xC100
    assert bf16_bits(1 + 1 / 256) == 0x3F80  # a tie: to the even neighbour, 1.0
    assert bf16_bits(1 + 3 / 256) == 0x3F82  # a tie: to the even neighbour, 1 + 2^-6
    assert bf16_value(0x4040) == 3.0
    assert f16_bits(1.0) == 0x3C00 and f16_bits(-8.0) == 0xC800
    assert f16_bits(1 + 2**-11) == 0x3C00 and f16_bits(1 + 3 * 2**-11) == 0x3C02  # ties to even


def test_the_step_covers_the_cases_it_claims():
    """Masked entries, a fully masked token, a duplicate expert, tokens spread over two
    ranks and tokens kept on one; dispatch receives every unmasked entry exactly once."""
    case = LlCase(nranks=2, hidden=64)
    for step in range(2):
        unmasked = spread = kept = 0
        for r in range(case.nranks):
            for t in range(case.tokens(step, r)):
                ranks = [e // case.experts_per_rank for e in case.topk_idx(step, r)[t] if e >= 0]
                unmasked += len(ranks)
                spread += len(ranks) == 2 and ranks[0] != ranks[1]
                kept += len(ranks) == 2 and ranks[0] == ranks[1]
        assert spread and kept, (step, spread, kept)
        received = sum(sum(case.dispatch(step, q)[0]) for q in range(case.nranks))
        assert received == unmasked
        for r in range(case.nranks):
            out = case.combine(step, r)
            assert all(v == 0 for v in out[4]), "token 4 is fully masked"
            assert any(v != 0 for v in out[0])
            sums = case.combine_sums(step, r)
            assert [[bf16_bits(v) for v in row] for row in sums] == out
            assert [[f16_bits(v) for v in row] for row in sums][4] == [0] * case.hidden
    assert case.expert(0, 0, 1, 0) == case.expert(0, 0, 1, 1)
