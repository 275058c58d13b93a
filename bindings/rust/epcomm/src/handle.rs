// SPDX-License-Identifier: Apache-2.0
//! [`Handle`]: the routing of one batch on a low-latency group, and the calls that use it:
//! dispatch, combine and complete. [`RawHandle`] is what it shares with
//! [`HtHandle`](crate::HtHandle): the C handle, its group's call lock, and destruction.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Mutex;

use epcomm_sys as sys;

use crate::group::lock;
use crate::library::{check, entry, library};
use crate::{Error, Flags, Group, Result, Status, StreamRef, TensorRef};

/// An `EpcHandle*` of either mode and the call lock of the group it borrows for `'g`. Every
/// call on it takes that lock; dropping it destroys the C handle, ignoring the result.
pub(crate) struct RawHandle<'g> {
    raw: NonNull<sys::EpcHandle>,
    /// The group's call lock; borrowing it keeps the group borrowed for `'g`.
    calls: &'g Mutex<()>,
}

// SAFETY: the C handle may be used from any thread as long as calls on it, and on its group,
// do not overlap: the wrappers are not Sync, so only their owner calls them, and every call
// takes the group's lock, which is all a handle shares with the group's thread.
unsafe impl Send for RawHandle<'_> {}

impl<'g> RawHandle<'g> {
    /// Create a C handle on `group` under its lock: `create` gets the table, the group and
    /// the out-parameter, and returns the status of the `function` it called.
    pub(crate) fn create(
        group: &'g Group<'_>,
        function: &str,
        create: impl FnOnce(&sys::EpcApi, *mut sys::EpcGroup, &mut *mut sys::EpcHandle) -> Result<sys::EpcStatus>,
    ) -> Result<Self> {
        let api = library()?;
        let calls = group.calls();
        let mut raw = std::ptr::null_mut();
        let status = {
            let _serialised = lock(calls);
            create(api, group.as_raw(), &mut raw)?
        };
        check(api, status)?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(Status::INTERNAL, format!("{function} succeeded but returned no handle"))
        })?;
        Ok(RawHandle { raw, calls })
    }

    /// One call on the handle under the group's lock: `call` gets the table and the handle
    /// and returns the status of the function it called.
    pub(crate) fn call(
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

    /// `epc_handle_update`, which takes handles of both modes.
    pub(crate) fn update(&self, topk_idx: TensorRef<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.call(|api, handle| {
            let update = entry!(api, handle_update);
            // SAFETY: the handle is live; the tensor and stream are valid by their contracts.
            Ok(unsafe { update(handle, topk_idx.as_raw(), stream_raw(stream)) })
        })
    }

    /// Destroy the C handle and report the result.
    pub(crate) fn close(self) -> Result<()> {
        let handle = ManuallyDrop::new(self);
        handle.destroy()
    }

    pub(crate) fn as_raw(&self) -> *mut sys::EpcHandle {
        self.raw.as_ptr()
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
        RawHandle { raw, calls }
    }
}

impl Drop for RawHandle<'_> {
    /// Destroys a handle that was not closed, ignoring the result (see [`Handle`]'s docs).
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

impl std::fmt::Debug for RawHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

/// One batch's routing on a low-latency group (`EpcHandle*`), and the device state a step
/// needs. It borrows its [`Group`] for `'g`, so the group cannot be closed while the handle
/// exists.
///
/// Thread-safety: `Send` (a handle may be used on another thread than its group) but not
/// `Sync` (no two calls on one handle at once). Calls on a handle and on the other handles
/// and the barrier of its group are serialised by a lock inside the group, because the
/// library keeps per-group step state they all update. Serialising makes them safe, not
/// meaningful: dispatch and combine are collective, and every rank must queue the same
/// steps in the same order, so drive one group's steps from one thread.
///
/// Close it with [`close`](Handle::close) to see errors; dropping it destroys it too, but
/// ignores the result and never panics. Destroying is local and waits for the work queued
/// on the handle.
pub struct Handle<'g> {
    inner: RawHandle<'g>,
}

