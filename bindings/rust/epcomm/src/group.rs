// SPDX-License-Identifier: Apache-2.0
//! [`Group`]: a communicator's symmetric window and NCCL device communicator, on which
//! dispatch and combine run.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use epcomm_sys as sys;

use crate::library::{check, entry, library};
use crate::{Comm, Error, GroupConfig, GroupFlags, Mode, Overflow, Result, Status, StreamRef};

/// One rank's group (`EpcGroup*`), living no longer than the [`Comm`] it was created on.
///
/// Thread-safety: `Send` (a group may move to another thread, e.g. a worker per GPU; make
/// its device current there) but not `Sync`: the C API allows no two calls on one group at
/// once, and calls take `&self`/`self`, so only its one owner can make them. Its
/// [`Handle`](crate::Handle)s may live on other threads; their calls and the group's
/// [`barrier`](Group::barrier) take one lock inside the group, so they never overlap.
///
/// Close it with [`close`](Group::close), collectively on every rank. Dropping an unclosed
/// group destroys it too, but ignores the result and never panics; note that destroying is
/// collective, so a rank that drops its group early (say, on an error) while others still
/// use theirs leaves them waiting until their timeout.
pub struct Group<'comm> {
    raw: NonNull<sys::EpcGroup>,
    comm: &'comm Comm,
    /// Held across every call on the group or on one of its handles except `info` and
    /// `async_error` (which the C API declares thread-safe): the library keeps per-group step
    /// state that those calls update, and handles may be used from threads other than the
    /// group's.
    calls: Mutex<()>,
}

// SAFETY: the C group may be used from any thread as long as calls on it do not overlap,
// which !Sync plus single ownership guarantee; the borrowed Comm is Sync.
unsafe impl Send for Group<'_> {}

/// A group's topology, configuration after defaults, and memory held (`EpcGroupInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// Rank in the communicator.
    pub rank: i32,
    pub nranks: i32,
    /// Rank in this rank's NVLink (LSA) team.
    pub lsa_rank: i32,
    pub lsa_size: i32,
    /// Index of this rank's node: its LSA team, or its virtual node when the group was
    /// created with [`GroupConfig::virtual_node_size`].
    pub node: i32,
    /// Nodes as epcomm uses them (ranks / node size).
    pub num_nodes: i32,
    pub cuda_device: i32,
    pub mode: Mode,
    pub num_experts: u32,
    /// num_experts / nranks.
    pub local_experts: u32,
    pub hidden: u32,
    pub max_tokens_per_rank: u32,
    pub max_topk: u32,
    /// Dispatch bytes per token the window holds, after rounding: `2 * hidden`, or
    /// `hidden + hidden / 32` for a group that carries FP8 payloads only.
    pub max_token_bytes: u32,
    /// Tokens per rank the receive window holds.
    pub recv_capacity: u64,
    pub overflow: Overflow,
    pub max_pending_steps: u32,
    pub num_sms: u32,
    pub timeout_ms: u32,
    pub flags: GroupFlags,
    /// 0: a node is an NVLink (LSA) team.
    pub virtual_node_size: u32,
    /// Device memory held in the registered window.
    pub symmetric_bytes: u64,
    /// Other device memory held.
    pub workspace_bytes: u64,
}

