// SPDX-License-Identifier: Apache-2.0
//! Low-latency dispatch and combine through the safe API on real GPUs, one thread per GPU:
//! every rank dispatches known tokens, checks what it received against the host model
//! (support/ll_model.rs), feeds a known function of the received rows to combine, and checks
//! the combined tokens bit for bit. Step 0 runs each call whole; step 1 updates the routing
//! and runs each call as send-only + complete. Local error paths that need a live group
//! (tensor shapes, a complete with nothing pending, a dispatch while one is pending) are
//! checked too.
//!
//! Runs when EPCOMM_TEST_GPUS=N with N >= 2; otherwise it says it is skipped and passes.
//! Device memory comes from the CUDA driver, loaded at run time (support/cuda_driver.rs).

mod support;

use epcomm::{Comm, Dtype, Flags, Group, Handle, HtHandle, HtSizing, Mode, Status, UniqueId};
use support::cuda_driver::{use_device, DeviceBuffer};
use support::ll_model::{first_difference, Case};
use support::ranks::{ensure, epc, gpu_count, note, refused, run_ranks, Check};

fn case(nranks: usize) -> Case {
    Case { nranks, experts_per_rank: 4, hidden: 2048, topk: 2, max_tokens: 8 }
}

const MAX_TOPK: u32 = 4;

/// The device buffers of one rank, sized for the largest step.
struct Buffers {
    topk_idx: DeviceBuffer,
    x: DeviceBuffer,
    weights: DeviceBuffer,
    out_x: DeviceBuffer,
    out_counts: DeviceBuffer,
    expert_out: DeviceBuffer,
    out: DeviceBuffer,
}

impl Buffers {
    fn new(c: &Case) -> Check<Buffers> {
        let (t, k, h, l) = (c.max_tokens, MAX_TOPK as usize + 1, c.hidden, c.experts_per_rank);
        let expert_rows = l * c.rows_per_expert() * h * 2;
        Ok(Buffers {
            topk_idx: DeviceBuffer::zeroed(t * k * 8)?,
            x: DeviceBuffer::zeroed(t * h * 2)?,
            weights: DeviceBuffer::zeroed(t * k * 4)?,
            out_x: DeviceBuffer::zeroed(expert_rows)?,
            out_counts: DeviceBuffer::zeroed(l * 4)?,
            expert_out: DeviceBuffer::zeroed(expert_rows)?,
            out: DeviceBuffer::zeroed(t * h * 2)?,
        })
    }
}

/// Upload rank `rank`'s inputs of `step` and clear its outputs, so that nothing left from an
/// earlier step can pass a check.
fn stage_inputs(c: &Case, b: &Buffers, step: usize, rank: usize) -> Check {
    b.topk_idx.upload(&c.topk_idx(step, rank))?;
    b.x.upload(&c.x(step, rank))?;
    b.weights.upload(&c.topk_weights(step, rank))?;
    for output in [&b.out_x, &b.out_counts, &b.expert_out, &b.out] {
        output.clear()?;
    }
    Ok(())
}

