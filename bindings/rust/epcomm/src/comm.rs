// SPDX-License-Identifier: Apache-2.0
//! [`Comm`]: an NCCL communicator, created here or adopted from a framework.

use std::ffi::c_void;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use epcomm_sys as sys;

use crate::library::{check, entry, library};
use crate::{Result, UniqueId};

/// One rank's NCCL communicator (an `ncclComm_t`).
///
/// Either owned (from [`Comm::init`] or [`Comm::init_with_timeout`]: [`close`](Comm::close)
/// or drop destroys it) or adopted (from [`Comm::from_raw_unowned`]: never destroyed here,
/// the framework that made it keeps that job).
///
/// Groups borrow the `Comm` they were created on ([`crate::Group`]`<'comm>`), so the
/// compiler keeps the communicator alive, and un-closed, for as long as any group on it
/// exists, as the C API requires.
///
/// Thread-safety: `Comm` is `Send` and `Sync`. The calls the C API marks "not thread-safe
/// with respect to other calls on the same communicator" (creating and destroying groups)
/// are serialised by a lock inside the `Comm`; NCCL calls you make yourself on
/// [`as_raw`](Comm::as_raw) are yours to order.
pub struct Comm {
    raw: *mut c_void,
    owned: bool,
    /// Held across group create/destroy, which the C API forbids running concurrently on
    /// one communicator.
    lock: Mutex<()>,
}

// SAFETY: an ncclComm_t may be used from any thread; the calls that must not overlap on
// one communicator are serialised through `lock`, and closing takes the Comm by value.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

impl Comm {
    /// Create rank `rank` of an `nranks`-rank communicator on CUDA device `cuda_device`
    /// (`epc_comm_init`), which becomes current on the calling thread (a negative value
    /// keeps the current device). Create groups on this comm from this same thread, since
    /// group creation uses the thread's current device.
    ///
    /// Collective over all `nranks` ranks, blocking: call it from one thread (or process)
    /// per rank, all with the same `id`. It waits without a bound for every rank to join;
    /// [`Comm::init_with_timeout`] bounds the wait.
    pub fn init(id: &UniqueId, nranks: i32, rank: i32, cuda_device: i32) -> Result<Comm> {
        let api = library()?;
        let init = entry!(api, comm_init);
        let raw_id = id.as_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: raw_id lives across the call; raw is a valid out-parameter.
        check(api, unsafe { init(&raw_id, nranks, rank, cuda_device, &mut raw) })?;
        Ok(Comm::owned(raw))
    }

    /// [`Comm::init`] within a bound (`epc_comm_init_config`, ABI 2.3): when not every rank
    /// has joined after `timeout_ms` milliseconds (a rank died, or was given another id),
    /// the call fails with [`Status::TIMEOUT`](crate::Status::TIMEOUT) naming this rank, and
    /// what NCCL made of the communicator is aborted (there is nothing to close). The
    /// communicator is then in NCCL's non-blocking mode, so that [`Group::create`] bounds its
    /// NCCL steps by the group's timeout too (NCCL calls of your own on
    /// [`as_raw`](Comm::as_raw) return `ncclInProgress`: see NCCL's docs), and
    /// [`close`](Comm::close) (or drop) waits at most `timeout_ms` for NCCL to finalize it,
    /// then aborts it. `timeout_ms` 0 waits without a bound, as [`Comm::init`] does.
    ///
    /// A library older than 2.3 has no such entry: the call fails with
    /// [`Status::UNSUPPORTED`](crate::Status::UNSUPPORTED) without calling it. Collective
    /// and blocking like [`Comm::init`].
    ///
    /// [`Group::create`]: crate::Group::create
    pub fn init_with_timeout(
        id: &UniqueId,
        nranks: i32,
        rank: i32,
        cuda_device: i32,
        timeout_ms: u32,
    ) -> Result<Comm> {
        Self::init_config(library()?, id, nranks, rank, cuda_device, timeout_ms)
    }

    /// [`Comm::init_with_timeout`] through the function table `api` (the tests pass an
    /// older library's).
    fn init_config(
        api: &sys::EpcApi,
        id: &UniqueId,
        nranks: i32,
        rank: i32,
        cuda_device: i32,
        timeout_ms: u32,
    ) -> Result<Comm> {
        let init = entry!(api, comm_init_config);
        let config = sys::EpcCommConfig {
            struct_size: std::mem::size_of::<sys::EpcCommConfig>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            timeout_ms,
            flags: 0,
        };
        let raw_id = id.as_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: raw_id and config live across the call; raw is a valid out-parameter.
        check(api, unsafe { init(&raw_id, nranks, rank, cuda_device, &config, &mut raw) })?;
        Ok(Comm::owned(raw))
    }

    fn owned(raw: *mut c_void) -> Comm {
        Comm { raw, owned: true, lock: Mutex::new(()) }
    }

    /// Adopt an existing `ncclComm_t` (from PyTorch, your own NCCL binding, ...) without
    /// owning it: neither [`close`](Comm::close) nor drop destroys it.
    ///
    /// # Safety
    /// `comm` must be a valid `ncclComm_t` (or NULL, which every call rejects with
    /// INVALID_ARGUMENT) that stays alive, and is not destroyed, for as long as this `Comm`
    /// and every group created on it exist.
    pub unsafe fn from_raw_unowned(comm: *mut c_void) -> Comm {
        Comm { raw: comm, owned: false, lock: Mutex::new(()) }
    }

    /// The `ncclComm_t`, borrowed: it stays valid while `self` lives.
    pub fn as_raw(&self) -> *mut c_void {
        self.raw
    }

    /// Whether dropping or closing this `Comm` destroys the communicator.
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Destroy an owned communicator (`epc_comm_destroy`) and report the result; does
    /// nothing for an adopted one. Every group on it must be closed first (the borrow
    /// checker enforces it). Collective over all ranks, blocking; at most the timeout of a
    /// communicator from [`Comm::init_with_timeout`], after which it is aborted (`Ok`).
    pub fn close(mut self) -> Result<()> {
        let result = self.destroy();
        self.owned = false;
        result
    }

    fn destroy(&mut self) -> Result<()> {
        if !self.owned || self.raw.is_null() {
            return Ok(());
        }
        let api = library()?;
        let destroy = entry!(api, comm_destroy);
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        // SAFETY: raw is the communicator epc_comm_init[_config] gave us, destroyed exactly once.
        check(api, unsafe { destroy(raw) })
    }

    /// The lock for calls that must not overlap on this communicator; a panic while holding
    /// it does not make it unusable (there is no shared state behind it to corrupt).
    pub(crate) fn serialise(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Comm {
    /// Destroys an owned communicator that was not closed, ignoring the result (use
    /// [`close`](Comm::close) to see it). Collective like `close`.
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm").field("raw", &self.raw).field("owned", &self.owned).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn init_with_timeout_on_a_2_2_library_is_unsupported_and_calls_nothing() {
        // A 2.2 library's table ends where comm_init_config begins; the pointer left there
        // proves that struct_size, not the bytes, decides.
        let mut old = *library().expect("library");
        old.struct_size = std::mem::offset_of!(sys::EpcApi, comm_init_config) as u32;
        let id = UniqueId::from_bytes([0; 128]);
        let error = Comm::init_config(&old, &id, 1, 0, -1, 1000).unwrap_err();
        assert_eq!(error.status(), Status::UNSUPPORTED);
        assert!(
            error.message().contains("no comm_init_config in its function table"),
            "{:?}",
            error.message()
        );
    }
}
