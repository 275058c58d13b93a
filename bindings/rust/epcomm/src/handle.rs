//! [`Handle`]: the routing of one batch on a low-latency group, and the calls that use it:
//! dispatch, combine and complete.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Mutex;

use epcomm_sys as sys;

use crate::group::lock;
use crate::library::{check, entry, library};
use crate::{Error, Flags, Group, Result, Status, StreamRef, TensorRef};

/// One batch's routing on a group (`EpcHandle*`), and the device state a low-latency step
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
    raw: NonNull<sys::EpcHandle>,
    /// The group's call lock; borrowing it keeps the group borrowed for `'g`.
    calls: &'g Mutex<()>,
}

// SAFETY: the C handle may be used from any thread as long as calls on it, and on its group,
// do not overlap: `Handle` is not Sync, so only its owner calls it, and every call takes the
// group's lock, which is all it shares with the group's thread.
unsafe impl Send for Handle<'_> {}

impl<'g> Handle<'g> {
    /// Create a handle on `group` for the routing `topk_idx` (`epc_handle_create`).
    ///
    /// `topk_idx`: `[B, K]`, INT64 or INT32, contiguous, on the group's device; `-1` masks an
    /// entry; `B <= max_tokens_per_rank`, `K <= max_topk`. The routing is copied on `stream`
    /// (None: the legacy default stream), so `topk_idx` may be reused once that stream has
    /// passed this point. Allocates device memory.
    ///
    /// Local (no communication); stream-ordered; not graph-capturable.
    pub fn create(
        group: &'g Group<'_>,
        topk_idx: TensorRef<'_>,
        stream: Option<StreamRef<'_>>,
    ) -> Result<Self> {
        let api = library()?;
        let create = entry!(api, handle_create);
        let calls = group.calls();
        let mut raw = std::ptr::null_mut();
        let status = {
            let _serialised = lock(calls);
            // SAFETY: the group is live for 'g; the tensor and stream are valid by their
            // constructors' contracts; raw is a valid out-parameter.
            unsafe { create(group.as_raw(), topk_idx.as_raw(), stream_raw(stream), &mut raw) }
        };
        check(api, status)?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(Status::INTERNAL, "epc_handle_create succeeded but returned no handle")
        })?;
        Ok(Handle { raw, calls })
    }

    /// Replace the routing with `topk_idx` for the next step (`epc_handle_update`): same rules
    /// as [`create`](Handle::create); `B` may change, `K` may not. Call it after the
    /// previous step's combine. No allocation and no host synchronisation (graph-capturable).
    ///
    /// Local; stream-ordered.
    pub fn update(&self, topk_idx: TensorRef<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        let api = library()?;
        let update = entry!(api, handle_update);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live; the tensor and stream are valid by their contracts.
        let status = unsafe { update(self.raw.as_ptr(), topk_idx.as_raw(), stream_raw(stream)) };
        check(api, status)
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
        let api = library()?;
        let dispatch = entry!(api, ll_dispatch);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live; tensors and stream are valid by their contracts.
        let status = unsafe {
            dispatch(
                self.raw.as_ptr(),
                x.as_raw(),
                topk_weights.as_raw(),
                out_x.as_raw(),
                out_counts.as_raw(),
                flags.bits(),
                stream_raw(stream),
            )
        };
        check(api, status)
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
        let api = library()?;
        let dispatch = entry!(api, ll_dispatch_fp8);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live; tensors and stream are valid by their contracts.
        let status = unsafe {
            dispatch(
                self.raw.as_ptr(),
                x.as_raw(),
                topk_weights.as_raw(),
                out_x.as_raw(),
                out_scales.as_raw(),
                out_counts.as_raw(),
                flags.bits(),
                stream_raw(stream),
            )
        };
        check(api, status)
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
        let api = library()?;
        let combine = entry!(api, ll_combine);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live; tensors and stream are valid by their contracts.
        let status = unsafe {
            combine(self.raw.as_ptr(), expert_out.as_raw(), out.as_raw(), flags.bits(), stream_raw(stream))
        };
        check(api, status)
    }

    /// Finish the step whose dispatch or combine was queued with [`Flags::SEND_ONLY`]
    /// (`epc_complete`): wait on the device for every peer's data and write that call's
    /// outputs. Collective; stream-ordered; graph-capturable.
    pub fn complete(&self, stream: Option<StreamRef<'_>>) -> Result<()> {
        let api = library()?;
        let complete = entry!(api, complete);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live; the stream is valid by its contract.
        check(api, unsafe { complete(self.raw.as_ptr(), stream_raw(stream)) })
    }

    /// Free the handle's device memory once the work queued on it has finished
    /// (`epc_handle_destroy`) and report the result. Local; blocking.
    pub fn close(self) -> Result<()> {
        let handle = ManuallyDrop::new(self);
        handle.destroy()
    }

    /// The `EpcHandle*`, borrowed, for calling epcomm-sys directly.
    pub fn as_raw(&self) -> *mut sys::EpcHandle {
        self.raw.as_ptr()
    }

    fn destroy(&self) -> Result<()> {
        let api = library()?;
        let destroy = entry!(api, handle_destroy);
        let _serialised = lock(self.calls);
        // SAFETY: the handle is live and destroyed exactly once (close forgets self; drop
        // runs only when close did not).
        check(api, unsafe { destroy(self.raw.as_ptr()) })
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

fn stream_raw(stream: Option<StreamRef<'_>>) -> *mut std::ffi::c_void {
    stream.unwrap_or(StreamRef::LEGACY_DEFAULT).as_raw()
}

#[cfg(test)]
#[path = "handle_tests.rs"]
mod tests;
