// SPDX-License-Identifier: Apache-2.0
//! A low-latency step whose inputs every rank can compute for every rank, and what the
//! library must produce for it, computed on the host the way the header and the reference
//! model (tests/reference/reference.hpp) define it.
//!
//! The values are chosen so that every intermediate is exact in bf16 and fp32 (integers in
//! [-8, 8], expert scales 1-3, weights that are powers of two): the expected bits do not
//! depend on rounding subtleties, yet they are still computed here step by step in the
//! defined order, with the defined roundings, rather than written down.

/// Round an fp32 to bf16 bits, to nearest even (as the library does; no NaNs occur here).
pub fn bf16_from_f32(value: f32) -> u16 {
    let bits = value.to_bits();
    let rounding = 0x7fff + ((bits >> 16) & 1);
    ((bits + rounding) >> 16) as u16
}

pub fn f32_from_bf16(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// One configuration: `nranks` ranks, `experts_per_rank` experts each, top-k `topk`.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub nranks: usize,
    pub experts_per_rank: usize,
    pub hidden: usize,
    pub topk: usize,
    pub max_tokens: usize,
}

impl Case {
    /// The group configuration of a test on this case: `mode`, `max_topk`, a 20 s timeout.
    pub fn group_config(&self, mode: epcomm::Mode, max_topk: u32) -> epcomm::GroupConfig {
        epcomm::GroupConfig::new()
            .mode(mode)
            .num_experts(self.experts() as u32)
            .hidden(self.hidden as u32)
            .max_tokens_per_rank(self.max_tokens as u32)
            .max_topk(max_topk)
            .timeout_ms(20_000)
    }

    pub fn experts(&self) -> usize {
        self.nranks * self.experts_per_rank
    }

    /// Rows per local expert in the dispatch output (R * T).
    pub fn rows_per_expert(&self) -> usize {
        self.nranks * self.max_tokens
    }

    /// B: tokens of `rank` at `step`, 5 to 7 (and different between ranks and steps).
    pub fn tokens(&self, step: usize, rank: usize) -> usize {
        let tokens = 5 + (rank + step) % 3;
        assert!(tokens <= self.max_tokens);
        tokens
    }

    /// The expert of entry (rank, token, k), -1 when masked. Token 4 is fully masked, token
    /// 2 has its second entry masked, token 1 picks one expert twice (allowed: received
    /// twice); the others pick experts half the expert range apart, so entries land on
    /// different ranks as well as on one.
    pub fn expert(&self, step: usize, rank: usize, token: usize, k: usize) -> i64 {
        if token == 4 || (token == 2 && k == 1) {
            return -1;
        }
        let base = (3 * token + rank + 5 * step) % self.experts();
        let pick = if token == 1 { base } else { (base + k * (self.experts() / 2 + 1)) % self.experts() };
        pick as i64
    }

    pub fn weight(&self, _step: usize, _rank: usize, token: usize, k: usize) -> f32 {
        let base = if k == 0 { 0.5 } else { 0.25 };
        if token % 2 == 1 {
            base * 2.0
        } else {
            base
        }
    }

    /// Channel `c` of token `token` of `rank`: an integer in [-8, 8].
    pub fn x_value(&self, step: usize, rank: usize, token: usize, c: usize) -> f32 {
        ((rank * 7 + token * 3 + c + step * 5) % 17) as f32 - 8.0
    }

    /// What an expert does to a row: multiply by 1, 2 or 3 depending on the global expert.
    pub fn expert_scale(&self, expert: usize) -> f32 {
        (expert % 3 + 1) as f32
    }

    pub fn topk_idx(&self, step: usize, rank: usize) -> Vec<i64> {
        let b = self.tokens(step, rank);
        (0..b * self.topk).map(|i| self.expert(step, rank, i / self.topk, i % self.topk)).collect()
    }

    pub fn topk_weights(&self, step: usize, rank: usize) -> Vec<f32> {
        let b = self.tokens(step, rank);
        (0..b * self.topk).map(|i| self.weight(step, rank, i / self.topk, i % self.topk)).collect()
    }

    /// x [B, H] as bf16 bits.
    pub fn x(&self, step: usize, rank: usize) -> Vec<u16> {
        let b = self.tokens(step, rank);
        let h = self.hidden;
        (0..b * h).map(|i| bf16_from_f32(self.x_value(step, rank, i / h, i % h))).collect()
    }