impl<'g> Handle<'g> {
    /// Create a handle on `group` for the routing `topk_idx` (`epc_handle_create`).
    ///
    /// `topk_idx`: `[B, K]`, INT64 or INT32, contiguous, on the group's device; `-1` masks an
    /// entry; `B <= max_tokens_per_rank`, `K <= max_topk`. The routing is copied on `stream`
    /// (None: the legacy default stream), so `topk_idx` may be reused once that stream has
    /// passed this point. Allocates device memory. A high-throughput group refuses it: its
    /// handles are [`HtHandle`](crate::HtHandle)s.
    ///
    /// Local (no communication); stream-ordered; not graph-capturable.
    pub fn create(
        group: &'g Group<'_>,
        topk_idx: TensorRef<'_>,
        stream: Option<StreamRef<'_>>,
    ) -> Result<Self> {
        let inner = RawHandle::create(group, "epc_handle_create", |api, group, out| {
            let create = entry!(api, handle_create);
            // SAFETY: the group is live for 'g; the tensor and stream are valid by their
            // constructors' contracts; out is a valid out-parameter.
            Ok(unsafe { create(group, topk_idx.as_raw(), stream_raw(stream), out) })
        })?;
        Ok(Handle { inner })
    }

    /// Replace the routing with `topk_idx` for the next step (`epc_handle_update`): same rules
    /// as [`create`](Handle::create); `B` may change, `K` may not. Call it after the
    /// previous step's combine. No allocation and no host synchronisation (graph-capturable).
    ///
    /// Local; stream-ordered.
    pub fn update(&self, topk_idx: TensorRef<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.inner.update(topk_idx, stream)
    }

    /// Send this rank's tokens to the ranks hosting their experts and receive this rank's
    /// share expert-major (`epc_ll_dispatch`).
    ///
    /// - `x`: `[B, H]` in the group's 16-bit dtype (B = the routing's; with B = 0 a null data
    ///   pointer is fine);
    /// - `topk_weights`: `[B, K]` FP32;
    /// - `out_x`: `[L, R*T, H]`, same dtype as `x`: the rows each local expert received,
    ///   ordered by (source rank, source token, top-k slot);
    /// - `out_counts`: `[L]` INT32: rows per local expert.
    ///
    /// With [`Flags::SEND_ONLY`] only the send is queued, and [`complete`](Handle::complete)
    /// must follow on the same stream, before any other dispatch or combine of the group,
    /// to write the outputs.
    ///
    /// Collective over the group's ranks (every rank dispatches each step); stream-ordered;
    /// graph-capturable. The tensors must stay valid until the stream has passed the call
    /// (or its completion).
    pub fn ll_dispatch(
        &self,
        x: TensorRef<'_>,
        topk_weights: TensorRef<'_>,
        out_x: TensorRef<'_>,
        out_counts: TensorRef<'_>,
        flags: Flags,
        stream: Option<StreamRef<'_>>,
    ) -> Result<()> {
        self.inner.call(|api, handle| {
            let dispatch = entry!(api, ll_dispatch);
            // SAFETY: the handle is live; tensors and stream are valid by their contracts.
            Ok(unsafe {
                dispatch(
                    handle,
                    x.as_raw(),
                    topk_weights.as_raw(),
                    out_x.as_raw(),
                    out_counts.as_raw(),
                    flags.bits(),
                    stream_raw(stream),
                )
            })
        })
    }

