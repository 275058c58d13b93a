//! The group lifecycle on real GPUs, one thread per GPU. Runs only when EPCOMM_TEST_GPUS=N
//! (N >= 1) says how many GPUs to use; otherwise it reports that it is skipped and passes.

use std::io::Write;
use std::thread;

use epcomm::{Comm, Group, GroupConfig, Mode, Result, UniqueId};

/// Writes past the test harness's output capture, so the note shows in `meson test -v`.
fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn gpu_count() -> Option<i32> {
    let value = std::env::var("EPCOMM_TEST_GPUS").ok()?;
    let count: i32 =
        value.trim().parse().unwrap_or_else(|_| panic!("EPCOMM_TEST_GPUS={value:?} is not a number"));
    (count >= 1).then_some(count)
}

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
    group.close()?;
    comm.close()
}

#[test]
fn group_lifecycle_on_every_gpu() {
    let Some(nranks) = gpu_count() else {
        note("gpu test skipped: set EPCOMM_TEST_GPUS=N (N >= 1) to run it on N GPUs");
        return;
    };
    let id = UniqueId::new().expect("unique id");
    let ranks: Vec<_> = (0..nranks).map(|rank| thread::spawn(move || run_rank(id, nranks, rank))).collect();
    let mut failures = Vec::new();
    for (rank, handle) in ranks.into_iter().enumerate() {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failures.push(format!("rank {rank}: {error}")),
            Err(_) => failures.push(format!("rank {rank}: panicked")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    note(&format!("gpu test: group lifecycle passed on {nranks} GPU(s)"));
}