/// One step on `handle` (whose routing is already `step`'s): dispatch, check, combine, check.
fn run_step(c: &Case, b: &Buffers, handle: &Handle<'_>, step: usize, rank: usize, flags: Flags) -> Check {
    let (tokens, h, l) = (c.tokens(step, rank) as i64, c.hidden as i64, c.experts_per_rank as i64);
    let rows = c.rows_per_expert() as i64;
    let x = b.x.tensor(Dtype::BF16, &[tokens, h]);
    let weights = b.weights.tensor(Dtype::FP32, &[tokens, c.topk as i64]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[l, rows, h]);
    let out_counts = b.out_counts.tensor(Dtype::INT32, &[l]);
    epc("ll_dispatch", handle.ll_dispatch(x, weights, out_x, out_counts, flags, None))?;
    if flags.contains(Flags::SEND_ONLY) {
        // Nothing else of the group may start before the pending step completes.
        refused(
            "a second dispatch before complete",
            handle.ll_dispatch(x, weights, out_x, out_counts, Flags::NONE, None),
            Status::INVALID_ARGUMENT,
            "epc_complete first",
        )?;
        epc("complete (dispatch)", handle.complete(None))?;
    }

    let (want_counts, want_rows) = c.dispatch(step, rank);
    let counts: Vec<i32> = b.out_counts.download(c.experts_per_rank)?;
    ensure(counts == want_counts, || format!("step {step}: counts {counts:?}, expected {want_counts:?}"))?;
    let received: Vec<u16> = b.out_x.download(want_rows.len())?;
    for (expert, &count) in counts.iter().enumerate() {
        let start = expert * c.rows_per_expert() * c.hidden;
        let end = start + count as usize * c.hidden;
        if let Some(problem) = first_difference(
            &format!("step {step}: local expert {expert}"),
            &received[start..end],
            &want_rows[start..end],
            c.hidden,
        ) {
            return Err(problem);
        }
    }

    b.expert_out.upload(&c.expert_output(rank, &received, &counts))?;
    let expert_out = b.expert_out.tensor(Dtype::BF16, &[l, rows, h]);
    let out = b.out.tensor(Dtype::BF16, &[tokens, h]);
    epc("ll_combine", handle.ll_combine(expert_out, out, flags, None))?;
    if flags.contains(Flags::SEND_ONLY) {
        epc("complete (combine)", handle.complete(None))?;
    }
    let got: Vec<u16> = b.out.download(tokens as usize * c.hidden)?;
    match first_difference(&format!("step {step}: combined token"), &got, &c.combine(step, rank), c.hidden) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Errors the library finds on a live group before any communication; every rank makes
/// the same calls, so no rank waits for another. The handle holds `step`'s routing.
fn local_errors(
    c: &Case,
    b: &Buffers,
    group: &Group<'_>,
    handle: &Handle<'_>,
    step: usize,
    rank: usize,
) -> Check {
    let three_d = b.topk_idx.tensor(Dtype::INT64, &[1, 4, 2]);
    refused(
        "a 3-D topk_idx",
        Handle::create(group, three_d, None),
        Status::INVALID_ARGUMENT,
        "3 dimensions",
    )?;
    let too_wide = b.topk_idx.tensor(Dtype::INT64, &[4, MAX_TOPK as i64 + 1]);
    refused("K above max_topk", Handle::create(group, too_wide, None), Status::INVALID_ARGUMENT, "max_topk")?;
    let idx = b.topk_idx.tensor(Dtype::INT64, &[4, 2]);
    refused(
        "a high-throughput handle on a low-latency group",
        HtHandle::create(group, idx, HtSizing::EXACT, None),
        Status::INVALID_ARGUMENT,
        "low-latency mode",
    )?;
    let fp32_idx = b.topk_idx.tensor(Dtype::FP32, &[4, 2]);
    refused("an fp32 topk_idx", handle.update(fp32_idx, None), Status::INVALID_ARGUMENT, "dtype")?;
    refused(
        "complete with nothing pending",
        handle.complete(None),
        Status::INVALID_ARGUMENT,
        "nothing is pending",
    )?;

    let (tokens, h) = (c.tokens(step, rank) as i64, c.hidden as i64);
    let (l, rows) = (c.experts_per_rank as i64, c.rows_per_expert() as i64);
    let x = b.x.tensor(Dtype::BF16, &[tokens, h]);
    let weights = b.weights.tensor(Dtype::FP32, &[tokens, c.topk as i64]);
    let half_rows = b.out_x.tensor(Dtype::BF16, &[l, rows, h / 2]);
    let counts = b.out_counts.tensor(Dtype::INT32, &[l]);
    refused(
        "dispatch into a narrow out_x",
        handle.ll_dispatch(x, weights, half_rows, counts, Flags::NONE, None),
        Status::INVALID_ARGUMENT,
        "tensor out_x has shape",
    )?;
    let expert_out = b.expert_out.tensor(Dtype::BF16, &[l, rows, h]);
    let short_out = b.out.tensor(Dtype::BF16, &[tokens - 1, h]);
    refused(
        "combine into too few tokens",
        handle.ll_combine(expert_out, short_out, Flags::NONE, None),
        Status::INVALID_ARGUMENT,
        "tensor out has shape",
    )
}

fn run_rank(id: UniqueId, c: Case, rank: usize) -> Check {
    let comm = epc("Comm::init", Comm::init(&id, c.nranks as i32, rank as i32, rank as i32))?;
    use_device(rank as i32)?;
    let group = epc("Group::create", Group::create(&comm, &c.group_config(Mode::LOW_LATENCY, MAX_TOPK)))?;
    let info = epc("Group::info", group.info())?;
    ensure(info.local_experts as usize == c.experts_per_rank, || format!("info {info:?}"))?;
    let b = Buffers::new(&c)?;

    stage_inputs(&c, &b, 0, rank)?;
    let idx = b.topk_idx.tensor(Dtype::INT64, &[c.tokens(0, rank) as i64, c.topk as i64]);
    let handle = epc("Handle::create", Handle::create(&group, idx, None))?;
    run_step(&c, &b, &handle, 0, rank, Flags::NONE)?;

    stage_inputs(&c, &b, 1, rank)?;
    let idx = b.topk_idx.tensor(Dtype::INT64, &[c.tokens(1, rank) as i64, c.topk as i64]);
    epc("Handle::update", handle.update(idx, None))?;
    run_step(&c, &b, &handle, 1, rank, Flags::SEND_ONLY)?;

    local_errors(&c, &b, &group, &handle, 1, rank)?;
    epc("Handle::close", handle.close())?;
    epc("Group::close", group.close())?;
    epc("Comm::close", comm.close())
}

/// Runs everywhere: the step exercises what it claims (masked entries, a fully masked
/// token, a duplicate expert, tokens spread over two ranks and tokens kept on one), and the
/// model's dispatch receives every unmasked entry exactly once.
#[test]
fn the_host_model_covers_the_cases_it_claims() {
    let c = case(2);
    for step in 0..2 {
        let (mut unmasked, mut spread, mut kept) = (0, 0, 0);
        for r in 0..c.nranks {
            for t in 0..c.tokens(step, r) {
                let experts: Vec<i64> = (0..c.topk).map(|k| c.expert(step, r, t, k)).collect();
                unmasked += experts.iter().filter(|&&e| e >= 0).count();
                let ranks: Vec<usize> =
                    experts.iter().filter(|&&e| e >= 0).map(|&e| e as usize / 4).collect();
                if ranks.len() == 2 && ranks[0] != ranks[1] {
                    spread += 1;
                }
                if ranks.len() == 2 && ranks[0] == ranks[1] {
                    kept += 1;
                }
            }
        }
        assert!(spread > 0 && kept > 0, "step {step}: {spread} spread, {kept} kept");
        let received: i32 = (0..c.nranks).map(|q| c.dispatch(step, q).0.iter().sum::<i32>()).sum();
        assert_eq!(received as usize, unmasked, "step {step}");
        for r in 0..c.nranks {
            let out = c.combine(step, r);
            assert!(out[4 * c.hidden..5 * c.hidden].iter().all(|&v| v == 0), "token 4 is fully masked");
            assert!(out[..c.hidden].iter().any(|&v| v != 0), "token 0 combines to something");
        }
    }
    assert_eq!(c.expert(0, 0, 1, 0), c.expert(0, 0, 1, 1), "token 1 repeats its expert");
}

#[test]
fn ll_dispatch_and_combine_match_the_host_model_on_every_gpu() {
    let Some(nranks) = gpu_count(2) else {
        note("gpu ll test skipped: set EPCOMM_TEST_GPUS=N (N >= 2) to run it on N GPUs");
        return;
    };
    let id = UniqueId::new().expect("unique id");
    let c = case(nranks);
    run_ranks(nranks, move |rank| run_rank(id, c, rank));
    note(&format!("gpu ll test: 2 steps of dispatch + combine matched the host model on {nranks} GPUs"));
}
