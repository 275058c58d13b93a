// SPDX-License-Identifier: Apache-2.0
//! The group lifecycle on real GPUs, one thread per GPU. Ignored unless asked for
//! (`cargo test -- --ignored`); then it runs on EPCOMM_TEST_GPUS GPUs (default 1).

mod support;

use epcomm::{Comm, Group, GroupConfig, Mode, Result, UniqueId};
use support::ranks::{gpu_count, note, run_ranks};

/// One rank: bootstrap, create a group, check what it reports, barrier, close collectively.
fn run_rank(id: UniqueId, nranks: i32, rank: i32) -> Result<()> {
    let comm = Comm::init(&id, nranks, rank, rank)?;
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
    let nranks = gpu_count();
    let id = UniqueId::new().expect("unique id");
    let n = nranks as i32;
    run_ranks(nranks, move |rank| run_rank(id, n, rank as i32).map_err(|error| error.to_string()));
    note(&format!("gpu test: group lifecycle passed on {nranks} GPU(s)"));
}
