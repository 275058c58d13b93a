// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"fmt"
	"math"
	"testing"
)

// llCase is a low-latency step whose inputs every rank can compute for every rank, with
// what the library must produce for it, computed on the host the way the header and the
// reference model (tests/reference/reference.hpp) define it. The values keep every
// intermediate exact in bf16 and float32 (integers in [-8, 8], expert scales 1-3, weights
// that are powers of two), yet the expected bits are still computed step by step, in the
// defined order and with the defined roundings, rather than written down.
type llCase struct {
	nranks, expertsPerRank, hidden, topk, maxTokens int
}

func (c llCase) experts() int       { return c.nranks * c.expertsPerRank }
func (c llCase) rowsPerExpert() int { return c.nranks * c.maxTokens }

// tokens is B of rank at step: 5 to 7, different between ranks and steps.
func (c llCase) tokens(step, rank int) int { return 5 + (rank+step)%3 }

// expert of entry (rank, token, k), -1 when masked. Token 4 is fully masked, token 2 has
// its second entry masked, token 1 picks one expert twice (allowed: received twice); the
// others pick experts half the range apart, so entries land on different ranks and on one.
func (c llCase) expert(step, rank, token, k int) int64 {
	if token == 4 || (token == 2 && k == 1) {
		return -1
	}
	base := (3*token + rank + 5*step) % c.experts()
	if token == 1 {
		return int64(base)
	}
	return int64((base + k*(c.experts()/2+1)) % c.experts())
}

func (c llCase) weight(step, rank, token, k int) float32 {
	w := float32(0.25)
	if k == 0 {
		w = 0.5
	}
	if token%2 == 1 {
		w *= 2
	}
	return w
}

// xValue is channel ch of token of rank: an integer in [-8, 8].
func (c llCase) xValue(step, rank, token, ch int) float32 {
	return float32((rank*7+token*3+ch+step*5)%17) - 8
}

// expertScale is what expert e does to a row: multiply by 1, 2 or 3.
func (c llCase) expertScale(e int) float32 { return float32(e%3 + 1) }

func (c llCase) topkIdx(step, rank int) []int64 {
	out := make([]int64, c.tokens(step, rank)*c.topk)
	for i := range out {
		out[i] = c.expert(step, rank, i/c.topk, i%c.topk)
	}
	return out
}

func (c llCase) topkWeights(step, rank int) []float32 {
	out := make([]float32, c.tokens(step, rank)*c.topk)
	for i := range out {
		out[i] = c.weight(step, rank, i/c.topk, i%c.topk)
	}
	return out
}

// x is [B, H] as bf16 bits.
func (c llCase) x(step, rank int) []uint16 {
	out := make([]uint16, c.tokens(step, rank)*c.hidden)
	for i := range out {
		out[i] = bf16FromFloat(c.xValue(step, rank, i/c.hidden, i%c.hidden))
	}
	return out
}

// dispatch is what rank q receives: counts [L] and rows [L, R*T, H] (rows past a count stay
// zero; tests compare only counted rows). Rows of local expert l are the entries (r, t, k)
// choosing global expert q*L + l, ordered by r, t, k.
func (c llCase) dispatch(step, q int) ([]int32, []uint16) {
	counts := make([]int32, c.expertsPerRank)
	rows := make([]uint16, c.expertsPerRank*c.rowsPerExpert()*c.hidden)
	for l := range counts {
		wanted := int64(q*c.expertsPerRank + l)
		for r := 0; r < c.nranks; r++ {
			x := c.x(step, r)
			for t := 0; t < c.tokens(step, r); t++ {
				for k := 0; k < c.topk; k++ {
					if c.expert(step, r, t, k) == wanted {
						at := (l*c.rowsPerExpert() + int(counts[l])) * c.hidden
						copy(rows[at:at+c.hidden], x[t*c.hidden:(t+1)*c.hidden])
						counts[l]++
					}
				}
			}
		}
	}
	return counts, rows
}

// expertOutput is what rank q feeds to combine: received row i of local expert l
// (i < counts[l]) scaled by expertScale(q*L + l), rounded to bf16.
func (c llCase) expertOutput(q int, received []uint16, counts []int32) []uint16 {
	y := make([]uint16, len(received))
	for l, count := range counts {
		scale := c.expertScale(q*c.expertsPerRank + l)
		start := l * c.rowsPerExpert() * c.hidden
		for i := start; i < start+int(count)*c.hidden; i++ {
			y[i] = bf16FromFloat(floatFromBF16(received[i]) * scale)
		}
	}
	return y
}