impl<'comm> Group<'comm> {
    /// Create a group on `comm` with `config` (`epc_group_create`): allocates and registers
    /// the symmetric window the plan describes, creates the NCCL device communicator and
    /// proves every NVLink peer reachable with a barrier (bounded by the config's timeout).
    /// Uses the CUDA device current on the calling thread, which must be the communicator's
    /// (the thread that ran [`Comm::init`] has it).
    ///
    /// Collective over every rank of `comm`; blocking; not graph-capturable.
    pub fn create(comm: &'comm Comm, config: &GroupConfig) -> Result<Group<'comm>> {
        let api = library()?;
        let create = entry!(api, group_create);
        let mut raw = std::ptr::null_mut();
        let status = {
            let _serialised = comm.serialise();
            // SAFETY: comm.as_raw() is a communicator (or NULL, which the library rejects)
            // that outlives the group by the 'comm borrow; config is read during the call.
            unsafe { create(comm.as_raw(), config.as_raw(), &mut raw) }
        };
        check(api, status)?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(Status::INTERNAL, "epc_group_create succeeded but returned no group")
        })?;
        Ok(Group { raw, comm, calls: Mutex::new(()) })
    }

    /// Describe the group (`epc_group_query`). Local, non-blocking.
    pub fn info(&self) -> Result<GroupInfo> {
        let api = library()?;
        let query = entry!(api, group_query);
        let mut raw = sys::EpcGroupInfo {
            struct_size: std::mem::size_of::<sys::EpcGroupInfo>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            ..Default::default()
        };
        // SAFETY: the group is live; raw is a valid out-parameter sized by struct_size.
        check(api, unsafe { query(self.raw.as_ptr(), &mut raw) })?;
        Ok(GroupInfo::from_raw(&raw))
    }

    /// Run the group's barrier on `stream` (None: the legacy default stream) and wait for
    /// it (`epc_group_barrier`): every rank of the group arrives before any leaves. A peer that does not arrive within the group's timeout gives
    /// [`Status::TIMEOUT`] naming it, and the group stays failed.
    ///
    /// Collective over every rank of the group; blocking; not graph-capturable.
    pub fn barrier(&self, stream: Option<StreamRef<'_>>) -> Result<()> {
        let api = library()?;
        let barrier = entry!(api, group_barrier);
        let stream = stream.unwrap_or(StreamRef::LEGACY_DEFAULT);
        let status = {
            let _serialised = self.serialise();
            // SAFETY: the group is live; the stream is valid by StreamRef's contract.
            unsafe { barrier(self.raw.as_ptr(), stream.as_raw()) }
        };
        check(api, status)
    }

    /// Whether the group has failed asynchronously (`epc_group_async_error`), without
    /// waiting for anything: `Ok(())` while no kernel of the group has recorded a failure
    /// (and no [`barrier`](Group::barrier) has failed on the host); otherwise the error that
    /// every later call on the group and its handles returns, with the same status and,
    /// word for word, the same message: [`Status::TIMEOUT`] when a kernel gave up waiting
    /// for a peer (the phase, the waiting rank, the peer, how long it waited),
    /// [`Status::INVALID_ARGUMENT`] when the routing check found an expert id outside
    /// `[-1, num_experts)`. The failure is sticky until the group is closed.
    ///
    /// It reads the group's error record, which kernels write in mapped host memory, with no
    /// stream or device synchronisation: a failure of work still queued shows once its kernel
    /// has recorded it, and `Ok(())` says nothing about work the GPU has not finished.
    ///
    /// Local; non-blocking; not stream-ordered; may be called during CUDA graph capture (it
    /// launches nothing). It does not take the lock of the group's calls (the library allows
    /// it while a [`Handle`](crate::Handle) of the group is inside a call on another thread),
    /// so it never waits for them either.
    pub fn async_error(&self) -> Result<()> {
        let api = library()?;
        let query = entry!(api, group_async_error);
        // SAFETY: the group is live (only close and drop destroy it, and they take it by
        // value or exclusively); the library only reads it during the call.
        check(api, unsafe { query(self.raw.as_ptr()) })
    }

    /// Release everything the group holds (`epc_group_destroy`) and report the result.
    ///
    /// Collective (window deregistration is): every rank closes its group; blocking (waits
    /// for the group's work to finish).
    pub fn close(self) -> Result<()> {
        let group = ManuallyDrop::new(self);
        group.destroy()
    }

    /// The `EpcGroup*`, borrowed, for calling epcomm-sys directly.
    pub fn as_raw(&self) -> *mut sys::EpcGroup {
        self.raw.as_ptr()
    }

    /// The communicator the group was created on.
    pub fn comm(&self) -> &'comm Comm {
        self.comm
    }

    /// The lock its handles take (see the `calls` field).
    pub(crate) fn calls(&self) -> &Mutex<()> {
        &self.calls
    }

    fn serialise(&self) -> MutexGuard<'_, ()> {
        lock(&self.calls)
    }

    fn destroy(&self) -> Result<()> {
        let api = library()?;
        let destroy = entry!(api, group_destroy);
        let _serialised = self.comm.serialise();
        // SAFETY: the group is live and destroyed exactly once (close forgets self; drop
        // runs only when close did not).
        check(api, unsafe { destroy(self.raw.as_ptr()) })
    }
}

/// Take `calls`; a panic while it was held leaves nothing to repair (it guards no data).
pub(crate) fn lock(calls: &Mutex<()>) -> MutexGuard<'_, ()> {
    calls.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Group<'_> {
    /// Destroys a group that was not closed, ignoring the result (see the type's docs).
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("raw", &self.raw).field("comm", &self.comm).finish()
    }
}

impl GroupInfo {
    fn from_raw(raw: &sys::EpcGroupInfo) -> GroupInfo {
        GroupInfo {
            rank: raw.rank,
            nranks: raw.nranks,
            lsa_rank: raw.lsa_rank,
            lsa_size: raw.lsa_size,
            node: raw.node,
            num_nodes: raw.num_nodes,
            cuda_device: raw.cuda_device,
            mode: Mode(raw.mode),
            num_experts: raw.num_experts,
            local_experts: raw.local_experts,
            hidden: raw.hidden,
            max_tokens_per_rank: raw.max_tokens_per_rank,
            max_topk: raw.max_topk,
            max_token_bytes: raw.max_token_bytes,
            recv_capacity: raw.recv_capacity,
            overflow: Overflow(raw.overflow),
            max_pending_steps: raw.max_pending_steps,
            num_sms: raw.num_sms,
            timeout_ms: raw.timeout_ms,
            flags: GroupFlags(raw.flags),
            virtual_node_size: raw.virtual_node_size,
            symmetric_bytes: raw.symmetric_bytes,
            workspace_bytes: raw.workspace_bytes,
        }
    }
}

#[cfg(test)]
impl<'comm> Group<'comm> {
    /// A `Group` around a pointer that was not made by `epc_group_create`, so unit tests can
    /// hand the library objects that are not live groups and check what it says.
    pub(crate) fn wrap_for_test(raw: NonNull<sys::EpcGroup>, comm: &'comm Comm) -> Group<'comm> {
        Group { raw, comm, calls: Mutex::new(()) }
    }
}