    /// [`ll_dispatch`](Handle::ll_dispatch) with the payload cast to FP8 in the send kernel
    /// (`epc_ll_dispatch_fp8`, ABI 1.1): each token row travels as e4m3 bytes with one FP32
    /// scale per 128 channels, scale = max(amax, 1e-4) / 448 (with
    /// [`Flags::FP8_POW2_SCALES`] rounded up to a power of two), e4m3 = saturate(x / scale).
    ///
    /// - `x`: `[B, H]` BF16 or FP16, `H % 128 == 0`;
    /// - `topk_weights`: `[B, K]` FP32;
    /// - `out_x`: `[L, R*T, H]` FP8_E4M3: the rows each local expert received, in the same
    ///   order as [`ll_dispatch`](Handle::ll_dispatch);
    /// - `out_scales`: `[L, R*T, H/128]` FP32: each received row's scales;
    /// - `out_counts`: `[L]` INT32: rows per local expert.
    ///
    /// Works on groups of any dtype (on an FP8_E4M3 group it is the only dispatch); combine
    /// on the handle takes BF16 expert outputs as usual. Flags ([`Flags::SEND_ONLY`] too),
    /// completion, collectiveness and stream rules as for [`ll_dispatch`](Handle::ll_dispatch).
    /// A library older than ABI 1.1 lacks the call: [`Status::UNSUPPORTED`], nothing called.
    #[allow(clippy::too_many_arguments)]
    pub fn ll_dispatch_fp8(
        &self,
        x: TensorRef<'_>,
        topk_weights: TensorRef<'_>,
        out_x: TensorRef<'_>,
        out_scales: TensorRef<'_>,
        out_counts: TensorRef<'_>,
        flags: Flags,
        stream: Option<StreamRef<'_>>,
    ) -> Result<()> {
        self.inner.call(|api, handle| {
            let dispatch = entry!(api, ll_dispatch_fp8);
            // SAFETY: the handle is live; tensors and stream are valid by their contracts.
            Ok(unsafe {
                dispatch(
                    handle,
                    x.as_raw(),
                    topk_weights.as_raw(),
                    out_x.as_raw(),
                    out_scales.as_raw(),
                    out_counts.as_raw(),
                    flags.bits(),
                    stream_raw(stream),
                )
            })
        })
    }

    /// Return the expert outputs to their tokens' ranks and reduce them (`epc_ll_combine`).
    ///
    /// - `expert_out`: `[L, R*T, H]` BF16, in the layout this handle's dispatch produced;
    /// - `out`: `[B, H]` BF16: per token, the sum over the ranks hosting its unmasked entries
    ///   (ascending) of that rank's partial (its entries' weighted sum in top-k order, in
    ///   FP32, sent as BF16), in FP32, rounded to BF16. Fully masked tokens get zeros.
    ///
    /// `expert_out` must not overlap `out`. Flags, collectiveness and stream rules as for
    /// [`ll_dispatch`](Handle::ll_dispatch).
    pub fn ll_combine(
        &self,
        expert_out: TensorRef<'_>,
        out: TensorRef<'_>,
        flags: Flags,
        stream: Option<StreamRef<'_>>,
    ) -> Result<()> {
        self.inner.call(|api, handle| {
            let combine = entry!(api, ll_combine);
            // SAFETY: the handle is live; tensors and stream are valid by their contracts.
            Ok(unsafe {
                combine(handle, expert_out.as_raw(), out.as_raw(), flags.bits(), stream_raw(stream))
            })
        })
    }

    /// Finish the step whose dispatch or combine was queued with [`Flags::SEND_ONLY`]
    /// (`epc_complete`): wait on the device for every peer's data and write that call's
    /// outputs. Collective; stream-ordered; graph-capturable.
    pub fn complete(&self, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.inner.call(|api, handle| {
            let complete = entry!(api, complete);
            // SAFETY: the handle is live; the stream is valid by its contract.
            Ok(unsafe { complete(handle, stream_raw(stream)) })
        })
    }

    /// Free the handle's device memory once the work queued on it has finished
    /// (`epc_handle_destroy`) and report the result. Local; blocking.
    pub fn close(self) -> Result<()> {
        self.inner.close()
    }

    /// The `EpcHandle*`, borrowed, for calling epcomm-sys directly.
    pub fn as_raw(&self) -> *mut sys::EpcHandle {
        self.inner.as_raw()
    }

    #[cfg(test)]
    pub(crate) fn wrap_for_test(raw: NonNull<sys::EpcHandle>, calls: &'g Mutex<()>) -> Self {
        Handle { inner: RawHandle::wrap_for_test(raw, calls) }
    }
}

impl std::fmt::Debug for Handle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("raw", &self.inner).finish()
    }
}

/// A stream for the C ABI: None is the legacy default stream (NULL).
pub(crate) fn stream_raw(stream: Option<StreamRef<'_>>) -> *mut std::ffi::c_void {
    stream.unwrap_or(StreamRef::LEGACY_DEFAULT).as_raw()
}

#[cfg(test)]
#[path = "handle_tests.rs"]
mod tests;
