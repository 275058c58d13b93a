// SPDX-License-Identifier: Apache-2.0
//! High-throughput dispatch and combine through the safe API on real GPUs, one thread per
//! GPU, on the low-latency test's tokens and routing (support/ll_model.rs) with the HT
//! semantics of support/ht_model.rs. Step 0 runs on an EXACT-sized handle with every
//! optional output and backward weights; step 1 on a CAPACITY-sized handle with global
//! expert ids, created with step 0's routing and updated to step 1's. Everything the library
//! writes is compared bit for bit with the model, and the handle query's rows with the
//! model's. Local errors that need a live group (layouts and options the 2.0 status rule
//! refuses, shapes, one-sided backward weights) are checked too.
//!
//! Ignored unless asked for (`cargo test -- --ignored`); then it runs on EPCOMM_TEST_GPUS GPUs
//! (default 1). The host-model checks below it run everywhere.

mod support;

use epcomm::{
    Combine, Comm, Dispatch, Dtype, Group, Handle, HandleConfig, HandleFlags, Layout, Mode, Routing, Sizing,
    Status, UniqueId, Weighting,
};
use support::cuda_driver::{use_device, DeviceBuffer};
use support::ht_model::HtReceived;
use support::ll_model::{first_difference, Case};
use support::ranks::{ensure, epc, gpu_count, note, refused, run_ranks, Check};

const MAX_TOPK: u32 = 4;

fn case(nranks: usize) -> Case {
    Case { nranks, experts_per_rank: 4, hidden: 256, topk: 2, max_tokens: 8 }
}

/// One rank's device memory, sized for CAPACITY rows (the most either handle needs).
struct Buffers {
    topk_idx: DeviceBuffer,
    x: DeviceBuffer,
    weights: DeviceBuffer,
    out_x: DeviceBuffer,
    out_idx: DeviceBuffer,
    out_weights: DeviceBuffer,
    counts: DeviceBuffer,
    num_recv: DeviceBuffer,
    rows: DeviceBuffer,
    returned: DeviceBuffer,
    out: DeviceBuffer,
    back_weights: DeviceBuffer,
}

impl Buffers {
    fn new(c: &Case) -> Check<Buffers> {
        let (t, k, h) = (c.max_tokens, c.topk, c.hidden);
        let n = c.nranks * t;
        let zeroed = DeviceBuffer::zeroed;
        Ok(Buffers {
            topk_idx: zeroed(t * k * 8)?,
            x: zeroed(t * h * 2)?,
            weights: zeroed(t * k * 4)?,
            out_x: zeroed(n * h * 2)?,
            out_idx: zeroed(n * k * 4)?,
            out_weights: zeroed(n * k * 4)?,
            counts: zeroed(c.experts_per_rank * 4)?,
            num_recv: zeroed(4)?,
            rows: zeroed(n * h * 2)?,
            returned: zeroed(n * k * 4)?,
            out: zeroed(t * h * 2)?,
            back_weights: zeroed(t * k * 4)?,
        })
    }

    /// Upload `step`'s inputs of `rank` and clear every output.
    fn stage(&self, c: &Case, step: usize, rank: usize) -> Check {
        let outputs = [&self.out_x, &self.out_idx, &self.out_weights, &self.counts, &self.num_recv];
        for output in outputs.into_iter().chain([&self.out, &self.back_weights]) {
            output.clear()?;
        }
        self.topk_idx.upload(&c.topk_idx(step, rank))?;
        self.x.upload(&c.x(step, rank))?;
        self.weights.upload(&c.topk_weights(step, rank))
    }
}

