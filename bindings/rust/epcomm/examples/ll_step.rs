// SPDX-License-Identifier: Apache-2.0
//! One low-latency decode step on one rank (GPU 0) through the safe API: bootstrap a
//! one-rank communicator, create a group and a routed handle, dispatch three tokens to four
//! experts, combine the identity expert outputs back, and check both results exactly.
//!
//! Run (needs a GPU): `cargo run --offline --example ll_step`, with the library found as
//! for the tests (EPCOMM_LIB_DIR or pkg-config, see the README). Device memory comes from
//! the CUDA driver loaded at run time (the tests' helper); an application would take it
//! from cudarc, candle or its framework and convert the pointers (`epcomm::DevicePtr`).

#[allow(dead_code)] // the example uses part of the tests' helper
#[path = "../tests/support/cuda_driver.rs"]
mod cuda_driver;

use cuda_driver::{use_device, DeviceBuffer};
use epcomm::{Combine, Comm, Dispatch, Dtype, Group, GroupConfig, Handle, Mode, Routing, UniqueId};

const EXPERTS: usize = 4;
const HIDDEN: usize = 256;
const MAX_TOKENS: usize = 4;
const TOKENS: usize = 3;
const TOPK: usize = 2;
const ROWS_PER_EXPERT: usize = MAX_TOKENS; // EXPERT_PADDED zones: ranks * max tokens

/// Token 0 -> experts 0 and 1, token 1 -> expert 2 (second entry masked), token 2 ->
/// experts 1 and 3; weights 0.75 and 0.25.
const TOPK_IDX: [[i32; TOPK]; TOKENS] = [[0, 1], [2, -1], [1, 3]];
const WEIGHTS: [[f32; TOPK]; TOKENS] = [[0.75, 0.25], [0.75, 0.0], [0.75, 0.25]];
/// What each expert receives, in (source rank, source token) order.
const RECEIVED: [&[usize]; EXPERTS] = [&[0], &[0, 2], &[1], &[2]];

/// bf16 of a value bf16 holds exactly (small integers and quarters here).
fn bf16(value: f32) -> u16 {
    (value.to_bits() >> 16) as u16
}

fn x_value(token: usize, channel: usize) -> f32 {
    (channel % 16) as f32 - 8.0 + token as f32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("libepcomm ABI {} (bindings: {})", epcomm::version()?, epcomm::BINDINGS_ABI);
    let id = UniqueId::new()?;
    let comm = Comm::init(&id, 1, 0, 0)?; // with more ranks: share id.to_hex() with each
    use_device(0)?;
    let config = GroupConfig::new()
        .mode(Mode::LOW_LATENCY)
        .num_experts(EXPERTS as u32)
        .hidden(HIDDEN as u32)
        .max_tokens_per_rank(MAX_TOKENS as u32)
        .max_topk(TOPK as u32);
    let group = Group::create(&comm, &config)?;

    let x: Vec<u16> = (0..TOKENS * HIDDEN).map(|i| bf16(x_value(i / HIDDEN, i % HIDDEN))).collect();
    let idx = DeviceBuffer::zeroed(TOKENS * TOPK * 4)?;
    let weights = DeviceBuffer::zeroed(TOKENS * TOPK * 4)?;
    let x_dev = DeviceBuffer::zeroed(TOKENS * HIDDEN * 2)?;
    let out_x = DeviceBuffer::zeroed(EXPERTS * ROWS_PER_EXPERT * HIDDEN * 2)?;
    let counts = DeviceBuffer::zeroed(EXPERTS * 4)?;
    let out = DeviceBuffer::zeroed(TOKENS * HIDDEN * 2)?;
    idx.upload(&TOPK_IDX.concat())?;
    weights.upload(&WEIGHTS.concat())?;
    x_dev.upload(&x)?;

    let (t, k, h, l, c) = (TOKENS as i64, TOPK as i64, HIDDEN as i64, EXPERTS as i64, ROWS_PER_EXPERT as i64);
    let routing = Routing::new(idx.tensor(Dtype::INT32, &[t, k]));
    let handle = Handle::create(&group, None, Some(&routing), None)?;
    let expert_rows = out_x.tensor(Dtype::BF16, &[l, c, h]);
    // topk_weights: the default (SENDER) weighting of combine applies them on this side.
    let dispatch = Dispatch::new(x_dev.tensor(Dtype::BF16, &[t, h]), expert_rows)
        .topk_weights(weights.tensor(Dtype::FP32, &[t, k]))
        .out_expert_counts(counts.tensor(Dtype::INT32, &[l]));
    handle.dispatch(&dispatch, None)?;
    // The identity expert: each token comes back as the sum of its weights times itself.
    handle.combine(&Combine::new(expert_rows, out.tensor(Dtype::BF16, &[t, h])), None)?;
    group.async_error()?;

    let got_counts: Vec<i32> = counts.download(EXPERTS)?;
    let got_rows: Vec<u16> = out_x.download(EXPERTS * ROWS_PER_EXPERT * HIDDEN)?;
    let got_out: Vec<u16> = out.download(TOKENS * HIDDEN)?;
    for (expert, tokens) in RECEIVED.iter().enumerate() {
        if got_counts[expert] as usize != tokens.len() {
            return Err(
                format!("expert {expert}: {} rows, expected {}", got_counts[expert], tokens.len()).into()
            );
        }
        for (row, &token) in tokens.iter().enumerate() {
            let start = (expert * ROWS_PER_EXPERT + row) * HIDDEN;
            if got_rows[start..start + HIDDEN] != x[token * HIDDEN..(token + 1) * HIDDEN] {
                return Err(format!("expert {expert} row {row} is not token {token}").into());
            }
        }
    }
    for token in 0..TOKENS {
        let sum: f32 = WEIGHTS[token].iter().sum();
        for channel in 0..HIDDEN {
            let (got, want) = (got_out[token * HIDDEN + channel], bf16(sum * x_value(token, channel)));
            if got != want {
                return Err(
                    format!("token {token} channel {channel}: {got:#06x}, expected {want:#06x}").into()
                );
            }
        }
    }
    println!("one LL step on 1 rank: dispatch counts {got_counts:?} and {TOKENS} combined tokens matched");

    handle.close()?;
    group.close()?;
    comm.close()?;
    Ok(())
}
