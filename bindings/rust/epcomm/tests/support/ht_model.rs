// SPDX-License-Identifier: Apache-2.0
//! The high-throughput semantics (header and tests/reference/reference.hpp, HT section) on the
//! low-latency test's [`Case`]: the same tokens, routing and weights, received token-major.
//!
//! - dispatch: a token goes once to each rank hosting one of its unmasked entries; a rank's
//!   rows are ordered by (source rank, source token); its received top-k ids are the local
//!   expert id where local, else -1; its weights the weight where local, else 0; expert
//!   counts count (token, entry) pairs per local expert, duplicates twice.
//! - the test's experts: rank q's row for a token is bf16 of the weighted sum, in top-k order
//!   and in fp32, of bf16(x * expert_scale(e)) over the token's local entries.
//! - combine: per token, the fp32 sum of its rows from the ranks that received it, in
//!   ascending rank order, rounded to bf16 once; backward weights: entry k takes the value
//!   the rank hosting entry k's expert returned for the token (0 where masked).

use super::ll_model::{bf16_from_f32, f32_from_bf16, Case};

/// What one rank receives: per row its source (rank, token), the payload and the top-k data.
pub struct HtReceived {
    pub sources: Vec<(usize, usize)>,
    pub x: Vec<u16>,
    pub topk_idx: Vec<i32>,
    pub topk_weights: Vec<f32>,
    pub expert_counts: Vec<i32>,
}

impl Case {
    fn rank_of(&self, expert: i64) -> Option<usize> {
        (expert >= 0).then(|| expert as usize / self.experts_per_rank)
    }

    pub fn ht_dispatch(&self, step: usize, q: usize) -> HtReceived {
        let (h, k_count, l_count) = (self.hidden, self.topk, self.experts_per_rank);
        let mut got = HtReceived {
            sources: Vec::new(),
            x: Vec::new(),
            topk_idx: Vec::new(),
            topk_weights: Vec::new(),
            expert_counts: vec![0; l_count],
        };
        for r in 0..self.nranks {
            let x = self.x(step, r);
            for t in 0..self.tokens(step, r) {
                let experts: Vec<i64> = (0..k_count).map(|k| self.expert(step, r, t, k)).collect();
                if !experts.iter().any(|&e| self.rank_of(e) == Some(q)) {
                    continue;
                }
                got.sources.push((r, t));
                got.x.extend_from_slice(&x[t * h..(t + 1) * h]);
                for (k, &e) in experts.iter().enumerate() {
                    let local = self.rank_of(e) == Some(q);
                    got.topk_idx.push(if local { (e as usize % l_count) as i32 } else { -1 });
                    got.topk_weights.push(if local { self.weight(step, r, t, k) } else { 0.0 });
                    if local {
                        got.expert_counts[e as usize % l_count] += 1;
                    }
                }
            }
        }
        got
    }

    /// Rank `q`'s combine input [N, H] from what it received (its own received data, so the
    /// test feeds back exactly what the library delivered).
    pub fn ht_expert_rows(&self, q: usize, x: &[u16], topk_idx: &[i32], topk_weights: &[f32]) -> Vec<u16> {
        let (h, k_count) = (self.hidden, self.topk);
        let mut rows = vec![0u16; x.len()];
        for (i, row) in rows.chunks_mut(h).enumerate() {
            for (c, value) in row.iter_mut().enumerate() {
                let mut acc = 0.0f32;
                for k in 0..k_count {
                    let local = topk_idx[i * k_count + k];
                    if local >= 0 {
                        let e = q * self.experts_per_rank + local as usize;
                        let y =
                            f32_from_bf16(bf16_from_f32(f32_from_bf16(x[i * h + c]) * self.expert_scale(e)));
                        let product: f32 = topk_weights[i * k_count + k] * y;
                        acc += product;
                    }
                }
                *value = bf16_from_f32(acc);
            }
        }
        rows
    }

    /// The backward weights rank `q` returns for its rows: its received weight plus
    /// 16 * (q + 1), so that the rank a value came from shows.
    pub fn ht_returned_weights(&self, q: usize, received_weights: &[f32]) -> Vec<f32> {
        received_weights.iter().map(|w| w + 16.0 * (q + 1) as f32).collect()
    }

    /// What combine gives rank `r`: [B, H] bf16 and [B, K] backward weights, from the
    /// model's own dispatch and expert rows on every rank.
    pub fn ht_combine(&self, step: usize, r: usize) -> (Vec<u16>, Vec<f32>) {
        let (h, k_count) = (self.hidden, self.topk);
        let b = self.tokens(step, r);
        let mut out = vec![0.0f32; b * h];
        let mut weights = vec![0.0f32; b * k_count];
        for d in 0..self.nranks {
            let got = self.ht_dispatch(step, d);
            let rows = self.ht_expert_rows(d, &got.x, &got.topk_idx, &got.topk_weights);
            let returned = self.ht_returned_weights(d, &got.topk_weights);
            for (i, &(source, t)) in got.sources.iter().enumerate() {
                if source != r {
                    continue;
                }
                for c in 0..h {
                    out[t * h + c] += f32_from_bf16(rows[i * h + c]);
                }
                for k in 0..k_count {
                    if self.rank_of(self.expert(step, r, t, k)) == Some(d) {
                        weights[t * k_count + k] = returned[i * k_count + k];
                    }
                }
            }
        }
        (out.into_iter().map(bf16_from_f32).collect(), weights)
    }
}