/// What the library wrote for `want.sources.len()` rows must be the model's. With
/// `global_base` (rank * L) the ids are global; the local ones are returned.
fn check_received(
    c: &Case,
    b: &Buffers,
    step: usize,
    want: &HtReceived,
    global_base: Option<i32>,
) -> Check<(Vec<u16>, Vec<i32>, Vec<f32>)> {
    let n = want.sources.len();
    let what = |name: &str| format!("step {step}: {name}");
    let num_recv: Vec<i32> = b.num_recv.download(1)?;
    ensure(num_recv[0] as usize == n, || {
        format!("{}: {} rows, expected {n}", what("num_recv"), num_recv[0])
    })?;
    let counts: Vec<i32> = b.counts.download(c.experts_per_rank)?;
    ensure(counts == want.expert_counts, || {
        format!("{}: {counts:?}, expected {:?}", what("expert counts"), want.expert_counts)
    })?;
    let idx: Vec<i32> = b.out_idx.download(n * c.topk)?;
    let to_global = |id: i32| if id >= 0 { id + global_base.unwrap_or(0) } else { id };
    let want_idx: Vec<i32> = want.topk_idx.iter().map(|&id| to_global(id)).collect();
    ensure(idx == want_idx, || format!("{}: {idx:?}, expected {want_idx:?}", what("topk_idx")))?;
    let idx = want.topk_idx.clone(); // equal to what came, as local ids
    let weights: Vec<f32> = b.out_weights.download(n * c.topk)?;
    ensure(weights == want.topk_weights, || {
        format!("{}: {weights:?}, expected {:?}", what("weights"), want.topk_weights)
    })?;
    let x: Vec<u16> = b.out_x.download(n * c.hidden)?;
    first_difference(&what("received token"), &x, &want.x, c.hidden).map_or(Ok(()), Err)?;
    Ok((x, idx, weights))
}

/// The handle's rows, from its query.
fn rows(handle: &Handle<'_>) -> Check<i64> {
    Ok(epc("Handle::query", handle.query())?.rows)
}

/// One step on `handle`, whose routing is `step`'s; `backward` adds the weights' way back;
/// `global_base` as for check_received.
fn run_step(
    c: &Case,
    b: &Buffers,
    handle: &Handle<'_>,
    step: usize,
    rank: usize,
    backward: bool,
    global_base: Option<i32>,
) -> Check {
    let (tokens, h, k) = (c.tokens(step, rank) as i64, c.hidden as i64, c.topk as i64);
    let rows = rows(handle)?;
    let want = c.ht_dispatch(step, rank);
    let args = Dispatch::new(b.x.tensor(Dtype::BF16, &[tokens, h]), b.out_x.tensor(Dtype::BF16, &[rows, h]))
        .topk_weights(b.weights.tensor(Dtype::FP32, &[tokens, k]))
        .out_topk_weights(b.out_weights.tensor(Dtype::FP32, &[rows, k]))
        .out_topk_idx(b.out_idx.tensor(Dtype::INT32, &[rows, k]))
        .out_expert_counts(b.counts.tensor(Dtype::INT32, &[c.experts_per_rank as i64]))
        .out_num_recv(b.num_recv.tensor(Dtype::INT32, &[1]));
    epc("Handle::dispatch", handle.dispatch(&args, None))?;
    let (x, idx, weights) = check_received(c, b, step, &want, global_base)?;

    // The experts, on the host: rows past N (CAPACITY) stay zero and are not read back.
    b.rows.upload(&c.ht_expert_rows(rank, &x, &idx, &weights))?;
    b.returned.upload(&c.ht_returned_weights(rank, &weights))?;
    let (y, out) = (b.rows.tensor(Dtype::BF16, &[rows, h]), b.out.tensor(Dtype::BF16, &[tokens, h]));
    if backward {
        let (w, back) =
            (b.returned.tensor(Dtype::FP32, &[rows, k]), b.back_weights.tensor(Dtype::FP32, &[tokens, k]));
        let args = Combine::new(y, out).topk_weights(w).out_topk_weights(back);
        epc("Handle::combine (backward weights)", handle.combine(&args, None))?;
    } else {
        epc("Handle::combine", handle.combine(&Combine::new(y, out).weighting(Weighting::NONE), None))?;
    }
    let (want_out, want_weights) = c.ht_combine(step, rank);
    let got: Vec<u16> = b.out.download(tokens as usize * c.hidden)?;
    first_difference(&format!("step {step}: combined token"), &got, &want_out, c.hidden)
        .map_or(Ok(()), Err)?;
    if backward {
        let got: Vec<f32> = b.back_weights.download(want_weights.len())?;
        ensure(got == want_weights, || {
            format!("step {step}: backward weights {got:?}, expected {want_weights:?}")
        })?;
    }
    Ok(())
}

