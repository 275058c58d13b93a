# SPDX-License-Identifier: Apache-2.0
"""A low-latency step whose inputs every rank can compute for every rank, and what the
library must produce for it, computed on the host the way the header and the reference
model (tests/reference/reference.hpp) define it. Pure Python, so the model itself is tested
without torch (test_ll_model.py).

The values keep every intermediate exact in bf16 and float32 (integers in [-8, 8], expert
scales 1-3, weights that are powers of two), yet the expected bits are computed step by
step, in the defined order and with the defined roundings, rather than written down.
float32 arithmetic is emulated by rounding each double result to float32: for one +, - or
* of two float32 values that equals the float32 operation (53 >= 2 * 24 + 2 bits).
"""

import struct
from dataclasses import dataclass
from typing import List, Tuple


def f32(value: float) -> float:
    """Round a double to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def bf16_bits(value: float) -> int:
    """Round a float32 value to bf16 bits, to nearest even (no NaNs occur here)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def f16_bits(value: float) -> int:
    """Round a float32 value to IEEE fp16 bits, to nearest even (no overflow occurs here)."""
    return struct.unpack("<H", struct.pack("<e", value))[0]


def bf16_value(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


@dataclass(frozen=True)
class LlCase:
    nranks: int
    experts_per_rank: int = 4
    hidden: int = 2048
    topk: int = 2
    max_tokens: int = 8

    @property
    def experts(self) -> int:
        return self.nranks * self.experts_per_rank

    @property
    def rows_per_expert(self) -> int:  # R * T
        return self.nranks * self.max_tokens

    def tokens(self, step: int, rank: int) -> int:
        """B of `rank` at `step`: 5 to 7, different between ranks and steps."""
        return 5 + (rank + step) % 3

    def expert(self, step: int, rank: int, token: int, k: int) -> int:
        """Expert of entry (rank, token, k), -1 when masked. Token 4 is fully masked, token 2
        has its second entry masked, token 1 picks one expert twice (allowed: received
        twice); the others pick experts half the range apart, so entries land on different
        ranks and on one."""
        if token == 4 or (token == 2 and k == 1):
            return -1
        base = (3 * token + rank + 5 * step) % self.experts
        if token == 1:
            return base
        return (base + k * (self.experts // 2 + 1)) % self.experts

    def weight(self, step: int, rank: int, token: int, k: int) -> float:
        return (0.5 if k == 0 else 0.25) * (2.0 if token % 2 == 1 else 1.0)

    def x_value(self, step: int, rank: int, token: int, c: int) -> float:
        """Channel c of a token: an integer in [-8, 8]."""
        return float((rank * 7 + token * 3 + c + step * 5) % 17 - 8)

    def expert_scale(self, expert: int) -> float:
        """What expert `expert` does to a row: multiply by 1, 2 or 3."""
        return float(expert % 3 + 1)

    def topk_idx(self, step: int, rank: int) -> List[List[int]]:
        return [[self.expert(step, rank, t, k) for k in range(self.topk)] for t in range(self.tokens(step, rank))]

    def topk_weights(self, step: int, rank: int) -> List[List[float]]:
        return [[self.weight(step, rank, t, k) for k in range(self.topk)] for t in range(self.tokens(step, rank))]

    def x_rows(self, step: int, rank: int) -> List[List[int]]:
        """x [B, H] as bf16 bits."""
        return [
            [bf16_bits(self.x_value(step, rank, t, c)) for c in range(self.hidden)]
            for t in range(self.tokens(step, rank))
        ]

    def dispatch(self, step: int, q: int) -> Tuple[List[int], List[List[List[int]]]]:
        """What rank q receives: counts [L] and, per local expert, its counted rows (bf16
        bits). Rows of local expert l are the entries (r, t, k) choosing global expert
        q*L + l, ordered by r, t, k."""
        counts, rows = [], []
        x = [self.x_rows(step, r) for r in range(self.nranks)]
        for l in range(self.experts_per_rank):
            wanted = q * self.experts_per_rank + l
            mine = [
                x[r][t]
                for r in range(self.nranks)
                for t in range(self.tokens(step, r))
                for k in range(self.topk)
                if self.expert(step, r, t, k) == wanted
            ]
            counts.append(len(mine))
            rows.append(mine)
        return counts, rows

    def combine(self, step: int, r: int) -> List[List[int]]:
        """What rank r gets back in a bf16 out: [B, H] bf16 bits of combine_sums."""
        return [[bf16_bits(v) for v in row] for row in self.combine_sums(step, r)]

    def combine_sums(self, step: int, r: int) -> List[List[float]]:
        """What rank r gets back before the one rounding to out's dtype: [B, H] float32
        values (a float32 out holds them as they are). Per token and channel: for each
        destination rank d ascending that hosts an unmasked entry, the partial sum over
        those entries in top-k order of weight * expert output (float32, each product
        rounded before the add), sent as bf16; the partials added in float32. The expert
        output of a row is bf16(x * expert_scale(e))."""
        out = []
        for t in range(self.tokens(step, r)):
            entries = [(k, self.expert(step, r, t, k)) for k in range(self.topk)]
            entries = [(k, e) for k, e in entries if e >= 0]
            ranks = sorted({e // self.experts_per_rank for _, e in entries})
            row = []
            for c in range(self.hidden):
                x = bf16_value(bf16_bits(self.x_value(step, r, t, c)))
                acc = 0.0
                for d in ranks:
                    partial = 0.0
                    for k, e in entries:
                        if e // self.experts_per_rank == d:
                            y = bf16_value(bf16_bits(f32(x * self.expert_scale(e))))
                            partial = f32(partial + f32(self.weight(step, r, t, k) * y))
                    acc = f32(acc + bf16_value(bf16_bits(partial)))
                row.append(acc)
            out.append(row)
        return out

    def home_weight(self, step: int, rank: int, token: int, k: int) -> float:
        """The weight Weighting.HOME gives entry (rank, token, k) at combine: not dispatch's."""
        return (1.5 if k == 0 else -0.75) + 0.125 * ((rank + token + step) % 4)

    def home_weights(self, step: int, rank: int) -> List[List[float]]:
        return [[self.home_weight(step, rank, t, k) for k in range(self.topk)] for t in range(self.tokens(step, rank))]

    def combine_home_sums(self, step: int, r: int) -> List[List[float]]:
        """combine_sums with Weighting.HOME: every entry's row comes back unweighted and rank
        r adds home_weight * expert output over the token's unmasked entries in top-k order
        (float32, each product rounded before the add); no partial per rank."""
        out = []
        for t in range(self.tokens(step, r)):
            entries = [(k, self.expert(step, r, t, k)) for k in range(self.topk)]
            entries = [(k, e) for k, e in entries if e >= 0]
            row = []
            for c in range(self.hidden):
                x = bf16_value(bf16_bits(self.x_value(step, r, t, c)))
                acc = 0.0
                for k, e in entries:
                    y = bf16_value(bf16_bits(f32(x * self.expert_scale(e))))
                    acc = f32(acc + f32(self.home_weight(step, r, t, k) * y))
                row.append(acc)
            out.append(row)
        return out


def first_difference(what: str, got: List[List[int]], want: List[List[int]]) -> str:
    """Where two lists of bf16 rows first differ, as text; "" when they are equal."""
    if len(got) != len(want):
        return f"{what}: {len(got)} rows, expected {len(want)}"
    for i, (g_row, w_row) in enumerate(zip(got, want)):
        for c, (g, w) in enumerate(zip(g_row, w_row)):
            if g != w:
                return (
                    f"{what}: row {i} channel {c}: got {g:#06x} ({bf16_value(g)}), expected {w:#06x} ({bf16_value(w)})"
                )
        if len(g_row) != len(w_row):
            return f"{what}: row {i} has {len(g_row)} channels, expected {len(w_row)}"
    return ""
