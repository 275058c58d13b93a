// SPDX-License-Identifier: Apache-2.0
//! The group lifecycle on real GPUs, one thread per GPU, and communicators made within a
//! bound. Ignored unless asked for (`cargo test -- --ignored`); then they run on
//! EPCOMM_TEST_GPUS GPUs (default 1).

mod support;

use std::time::Instant;

use epcomm::{Comm, Group, GroupConfig, Mode, Result, Status, UniqueId};
use support::ranks::{ensure, gpu_count, note, refused, run_ranks};

/// One rank: bootstrap (`Comm::init`, or `Comm::init_with_timeout` given a timeout), create
/// a group, check what it reports, barrier, close collectively.
fn run_rank(id: UniqueId, nranks: i32, rank: i32, timeout_ms: Option<u32>) -> Result<()> {
    let comm = match timeout_ms {
        Some(timeout_ms) => Comm::init_with_timeout(&id, nranks, rank, rank, timeout_ms)?,
        None => Comm::init(&id, nranks, rank, rank)?,
    };
    let config = GroupConfig::new().num_experts(8 * nranks as u32).hidden(2048);
    let group = Group::create(&comm, &config)?;

    let info = group.info()?;
    assert_eq!((info.rank, info.nranks), (rank, nranks));
    assert_eq!(info.cuda_device, rank);
    assert_eq!(info.mode, Mode::LOW_LATENCY);
    assert_eq!((info.num_experts, info.local_experts, info.hidden), (8 * nranks as u32, 8, 2048));
    assert!(info.symmetric_bytes > 0);

    group.barrier(None)?;
    group.async_error()?; // a healthy group has nothing to report (ABI 1.3)
    group.close()?;
    comm.close()
}

#[test]
#[ignore = "needs a GPU"]
fn group_lifecycle_on_every_gpu() {
    lifecycle_on_every_gpu(None);
}

/// The same on a communicator made within a bound (ABI 2.3): NCCL's non-blocking mode.
#[test]
#[ignore = "needs a GPU"]
fn group_lifecycle_on_a_comm_made_with_a_timeout() {
    lifecycle_on_every_gpu(Some(30_000));
}

fn lifecycle_on_every_gpu(timeout_ms: Option<u32>) {
    let nranks = gpu_count();
    let id = UniqueId::new().expect("unique id");
    let n = nranks as i32;
    run_ranks(nranks, move |rank| {
        run_rank(id, n, rank as i32, timeout_ms).map_err(|error| error.to_string())
    });
    note(&format!("gpu test: group lifecycle (comm timeout {timeout_ms:?}) passed on {nranks} GPU(s)"));
}

/// Rank 0 of a two-rank communicator whose rank 1 never comes (nobody else has the id):
/// TIMEOUT after about its 1 s, not a wait for good.
#[test]
#[ignore = "needs a GPU"]
fn a_comm_whose_second_rank_never_comes_times_out() {
    run_ranks(1, |_| {
        let id = UniqueId::new().map_err(|error| error.to_string())?;
        let start = Instant::now();
        let result = Comm::init_with_timeout(&id, 2, 0, 0, 1000);
        let seconds = start.elapsed().as_secs_f64();
        refused("init_with_timeout", result, Status::TIMEOUT, "within 1000 ms")?;
        ensure((0.95..5.0).contains(&seconds), || {
            format!("TIMEOUT after {seconds:.2} s, expected 1 to 5 s")
        })?;
        note(&format!("gpu test: a rank that never comes: TIMEOUT after {seconds:.2} s"));
        Ok(())
    });
}