    /// What rank `q` receives: counts [L], and rows [L, R*T, H] (bf16 bits; rows past a
    /// count are left zero, the tests compare only the counted rows). Rows of local expert
    /// l are the entries (r, t, k) choosing global expert q*L + l, ordered by r, t, k.
    pub fn dispatch(&self, step: usize, q: usize) -> (Vec<i32>, Vec<u16>) {
        let (l_count, rows, h) = (self.experts_per_rank, self.rows_per_expert(), self.hidden);
        let mut counts = vec![0i32; l_count];
        let mut out = vec![0u16; l_count * rows * h];
        for (l, count) in counts.iter_mut().enumerate() {
            let wanted = (q * l_count + l) as i64;
            for r in 0..self.nranks {
                let x = self.x(step, r);
                for t in 0..self.tokens(step, r) {
                    for k in 0..self.topk {
                        if self.expert(step, r, t, k) == wanted {
                            let at = (l * rows + *count as usize) * h;
                            out[at..at + h].copy_from_slice(&x[t * h..(t + 1) * h]);
                            *count += 1;
                        }
                    }
                }
            }
        }
        (counts, out)
    }

    /// The expert outputs rank `q` feeds to combine, from the rows it received: row i of
    /// local expert l (i < counts[l]) scaled by expert_scale(q*L + l), rounded to bf16.
    pub fn expert_output(&self, q: usize, received: &[u16], counts: &[i32]) -> Vec<u16> {
        let (rows, h) = (self.rows_per_expert(), self.hidden);
        let mut y = vec![0u16; received.len()];
        for (l, &count) in counts.iter().enumerate() {
            let scale = self.expert_scale(q * self.experts_per_rank + l);
            for i in (l * rows * h)..((l * rows + count as usize) * h) {
                y[i] = bf16_from_f32(f32_from_bf16(received[i]) * scale);
            }
        }
        y
    }

    /// What combine returns to rank `r`: [B, H] bf16 bits. Per token and channel: for each
    /// destination rank d ascending that hosts an unmasked entry, the partial sum over
    /// those entries in top-k order of weight * expert output (fp32, each product rounded
    /// to fp32 before the add), sent as bf16; the partials added in fp32; rounded to bf16.
    pub fn combine(&self, step: usize, r: usize) -> Vec<u16> {
        let (h, l_count) = (self.hidden, self.experts_per_rank);
        let b = self.tokens(step, r);
        let mut out = vec![0u16; b * h];
        for t in 0..b {
            for c in 0..h {
                let x = f32_from_bf16(bf16_from_f32(self.x_value(step, r, t, c)));
                let mut acc = 0.0f32;
                for d in 0..self.nranks {
                    let on_d: Vec<usize> = (0..self.topk)
                        .filter(|&k| {
                            let e = self.expert(step, r, t, k);
                            e >= 0 && e as usize / l_count == d
                        })
                        .collect();
                    if on_d.is_empty() {
                        continue;
                    }
                    let mut partial = 0.0f32;
                    for k in on_d {
                        let e = self.expert(step, r, t, k) as usize;
                        let y = f32_from_bf16(bf16_from_f32(x * self.expert_scale(e)));
                        let product: f32 = self.weight(step, r, t, k) * y;
                        partial += product;
                    }
                    acc += f32_from_bf16(bf16_from_f32(partial));
                }
                out[t * h + c] = bf16_from_f32(acc);
            }
        }
        out
    }
}

/// The first place two bf16 arrays differ, as text, or None when they are equal.
pub fn first_difference(what: &str, got: &[u16], want: &[u16], row_len: usize) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{what}: {} values, expected {}", got.len(), want.len()));
    }
    let i = got.iter().zip(want).position(|(g, w)| g != w)?;
    Some(format!(
        "{what}: row {} channel {}: got {:#06x} ({}), expected {:#06x} ({})",
        i / row_len,
        i % row_len,
        got[i],
        f32_from_bf16(got[i]),
        want[i],
        f32_from_bf16(want[i])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_from_f32(1.0), 0x3f80);
        assert_eq!(bf16_from_f32(-8.0), 0xc100);
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
        assert_eq!(bf16_from_f32(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
        assert_eq!(bf16_from_f32(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_from_bf16(0x4040), 3.0);
    }
}