// combine is what rank r gets back: [B, H] bf16 bits. Per token and channel: for each
// destination rank d ascending that hosts an unmasked entry, the partial sum over those
// entries in top-k order of weight * expert output (float32, each product rounded before
// the add), sent as bf16; the partials added in float32; rounded to bf16.
func (c llCase) combine(step, r int) []uint16 {
	out := make([]uint16, c.tokens(step, r)*c.hidden)
	for t := 0; t < c.tokens(step, r); t++ {
		for ch := 0; ch < c.hidden; ch++ {
			x := floatFromBF16(bf16FromFloat(c.xValue(step, r, t, ch)))
			var acc float32
			for d := 0; d < c.nranks; d++ {
				var partial float32
				used := false
				for k := 0; k < c.topk; k++ {
					e := c.expert(step, r, t, k)
					if e < 0 || int(e)/c.expertsPerRank != d {
						continue
					}
					used = true
					y := floatFromBF16(bf16FromFloat(x * c.expertScale(int(e))))
					// The conversion rounds the product to float32, which Go would otherwise
					// be free to fuse with the add.
					partial += float32(c.weight(step, r, t, k) * y)
				}
				if used {
					acc += floatFromBF16(bf16FromFloat(partial))
				}
			}
			out[t*c.hidden+ch] = bf16FromFloat(acc)
		}
	}
	return out
}

// bf16FromFloat rounds to bf16 bits, to nearest even (no NaNs occur here).
func bf16FromFloat(v float32) uint16 {
	bits := math.Float32bits(v)
	return uint16((bits + 0x7fff + (bits>>16)&1) >> 16)
}

func floatFromBF16(bits uint16) float32 { return math.Float32frombits(uint32(bits) << 16) }

// firstDifference describes the first place two bf16 arrays differ, or returns "".
func firstDifference(what string, got, want []uint16, rowLen int) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%s: %d values, expected %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("%s: row %d channel %d: got %#04x (%g), expected %#04x (%g)", what,
				i/rowLen, i%rowLen, got[i], floatFromBF16(got[i]), want[i], floatFromBF16(want[i]))
		}
	}
	return ""
}

func TestBF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{1, 0x3f80}, {-8, 0xc100}, {1 + 1.0/256, 0x3f80}, {1 + 3.0/256, 0x3f82}, {3, 0x4040}} {
		if got := bf16FromFloat(c.in); got != c.want {
			t.Errorf("bf16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

// The step exercises what it claims (masked entries, a fully masked token, a duplicate
// expert, tokens spread over two ranks and tokens kept on one), and the model's dispatch
// receives every unmasked entry exactly once. Runs everywhere.
func TestLLHostModelCoversItsCases(t *testing.T) {
	c := llCase{nranks: 2, expertsPerRank: 4, hidden: 2048, topk: 2, maxTokens: 8}
	for step := 0; step < 2; step++ {
		unmasked, spread, kept := 0, 0, 0
		for r := 0; r < c.nranks; r++ {
			for tok := 0; tok < c.tokens(step, r); tok++ {
				var ranks []int64
				for k := 0; k < c.topk; k++ {
					if e := c.expert(step, r, tok, k); e >= 0 {
						ranks = append(ranks, e/int64(c.expertsPerRank))
					}
				}
				unmasked += len(ranks)
				if len(ranks) == 2 && ranks[0] != ranks[1] {
					spread++
				} else if len(ranks) == 2 {
					kept++
				}
			}
		}
		if spread == 0 || kept == 0 {
			t.Errorf("step %d: %d spread, %d kept", step, spread, kept)
		}
		received := 0
		for q := 0; q < c.nranks; q++ {
			counts, _ := c.dispatch(step, q)
			for _, n := range counts {
				received += int(n)
			}
		}
		if received != unmasked {
			t.Errorf("step %d: %d rows received for %d unmasked entries", step, received, unmasked)
		}
		for r := 0; r < c.nranks; r++ {
			out := c.combine(step, r)
			for _, v := range out[4*c.hidden : 5*c.hidden] {
				if v != 0 {
					t.Fatalf("step %d rank %d: the fully masked token 4 combines to %#04x", step, r, v)
				}
			}
		}
	}
}
