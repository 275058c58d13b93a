// SPDX-License-Identifier: Apache-2.0
//! What the multi-GPU tests share: how many GPUs (EPCOMM_TEST_GPUS), one thread per rank,
//! and checks that report a problem as text instead of panicking on a rank's thread.

use std::io::Write;

use epcomm::Status;

/// A rank's result: Err carries what went wrong, for the test to report per rank.
pub type Check<T = ()> = std::result::Result<T, String>;

/// Writes past the test harness's output capture, so the note shows in `meson test -v`.
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

pub fn ensure(condition: bool, what: impl FnOnce() -> String) -> Check {
    if condition {
        Ok(())
    } else {
        Err(what())
    }
}

/// An epcomm result as a Check, the error prefixed with `what`.
pub fn epc<T>(what: &str, result: epcomm::Result<T>) -> Check<T> {
    result.map_err(|error| format!("{what}: {error}"))
}

/// `result` must be an error with `status` whose message contains `words`.
pub fn refused<T>(what: &str, result: epcomm::Result<T>, status: Status, words: &str) -> Check {
    match result {
        Ok(_) => Err(format!("{what}: succeeded, expected {status:?} saying {words:?}")),
        Err(error) => ensure(error.status() == status && error.message().contains(words), || {
            format!("{what}: got {error} ({:?}), expected {status:?} saying {words:?}", error.status())
        }),
    }
}

/// How many GPUs (ranks) a GPU test uses: EPCOMM_TEST_GPUS, default 1. The GPU tests are
/// `#[ignore = "needs a GPU"]`, so this is asked only when they were requested with
/// `--ignored`; they then fail (never skip) where the GPUs are missing.
pub fn gpu_count() -> usize {
    let Ok(value) = std::env::var("EPCOMM_TEST_GPUS") else { return 1 };
    let count: usize =
        value.trim().parse().unwrap_or_else(|_| panic!("EPCOMM_TEST_GPUS={value:?} is not a number"));
    assert!(count >= 1, "EPCOMM_TEST_GPUS={count}: a GPU test needs at least one GPU");
    count
}

/// Run `rank_main(rank)` on one thread per rank and panic with every rank's problem. The runs of
/// one test binary take turns, though cargo runs its tests on threads of their own: rank r of
/// every test steps on GPU r's default stream, where two tests' steps would queue behind each
/// other's, each waiting for a peer held up behind the other test until the group's timeout.
pub fn run_ranks(nranks: usize, rank_main: impl Fn(usize) -> Check + Send + Sync + Clone + 'static) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it poisons it; the next test runs all the same.
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let ranks: Vec<_> = (0..nranks)
        .map(|rank| {
            let rank_main = rank_main.clone();
            std::thread::spawn(move || rank_main(rank))
        })
        .collect();
    let mut failures = Vec::new();
    for (rank, handle) in ranks.into_iter().enumerate() {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(problem)) => failures.push(format!("rank {rank}: {problem}")),
            Err(_) => failures.push(format!("rank {rank}: panicked")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