/// Refused by the library before any communication; every rank makes the same calls.
fn local_errors(c: &Case, b: &Buffers, group: &Group<'_>, exact: &Handle<'_>, rank: usize) -> Check {
    let routing = Routing::new(b.topk_idx.tensor(Dtype::INT64, &[c.tokens(0, rank) as i64, c.topk as i64]));
    refused(
        "an EXPERT_PADDED handle on a high-throughput group",
        Handle::create(group, Some(&HandleConfig::new().layout(Layout::EXPERT_PADDED)), Some(&routing), None),
        Status::UNSUPPORTED,
        "layout",
    )?;
    refused(
        "a capacity above what can arrive (recv_capacity)",
        Handle::create(group, Some(&HandleConfig::new().capacity(1 << 40)), Some(&routing), None),
        Status::INVALID_ARGUMENT,
        "capacity",
    )?;
    let (tokens, h, k) = (c.tokens(0, rank) as i64, c.hidden as i64, c.topk as i64);
    let rows = rows(exact)?;
    let x = b.x.tensor(Dtype::BF16, &[tokens, h]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[rows, h]);
    let one_row_more = b.out_x.tensor(Dtype::BF16, &[rows + 1, h]);
    refused(
        "dispatch into one row more",
        exact.dispatch(&Dispatch::new(x, one_row_more), None),
        Status::INVALID_ARGUMENT,
        "out_x",
    )?;
    refused(
        "a send-only dispatch on more SMs than the GPU has",
        exact.dispatch(&Dispatch::new(x, out_x).send_only().send_sms(1 << 20), None),
        Status::INVALID_ARGUMENT,
        "send_sms",
    )?;
    let y = b.rows.tensor(Dtype::BF16, &[rows, h]);
    let w = b.returned.tensor(Dtype::FP32, &[rows, k]);
    let out = b.out.tensor(Dtype::BF16, &[tokens, h]);
    refused(
        "backward weights without their output",
        exact.combine(&Combine::new(y, out).topk_weights(w), None),
        Status::INVALID_ARGUMENT,
        "topk_weights",
    )?;
    refused(
        "SENDER weighting on FLAT",
        exact.combine(&Combine::new(y, out).weighting(Weighting::SENDER), None),
        Status::INVALID_ARGUMENT,
        "weighting",
    )
}

