// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"fmt"
	"testing"
)

// The high-throughput semantics (the header and tests/reference/reference.hpp, HT section)
// on the low-latency test's llCase: the same tokens, routing and weights, received
// token-major.
//
//   - dispatch: a token goes once to each rank hosting one of its unmasked entries; a rank's
//     rows are ordered by (source rank, source token); its received top-k ids are the local
//     expert id where local, else -1; its weights the weight where local, else 0; expert
//     counts count (token, entry) pairs per local expert, duplicates twice.
//   - the test's experts: rank q's row for a token is bf16 of the weighted sum, in top-k
//     order and in float32, of bf16(x * expertScale(e)) over the token's local entries.
//   - combine: per token, the float32 sum of its rows from the ranks that received it, in
//     ascending rank order, rounded to bf16 once; backward weights: entry k takes the value
//     the rank hosting entry k's expert returned for the token (0 where masked).

// htReceived is what one rank receives: per row its source (rank, token), and the outputs.
type htReceived struct {
	sources      [][2]int
	x            []uint16
	topkIdx      []int32
	topkWeights  []float32
	expertCounts []int32
}

// rankOf is the rank hosting expert e, -1 for a masked entry.
func (c llCase) rankOf(e int64) int {
	if e < 0 {
		return -1
	}
	return int(e) / c.expertsPerRank
}

func (c llCase) htDispatch(step, q int) htReceived {
	got := htReceived{expertCounts: make([]int32, c.expertsPerRank)}
	for r := 0; r < c.nranks; r++ {
		x := c.x(step, r)
		for t := 0; t < c.tokens(step, r); t++ {
			local := make([]bool, c.topk)
			any := false
			for k := range local {
				local[k] = c.rankOf(c.expert(step, r, t, k)) == q
				any = any || local[k]
			}
			if !any {
				continue
			}
			got.sources = append(got.sources, [2]int{r, t})
			got.x = append(got.x, x[t*c.hidden:(t+1)*c.hidden]...)
			for k, isLocal := range local {
				id, weight := int32(-1), float32(0)
				if isLocal {
					id, weight = int32(int(c.expert(step, r, t, k))%c.expertsPerRank), c.weight(step, r, t, k)
					got.expertCounts[id]++
				}
				got.topkIdx = append(got.topkIdx, id)
				got.topkWeights = append(got.topkWeights, weight)
			}
		}
	}
	return got
}

// htExpertRows is rank q's combine input [N, H], from the data it received.
func (c llCase) htExpertRows(q int, x []uint16, topkIdx []int32, topkWeights []float32) []uint16 {
	rows := make([]uint16, len(x))
	for i := range rows {
		row, ch := i/c.hidden, i%c.hidden
		var acc float32
		for k := 0; k < c.topk; k++ {
			if id := topkIdx[row*c.topk+k]; id >= 0 {
				y := floatFromBF16(bf16FromFloat(floatFromBF16(x[row*c.hidden+ch]) * c.expertScale(q*c.expertsPerRank+int(id))))
				acc += float32(topkWeights[row*c.topk+k] * y) // the product rounded before the add
			}
		}
		rows[i] = bf16FromFloat(acc)
	}
	return rows
}

// htReturnedWeights is what rank q returns as backward weights: its received weight plus
// 16 * (q + 1), so that the rank a value came from shows.
func (c llCase) htReturnedWeights(q int, received []float32) []float32 {
	out := make([]float32, len(received))
	for i, w := range received {
		out[i] = w + 16*float32(q+1)
	}
	return out
}

// htCombine is what combine gives rank r: [B, H] bf16 and [B, K] backward weights, from the
// model's own dispatch and expert rows on every rank.
func (c llCase) htCombine(step, r int) ([]uint16, []float32) {
	b := c.tokens(step, r)
	sums := make([]float32, b*c.hidden)
	weights := make([]float32, b*c.topk)
	for d := 0; d < c.nranks; d++ {
		got := c.htDispatch(step, d)
		rows := c.htExpertRows(d, got.x, got.topkIdx, got.topkWeights)
		returned := c.htReturnedWeights(d, got.topkWeights)
		for i, source := range got.sources {
			if source[0] != r {
				continue
			}
			t := source[1]
			for ch := 0; ch < c.hidden; ch++ {
				sums[t*c.hidden+ch] += floatFromBF16(rows[i*c.hidden+ch])
			}
			for k := 0; k < c.topk; k++ {
				if c.rankOf(c.expert(step, r, t, k)) == d {
					weights[t*c.topk+k] = returned[i*c.topk+k]
				}
			}
		}
	}
	out := make([]uint16, len(sums))
	for i, v := range sums {
		out[i] = bf16FromFloat(v)
	}
	return out, weights
}

// Runs everywhere: each token reaches exactly the ranks hosting its unmasked entries, the
// masked token combines to zeros, backward weights come from the entry's rank, and expert
// counts count duplicates twice.
func TestHTHostModelReceivesEachTokenOncePerRank(t *testing.T) {
	c := llCase{nranks: 2, expertsPerRank: 4, hidden: 256, topk: 2, maxTokens: 8}
	for step := 0; step < 2; step++ {
		received := make([]htReceived, c.nranks)
		pairs := 0
		for q := range received {
			received[q] = c.htDispatch(step, q)
			for _, n := range received[q].expertCounts {
				pairs += int(n)
			}
		}
		unmasked := 0
		for r := 0; r < c.nranks; r++ {
			for tok := 0; tok < c.tokens(step, r); tok++ {
				want, got := map[int]bool{}, map[int]bool{}
				for k := 0; k < c.topk; k++ {
					if q := c.rankOf(c.expert(step, r, tok, k)); q >= 0 {
						want[q] = true
						unmasked++
					}
				}
				for q := range received {
					for _, source := range received[q].sources {
						if source == [2]int{r, tok} {
							got[q] = true
						}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("step %d token (%d, %d) reached ranks %v, expected %v", step, r, tok, got, want)
				}
			}
			out, weights := c.htCombine(step, r)
			// With these experts, HT combine equals the LL model's per-rank prereduced one.
			if problem := firstDifference("HT vs LL combine", out, c.combine(step, r), c.hidden); problem != "" {
				t.Errorf("step %d rank %d: %s", step, r, problem)
			}
			for _, v := range out[4*c.hidden : 5*c.hidden] {
				if v != 0 {
					t.Fatalf("step %d rank %d: the fully masked token 4 combines to %#04x", step, r, v)
				}
			}
			first := c.rankOf(c.expert(step, r, 0, 0))
			if weights[0] != c.weight(step, r, 0, 0)+16*float32(first+1) || weights[2*c.topk+1] != 0 {
				t.Errorf("step %d rank %d: backward weights %v", step, r, weights)
			}
		}
		if pairs != unmasked {
			t.Errorf("step %d: expert counts sum to %d for %d unmasked entries", step, pairs, unmasked)
		}
	}
}
