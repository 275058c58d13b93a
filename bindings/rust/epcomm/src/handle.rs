// SPDX-License-Identifier: Apache-2.0
//! [`Handle`]: one batch's routing on a group of either mode and its receive layout, and the
//! step it runs: dispatch, combine, and complete after a send-only call.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Mutex;

use epcomm_sys as sys;

use crate::group::lock;
use crate::library::{check, entry, library};
use crate::{
    Combine, Dispatch, Error, Group, HandleConfig, HandleFlags, Layout, Mode, Pending, Result, Routing,
    Sizing, Status, StreamRef,
};

/// One batch's routing on a group (`EpcHandle*`) and its receive layout; the handle's mode
/// is its group's. It borrows its [`Group`] for `'g`, so the group cannot be closed while
/// the handle exists.
///
/// A step is [`dispatch`](Handle::dispatch), then [`combine`](Handle::combine); either can
/// be split into a send-only call ([`Dispatch::send_only`], [`Combine::send_only`]) and
/// [`complete`](Handle::complete). A handle holds at most one pending step; the handles of a
/// group complete in any order.
///
/// Thread-safety: `Send` (a handle may be used on another thread than its group) but not
/// `Sync` (no two calls on one handle at once). Calls on a handle and on the other handles
/// and the barrier of its group are serialised by a lock inside the group, because the
/// library allows no overlapping calls on a group and its handles. Serialising makes them
/// safe, not meaningful: dispatch and combine are collective, and every rank must queue the
/// same steps in the same order, so drive one group's steps from one thread.
///
/// Close it with [`close`](Handle::close) to see errors; dropping it destroys it too, but
/// ignores the result and never panics. Destroying is local and waits for the work queued
/// on the device.
pub struct Handle<'g> {
    raw: NonNull<sys::EpcHandle>,
    /// The group's call lock; borrowing it keeps the group borrowed for `'g`.
    calls: &'g Mutex<()>,
}

// SAFETY: the C handle may be used from any thread as long as calls on it, and on its group,
// do not overlap: Handle is not Sync, so only its owner calls it, and every call takes the
// group's lock, which is all a handle shares with the group's thread.
unsafe impl Send for Handle<'_> {}

/// A handle's layout and state after defaults (`EpcHandleInfo`), from
/// [`Handle::query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandleInfo {
    /// The group's mode.
    pub mode: Mode,
    /// The layout after defaults (never [`Layout::DEFAULT`]).
    pub layout: Layout,
    pub sizing: Sizing,
    /// 0 outside EXPERT_PACKED.
    pub expert_alignment: u32,
    /// B of the current routing (0 before the first).
    pub num_tokens: u32,
    /// K of the current routing (0 before the first).
    pub topk: u32,
    /// The send-only call awaiting [`Handle::complete`].
    pub pending: Pending,
    pub flags: HandleFlags,
    /// C, the capacity after defaults.
    pub capacity: u64,
    /// The first dimension of `[rows, ...]` tensors (FLAT, EXPERT_PACKED); with
    /// [`Sizing::EXACT`] the rows this rank receives for the current routing (0 before the
    /// first).
    pub rows: i64,
    /// [`Status::OK`], or [`Status::CAPACITY`] when the last dispatch received more rows
    /// than C.
    pub overflow_status: Status,
    /// The rank whose receive overflowed; None for none.
    pub overflow_rank: Option<i32>,
    /// Rows that did not fit ([`Overflow::DROP`](crate::Overflow::DROP): were dropped).
    pub overflow_rows: i64,
    /// ABI 2.1: the handle's number in its group (1, 2, ... in creation order); messages
    /// name the handle by it.
    pub id: u64,
}

impl HandleInfo {
    fn from_raw(raw: &sys::EpcHandleInfo) -> HandleInfo {
        HandleInfo {
            mode: Mode(raw.mode),
            layout: Layout(raw.layout),
            sizing: Sizing(raw.sizing),
            expert_alignment: raw.expert_alignment,
            num_tokens: raw.num_tokens,
            topk: raw.topk,
            pending: Pending(raw.pending),
            flags: HandleFlags(raw.flags),
            capacity: raw.capacity,
            rows: raw.rows,
            overflow_status: Status(raw.overflow_status),
            overflow_rank: (raw.overflow_rank >= 0).then_some(raw.overflow_rank),
            overflow_rows: raw.overflow_rows,
            id: raw.id,
        }
    }
}