fn run_rank(id: UniqueId, c: Case, rank: usize) -> Check {
    let comm = epc("Comm::init", Comm::init(&id, c.nranks as i32, rank as i32, rank as i32))?;
    use_device(rank as i32)?;
    let group = epc("Group::create", Group::create(&comm, &c.group_config(Mode::HIGH_THROUGHPUT, MAX_TOPK)))?;
    let b = Buffers::new(&c)?;

    b.stage(&c, 0, rank)?;
    let routing = Routing::new(b.topk_idx.tensor(Dtype::INT64, &[c.tokens(0, rank) as i64, c.topk as i64]));
    let config = HandleConfig::new().sizing(Sizing::EXACT);
    let exact = epc("Handle::create (EXACT)", Handle::create(&group, Some(&config), Some(&routing), None))?;
    let info = epc("Handle::query", exact.query())?;
    let n = c.ht_dispatch(0, rank).sources.len() as i64;
    ensure(info.rows == n && info.layout == Layout::FLAT && info.sizing == Sizing::EXACT, || {
        format!("EXACT handle: {info:?}, expected rows N = {n}")
    })?;
    run_step(&c, &b, &exact, 0, rank, true, None)?;
    local_errors(&c, &b, &group, &exact, rank)?;
    epc("Handle::close (EXACT)", exact.close())?;

    let global = HandleConfig::new().flags(HandleFlags::GLOBAL_EXPERT_IDS);
    let capacity =
        epc("Handle::create (CAPACITY)", Handle::create(&group, Some(&global), Some(&routing), None))?;
    let info = epc("Handle::query", capacity.query())?;
    let want_rows = (c.nranks * c.max_tokens) as i64;
    ensure(
        info.rows == want_rows
            && info.sizing == Sizing::CAPACITY
            && info.flags == HandleFlags::GLOBAL_EXPERT_IDS,
        || format!("CAPACITY handle: {info:?}, expected rows {want_rows}"),
    )?;
    b.stage(&c, 1, rank)?;
    let routing = Routing::new(b.topk_idx.tensor(Dtype::INT64, &[c.tokens(1, rank) as i64, c.topk as i64]));
    epc("Handle::update", capacity.update(&routing, None))?;
    let base = (rank * c.experts_per_rank) as i32;
    run_step(&c, &b, &capacity, 1, rank, false, Some(base))?;
    epc("Handle::close (CAPACITY)", capacity.close())?;
    epc("Group::close", group.close())?;
    epc("Comm::close", comm.close())
}

#[test]
#[ignore = "needs a GPU"]
fn ht_dispatch_and_combine_match_the_host_model_on_every_gpu() {
    let nranks = gpu_count();
    let id = UniqueId::new().expect("unique id");
    let c = case(nranks);
    run_ranks(nranks, move |rank| run_rank(id, c, rank));
    note(&format!("gpu ht test: EXACT and CAPACITY steps matched the host model on {nranks} GPUs"));
}

/// Runs everywhere: every rank's rows come back to their tokens, and the backward weights
/// come from the rank each entry's expert lives on.
#[test]
fn the_ht_model_receives_each_token_once_per_rank() {
    let c = case(2);
    for step in 0..2 {
        let received: Vec<HtReceived> = (0..c.nranks).map(|q| c.ht_dispatch(step, q)).collect();
        for r in 0..c.nranks {
            for t in 0..c.tokens(step, r) {
                let ranks: std::collections::BTreeSet<usize> = (0..c.topk)
                    .filter_map(|k| usize::try_from(c.expert(step, r, t, k)).ok())
                    .map(|e| e / c.experts_per_rank)
                    .collect();
                let holders: Vec<usize> =
                    (0..c.nranks).filter(|&q| received[q].sources.contains(&(r, t))).collect();
                assert_eq!(holders, ranks.into_iter().collect::<Vec<_>>(), "step {step} token ({r}, {t})");
            }
            let (out, weights) = c.ht_combine(step, r);
            // With these experts, HT combine equals the LL model's per-rank prereduced one.
            assert_eq!(out, c.combine(step, r), "step {step} rank {r}");
            assert!(out[4 * c.hidden..5 * c.hidden].iter().all(|&v| v == 0), "token 4 is fully masked");
            assert_eq!(weights[2 * c.topk + 1], 0.0, "token 2's second entry is masked");
            let first = c.expert(step, r, 0, 0) as usize / c.experts_per_rank;
            assert_eq!(weights[0], c.weight(step, r, 0, 0) + 16.0 * (first + 1) as f32);
        }
        let pairs: i32 = received.iter().map(|q| q.expert_counts.iter().sum::<i32>()).sum();
        let unmasked =
            (0..c.nranks).map(|r| c.topk_idx(step, r).iter().filter(|&&e| e >= 0).count()).sum::<usize>();
        assert_eq!(pairs as usize, unmasked, "step {step}: duplicates count twice");
    }
}
