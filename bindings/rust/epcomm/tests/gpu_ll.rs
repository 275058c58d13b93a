// SPDX-License-Identifier: Apache-2.0
//! Low-latency dispatch and combine through the safe API on real GPUs, one thread per GPU:
//! every rank dispatches known tokens, checks what it received against the host model
//! (support/ll_model.rs), feeds a known function of the received rows to combine, and checks
//! the combined tokens bit for bit. The handle is created without routing (as an engine does
//! before graph capture) and routed with update; step 0 runs each call whole, step 1 each
//! call as send-only + complete. The per-expert counts accumulate across steps
//! (acc_expert_counts) and the handle query reports layout, capacity and the pending step.
//! Local errors that need a live group (shapes, the status rule of the 2.0 fields, calls out
//! of order) are checked too.
//!
//! Ignored unless asked for (`cargo test -- --ignored`); then it runs on EPCOMM_TEST_GPUS GPUs
//! (default 1). The host-model checks below it run everywhere.
//! Device memory comes from the CUDA driver, loaded at run time (support/cuda_driver.rs).

mod support;

use epcomm::{
    Combine, Comm, Dispatch, Dtype, Group, Handle, HandleConfig, Layout, Mode, Pending, Quant, Routing,
    Sizing, Status, UniqueId,
};
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
    acc_counts: DeviceBuffer,
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
            acc_counts: DeviceBuffer::zeroed(l * 8)?,
            expert_out: DeviceBuffer::zeroed(expert_rows)?,
            out: DeviceBuffer::zeroed(t * h * 2)?,
        })
    }
}

/// Upload rank `rank`'s inputs of `step` and clear its outputs, so that nothing left from an
/// earlier step can pass a check (acc_counts accumulates, so it is left alone).
fn stage_inputs(c: &Case, b: &Buffers, step: usize, rank: usize) -> Check {
    b.topk_idx.upload(&c.topk_idx(step, rank))?;
    b.x.upload(&c.x(step, rank))?;
    b.weights.upload(&c.topk_weights(step, rank))?;
    for output in [&b.out_x, &b.out_counts, &b.expert_out, &b.out] {
        output.clear()?;
    }
    Ok(())
}

fn routing<'b>(c: &Case, b: &'b Buffers, step: usize, rank: usize) -> Routing<'b> {
    Routing::new(b.topk_idx.tensor(Dtype::INT64, &[c.tokens(step, rank) as i64, c.topk as i64]))
}

/// The handle's query must say `pending`, and the layout and capacity of the group.
fn check_query(c: &Case, handle: &Handle<'_>, step: usize, rank: usize, pending: Pending) -> Check {
    let info = epc("Handle::query", handle.query())?;
    let want_capacity = (c.nranks * c.max_tokens) as u64;
    ensure(
        info.mode == Mode::LOW_LATENCY
            && info.layout == Layout::EXPERT_PADDED
            && info.sizing == Sizing::CAPACITY
            && info.capacity == want_capacity
            && info.num_tokens as usize == c.tokens(step, rank)
            && info.topk as usize == c.topk
            && info.pending == pending
            && info.overflow_status == Status::OK
            && info.overflow_rank.is_none(),
        || format!("step {step}: query {info:?}, expected capacity {want_capacity}, pending {pending:?}"),
    )
}