impl<'g> Handle<'g> {
    /// Create a handle on `group` (`epc_handle_create`): allocate its device state and, with
    /// `routing`, take it as [`update`](Handle::update) does.
    ///
    /// - `config`: the receive layout and sizing; None: the defaults ([`HandleConfig`]).
    /// - `routing`: None: none yet. Create every handle before CUDA graph capture without
    ///   routing (a local call), then route them inside the capture.
    /// - `stream`: orders the routing copy and, on high-throughput groups, the layout
    ///   exchange; None: the legacy default stream.
    ///
    /// Local without routing or on low-latency groups; collective over the group on
    /// high-throughput groups with routing. Stream-ordered (blocking on high-throughput
    /// groups with [`Sizing::EXACT`] and routing); not graph-capturable (it allocates). A
    /// layout, sizing or capacity the library cannot serve: [`Status::UNSUPPORTED`].
    pub fn create(
        group: &'g Group<'_>,
        config: Option<&HandleConfig>,
        routing: Option<&Routing<'_>>,
        stream: Option<StreamRef<'_>>,
    ) -> Result<Self> {
        let api = library()?;
        let create = entry!(api, handle_create);
        let calls = group.calls();
        let routing = routing.map(Routing::to_raw);
        let mut raw = std::ptr::null_mut();
        let status = {
            let _serialised = lock(calls);
            // SAFETY: the group is live for 'g; config and routing are read during the call
            // (routing's tensors are valid by their constructors' contracts); the stream is
            // valid by StreamRef's; raw is a valid out-parameter.
            unsafe {
                create(
                    group.as_raw(),
                    config.map_or(std::ptr::null(), |c| c.as_raw()),
                    routing.as_ref().map_or(std::ptr::null(), |r| r as *const sys::EpcRouting),
                    stream_raw(stream),
                    &mut raw,
                )
            }
        };
        check(api, status)?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(Status::INTERNAL, "epc_handle_create succeeded but returned no handle")
        })?;
        Ok(Handle { raw, calls })
    }

    /// Replace the routing for the next step (`epc_handle_update`); on high-throughput
    /// groups also compute where every token lands and exchange the counts. B may change; K
    /// may not after the first routing. No step may be pending on the handle
    /// ([`Status::INVALID_USAGE`]).
    ///
    /// Local on low-latency groups, collective over the group on high-throughput groups.
    /// Stream-ordered (blocking with [`Sizing::EXACT`], whose rows may then change).
    /// Graph-capturable with [`Sizing::CAPACITY`].
    pub fn update(&self, routing: &Routing<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        let routing = routing.to_raw();
        self.call(|api, handle| {
            let update = entry!(api, handle_update);
            // SAFETY: the handle is live; routing is read during the call; the stream is
            // valid by its contract.
            Ok(unsafe { update(handle, &routing, stream_raw(stream)) })
        })
    }

    /// Describe the handle (`epc_handle_query`): layout, capacity and rows after defaults,
    /// what is pending, and the last dispatch's overflow. Local; host-only.
    pub fn query(&self) -> Result<HandleInfo> {
        let mut raw = sys::EpcHandleInfo {
            struct_size: std::mem::size_of::<sys::EpcHandleInfo>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            ..Default::default()
        };
        self.call(|api, handle| {
            let query = entry!(api, handle_query);
            // SAFETY: the handle is live; raw is a valid out-parameter sized by struct_size.
            Ok(unsafe { query(handle, &mut raw) })
        })?;
        Ok(HandleInfo::from_raw(&raw))
    }

    /// Send each of this rank's tokens once to every rank hosting one of its unmasked
    /// entries, and receive this rank's rows in the handle's layout (`epc_dispatch`); the
    /// tensors and options are in `args`. The handle must be routed and have no step
    /// pending ([`Status::INVALID_USAGE`] otherwise). On high-throughput groups the gradient
    /// of a [`combine`](Handle::combine) is this call with the combine's output gradient as
    /// `x`.
    ///
    /// Collective over the group's ranks; stream-ordered; graph-capturable. The tensors must
    /// stay valid until the stream has passed the call (after a send-only call: its
    /// [`complete`](Handle::complete)).
    pub fn dispatch(&self, args: &Dispatch<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        let raw = args.to_raw();
        self.call(|api, handle| {
            let dispatch = entry!(api, dispatch);
            // SAFETY: the handle is live; raw's tensors point into `args`, which outlives the
            // call, and are valid by their constructors' contracts; absent ones are NULL.
            Ok(unsafe { dispatch(handle, &raw, stream_raw(stream)) })
        })
    }

    /// Return the expert outputs to their tokens' ranks and reduce them there
    /// (`epc_combine`): on the expert's rank one token's rows are weighted (see
    /// [`Weighting`](crate::Weighting)) and summed in FP32 in top-k order into one partial,
    /// rounded once to BF16; on the token's rank the partials are summed in FP32 over ranks
    /// in ascending order and rounded once to `out`'s dtype. Tokens sent nowhere get zeros.
    /// On high-throughput groups this is also the backward of dispatch.
    ///
    /// Collective; stream-ordered; graph-capturable; tensor lifetimes as for
    /// [`dispatch`](Handle::dispatch).
    pub fn combine(&self, args: &Combine<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        let raw = args.to_raw();
        self.call(|api, handle| {
            let combine = entry!(api, combine);
            // SAFETY: as in dispatch.
            Ok(unsafe { combine(handle, &raw, stream_raw(stream)) })
        })
    }

    /// Finish the handle's pending send-only call (`epc_complete`): wait on the device for
    /// every peer and write the outputs its call named. `stream` must be ordered after the
    /// send-only call. With nothing pending: [`Status::INVALID_USAGE`].
    ///
    /// Collective; stream-ordered; graph-capturable.
    pub fn complete(&self, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.call(|api, handle| {
            let complete = entry!(api, complete);
            // SAFETY: the handle is live; flags are reserved (0); the stream is valid by its
            // contract.
            Ok(unsafe { complete(handle, 0, stream_raw(stream)) })
        })
    }

    /// Free the handle's device memory once the work queued on the device has finished
    /// (`epc_handle_destroy`) and report the result. A pending step gives up its slot.
    /// Local; blocking.
    pub fn close(self) -> Result<()> {
        let handle = ManuallyDrop::new(self);
        handle.destroy()
    }

    /// The `EpcHandle*`, borrowed, for calling epcomm-sys directly.
    pub fn as_raw(&self) -> *mut sys::EpcHandle {
        self.raw.as_ptr()
    }

    /// One call on the handle under the group's lock: `call` gets the table and the handle
    /// and returns the status of the function it called.
    fn call(
        &self,
        call: impl FnOnce(&sys::EpcApi, *mut sys::EpcHandle) -> Result<sys::EpcStatus>,
    ) -> Result<()> {
        let api = library()?;
        let status = {
            let _serialised = lock(self.calls);
            call(api, self.raw.as_ptr())?
        };
        check(api, status)
    }

    fn destroy(&self) -> Result<()> {
        self.call(|api, handle| {
            let destroy = entry!(api, handle_destroy);
            // SAFETY: the handle is live and destroyed exactly once (close forgets self; drop
            // runs only when close did not).
            Ok(unsafe { destroy(handle) })
        })
    }

    #[cfg(test)]
    pub(crate) fn wrap_for_test(raw: NonNull<sys::EpcHandle>, calls: &'g Mutex<()>) -> Self {
        Handle { raw, calls }
    }
}

impl Drop for Handle<'_> {
    /// Destroys a handle that was not closed, ignoring the result (see the type's docs).
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

impl std::fmt::Debug for Handle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("raw", &self.raw).finish()
    }
}

/// A stream for the C ABI: None is the legacy default stream (NULL).
pub(crate) fn stream_raw(stream: Option<StreamRef<'_>>) -> *mut std::ffi::c_void {
    stream.unwrap_or(StreamRef::LEGACY_DEFAULT).as_raw()
}

#[cfg(test)]
#[path = "handle_tests.rs"]
mod tests;