/// One step on `handle` (whose routing is already `step`'s): dispatch (with the step bound
/// `bound`, 0 for none), check, combine, check. `acc` is what acc_expert_counts held before the
/// step.
#[allow(clippy::too_many_arguments)]
fn run_step(
    c: &Case,
    b: &Buffers,
    handle: &Handle<'_>,
    step: usize,
    rank: usize,
    send_only: bool,
    bound: u32,
    acc: &mut [i64],
) -> Check {
    let (tokens, h, l) = (c.tokens(step, rank) as i64, c.hidden as i64, c.experts_per_rank as i64);
    let rows = c.rows_per_expert() as i64;
    let x = b.x.tensor(Dtype::BF16, &[tokens, h]);
    let weights = b.weights.tensor(Dtype::FP32, &[tokens, c.topk as i64]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[l, rows, h]);
    let out_counts = b.out_counts.tensor(Dtype::INT32, &[l]);
    let mut args = Dispatch::new(x, out_x)
        .topk_weights(weights)
        .out_expert_counts(out_counts)
        .acc_expert_counts(b.acc_counts.tensor(Dtype::INT64, &[l]))
        .max_step_tokens(bound);
    if send_only {
        args = args.send_only();
    }
    epc("dispatch", handle.dispatch(&args, None))?;
    if send_only {
        check_query(c, handle, step, rank, Pending::DISPATCH)?;
        // One pending step per handle: nothing else may start before it completes.
        refused(
            "a second dispatch before complete",
            handle.dispatch(&Dispatch::new(x, out_x).topk_weights(weights), None),
            Status::INVALID_USAGE,
            "",
        )?;
        refused(
            "an update before complete",
            handle.update(&routing(c, b, step, rank), None),
            Status::INVALID_USAGE,
            "",
        )?;
        epc("complete (dispatch)", handle.complete(None))?;
    }
    check_query(c, handle, step, rank, Pending::NONE)?;

    let (want_counts, want_rows) = c.dispatch(step, rank);
    let counts: Vec<i32> = b.out_counts.download(c.experts_per_rank)?;
    ensure(counts == want_counts, || format!("step {step}: counts {counts:?}, expected {want_counts:?}"))?;
    for (total, &count) in acc.iter_mut().zip(&counts) {
        *total += count as i64;
    }
    let accumulated: Vec<i64> = b.acc_counts.download(c.experts_per_rank)?;
    ensure(accumulated == acc, || {
        format!("step {step}: acc_expert_counts {accumulated:?}, expected {acc:?}")
    })?;
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
    let args =
        if send_only { Combine::new(expert_out, out).send_only() } else { Combine::new(expert_out, out) };
    epc("combine", handle.combine(&args, None))?;
    if send_only {
        check_query(c, handle, step, rank, Pending::COMBINE)?;
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
    let three_d = Routing::new(b.topk_idx.tensor(Dtype::INT64, &[1, 4, 2]));
    refused(
        "a 3-D topk_idx",
        Handle::create(group, None, Some(&three_d), None),
        Status::INVALID_ARGUMENT,
        "topk_idx",
    )?;
    let too_wide = Routing::new(b.topk_idx.tensor(Dtype::INT64, &[4, MAX_TOPK as i64 + 1]));
    refused(
        "K above max_topk",
        Handle::create(group, None, Some(&too_wide), None),
        Status::INVALID_ARGUMENT,
        "max_topk",
    )?;
    refused(
        "an EXPERT_PACKED layout on a low-latency group",
        Handle::create(group, Some(&HandleConfig::new().layout(Layout::EXPERT_PACKED)), None, None),
        Status::UNSUPPORTED,
        "layout",
    )?;
    refused(
        "EXACT sizing of EXPERT_PADDED",
        Handle::create(group, Some(&HandleConfig::new().sizing(Sizing::EXACT)), None, None),
        Status::INVALID_ARGUMENT,
        "sizing",
    )?;
    let fp32_idx = Routing::new(b.topk_idx.tensor(Dtype::FP32, &[4, 2]));
    refused("an fp32 topk_idx", handle.update(&fp32_idx, None), Status::INVALID_ARGUMENT, "topk_idx")?;
    refused("complete with nothing pending", handle.complete(None), Status::INVALID_USAGE, "")?;

    let (tokens, h) = (c.tokens(step, rank) as i64, c.hidden as i64);
    let (l, rows) = (c.experts_per_rank as i64, c.rows_per_expert() as i64);
    let x = b.x.tensor(Dtype::BF16, &[tokens, h]);
    let weights = b.weights.tensor(Dtype::FP32, &[tokens, c.topk as i64]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[l, rows, h]);
    let half_rows = b.out_x.tensor(Dtype::BF16, &[l, rows, h / 2]);
    refused(
        "dispatch into a narrow out_x",
        handle.dispatch(&Dispatch::new(x, half_rows).topk_weights(weights), None),
        Status::INVALID_ARGUMENT,
        "out_x",
    )?;
    refused(
        "out_num_recv, which EXPERT_PADDED has no column for",
        handle.dispatch(
            &Dispatch::new(x, out_x)
                .topk_weights(weights)
                .out_num_recv(b.out_counts.tensor(Dtype::INT32, &[1])),
            None,
        ),
        Status::INVALID_ARGUMENT,
        "out_num_recv",
    )?;
    refused(
        "an NVFP4 cast",
        handle.dispatch(&Dispatch::new(x, out_x).topk_weights(weights).quant(Quant::NVFP4), None),
        Status::UNSUPPORTED,
        "",
    )?;
    let expert_out = b.expert_out.tensor(Dtype::BF16, &[l, rows, h]);
    let short_out = b.out.tensor(Dtype::BF16, &[tokens - 1, h]);
    refused(
        "combine into too few tokens",
        handle.combine(&Combine::new(expert_out, short_out), None),
        Status::INVALID_ARGUMENT,
        "out",
    )
}

/// Runs `body` on rank's low-latency group of `c` and its buffers, which it makes first, then
/// closes the group and the communicator (the body closes its handles).
fn on_ll_group(
    id: UniqueId,
    c: &Case,
    rank: usize,
    body: impl FnOnce(&Group<'_>, &Buffers) -> Check,
) -> Check {
    let comm = epc("Comm::init", Comm::init(&id, c.nranks as i32, rank as i32, rank as i32))?;
    use_device(rank as i32)?;
    let group = epc("Group::create", Group::create(&comm, &c.group_config(Mode::LOW_LATENCY, MAX_TOPK)))?;
    let b = Buffers::new(c)?;
    body(&group, &b)?;
    epc("Group::close", group.close())?;
    epc("Comm::close", comm.close())
}

fn run_rank(id: UniqueId, c: Case, rank: usize) -> Check {
    on_ll_group(id, &c, rank, |group, b| rank_steps(&c, group, b, rank))
}

/// run_rank's life on its group: two steps, the local errors, the handle closed.
fn rank_steps(c: &Case, group: &Group<'_>, b: &Buffers, rank: usize) -> Check {
    let info = epc("Group::info", group.info())?;
    ensure(info.local_experts as usize == c.experts_per_rank, || format!("info {info:?}"))?;
    let mut acc = vec![0i64; c.experts_per_rank];

    // Created before any routing, as before graph capture: a step needs routing first.
    let handle = epc("Handle::create", Handle::create(group, None, None, None))?;
    let info = epc("Handle::query", handle.query())?;
    ensure(info.num_tokens == 0 && info.topk == 0, || format!("unrouted handle: {info:?}"))?;
    let (h, l, rows) = (c.hidden as i64, c.experts_per_rank as i64, c.rows_per_expert() as i64);
    let x = b.x.tensor(Dtype::BF16, &[0, h]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[l, rows, h]);
    refused(
        "dispatch without routing",
        handle.dispatch(&Dispatch::new(x, out_x).topk_weights(b.weights.tensor(Dtype::FP32, &[0, 2])), None),
        Status::INVALID_USAGE,
        "",
    )?;

    stage_inputs(c, b, 0, rank)?;
    epc("Handle::update (step 0)", handle.update(&routing(c, b, 0, rank), None))?;
    run_step(c, b, &handle, 0, rank, false, 0, &mut acc)?;

    stage_inputs(c, b, 1, rank)?;
    epc("Handle::update (step 1)", handle.update(&routing(c, b, 1, rank), None))?;
    run_step(c, b, &handle, 1, rank, true, 0, &mut acc)?;

    local_errors(c, b, group, &handle, 1, rank)?;
    epc("Handle::close", handle.close())
}

/// ABI 2.2's step bound on a group of T 24, whose steps here have 5 to 7 tokens: steps 0 and 3
/// pass none (records behind each rank's signal), steps 1 and 2 the most tokens any rank has in
/// the step, alike on every rank (on one node, line records), step 2 as send-only + complete;
/// each matches the host model. A bound below this rank's tokens, or above T, is refused by name.
fn run_bounded_rank(id: UniqueId, c: Case, rank: usize) -> Check {
    on_ll_group(id, &c, rank, |group, b| bounded_steps(&c, group, b, rank))
}

fn bounded_steps(c: &Case, group: &Group<'_>, b: &Buffers, rank: usize) -> Check {
    let mut acc = vec![0i64; c.experts_per_rank];
    let handle = epc("Handle::create", Handle::create(group, None, None, None))?;
    for step in 0..4 {
        let bound = if step == 1 || step == 2 {
            (0..c.nranks).map(|q| c.tokens(step, q)).max().unwrap_or(0) as u32
        } else {
            0
        };
        stage_inputs(c, b, step, rank)?;
        epc("Handle::update", handle.update(&routing(c, b, step, rank), None))?;
        run_step(c, b, &handle, step, rank, step == 2, bound, &mut acc)
            .map_err(|problem| format!("step {step} (bound {bound}): {problem}"))?;
    }
    let (tokens, h, l, rows) =
        (c.tokens(3, rank), c.hidden as i64, c.experts_per_rank as i64, c.rows_per_expert() as i64);
    let x = b.x.tensor(Dtype::BF16, &[tokens as i64, h]);
    let weights = b.weights.tensor(Dtype::FP32, &[tokens as i64, c.topk as i64]);
    let out_x = b.out_x.tensor(Dtype::BF16, &[l, rows, h]);
    for bound in [tokens as u32 - 1, c.max_tokens as u32 + 1] {
        refused(
            &format!("a step bound of {bound}"),
            handle.dispatch(&Dispatch::new(x, out_x).topk_weights(weights).max_step_tokens(bound), None),
            Status::INVALID_ARGUMENT,
            &format!("max_step_tokens is {bound}"),
        )?;
    }
    check_query(c, &handle, 3, rank, Pending::NONE)?;
    epc("Handle::close", handle.close())
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
#[ignore = "needs a GPU"]
fn dispatch_and_combine_match_the_host_model_on_every_gpu() {
    let nranks = gpu_count();
    let id = UniqueId::new().expect("unique id");
    let c = case(nranks);
    run_ranks(nranks, move |rank| run_rank(id, c, rank));
    note(&format!("gpu ll test: 2 steps of dispatch + combine matched the host model on {nranks} GPUs"));
}

#[test]
#[ignore = "needs a GPU"]
fn bounded_steps_match_the_host_model_on_every_gpu() {
    let nranks = gpu_count();
    let id = UniqueId::new().expect("unique id");
    let c = Case { max_tokens: 24, ..case(nranks) };
    run_ranks(nranks, move |rank| run_bounded_rank(id, c, rank));
    note(&format!("gpu ll test: 4 steps, 2 of them bounded, matched the host model on {nranks} GPUs"));
}
