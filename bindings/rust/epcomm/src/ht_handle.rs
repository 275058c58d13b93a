// SPDX-License-Identifier: Apache-2.0
//! [`HtHandle`]: the routing and layout of one batch on a high-throughput group (ABI 1.2),
//! and the calls that use it: [`HtHandle::dispatch`] (arguments in an [`HtDispatch`]) and
//! [`HtHandle::combine`], forward and backward.

use epcomm_sys as sys;

use crate::handle::{stream_raw, RawHandle};
use crate::library::entry;
use crate::{Flags, Group, HtSizing, Result, StreamRef, TensorRef};

/// One batch's routing on a high-throughput group (`EpcHandle*` from `epc_ht_handle_create`)
/// and its layout: which tokens go to which rank, and at which of the [`rows`](HtHandle::rows)
/// they land there. Every dispatch and combine on it, forward and backward, reuses that
/// layout. It borrows its [`Group`] for `'g`, so the group cannot be closed while the handle
/// exists.
///
/// Thread-safety, closing and dropping as for [`Handle`](crate::Handle): `Send`, not `Sync`;
/// calls serialised with the group's other calls by a lock inside the group; dropping an
/// unclosed handle destroys it and ignores the result.
pub struct HtHandle<'g> {
    inner: RawHandle<'g>,
    rows: i64,
    sizing: HtSizing,
}

/// The tensors of one [`HtHandle::dispatch`] (`epc_ht_dispatch`), built from the two it
/// always needs; the optional ones come in the pairs the library requires together. Shapes
/// (`B` the routing's tokens, `H` hidden, `K` top-k, `L` local experts, `rows` the handle's
/// [`rows`](HtHandle::rows)):
///
/// - `x`: `[B, H]` in the group's 16-bit dtype (BF16 or FP16), or FP8_E4M3 with
///   [`fp8_scales`](HtDispatch::fp8_scales);
/// - `out_x`: `[rows, H]`, `x`'s dtype: the received tokens, ordered by (source rank, source
///   token); rows at or past N are unspecified with [`HtSizing::CAPACITY`].
#[derive(Clone, Copy, Debug)]
pub struct HtDispatch<'t> {
    x: TensorRef<'t>,
    x_scales: Option<TensorRef<'t>>,
    topk_weights: Option<TensorRef<'t>>,
    out_x: TensorRef<'t>,
    out_scales: Option<TensorRef<'t>>,
    out_topk_idx: Option<TensorRef<'t>>,
    out_topk_weights: Option<TensorRef<'t>>,
    out_expert_counts: Option<TensorRef<'t>>,
    out_num_recv: Option<TensorRef<'t>>,
    flags: Flags,
}

impl<'t> HtDispatch<'t> {
    /// Send `x` and receive into `out_x`, nothing else.
    pub fn new(x: TensorRef<'t>, out_x: TensorRef<'t>) -> Self {
        HtDispatch {
            x,
            x_scales: None,
            topk_weights: None,
            out_x,
            out_scales: None,
            out_topk_idx: None,
            out_topk_weights: None,
            out_expert_counts: None,
            out_num_recv: None,
            flags: Flags::NONE,
        }
    }

    /// For FP8_E4M3 `x` (quantized by the caller, `H % 128 == 0`): its scales `[B, H/128]`
    /// FP32, copied unchanged into `out_scales` `[rows, H/128]` FP32.
    pub fn fp8_scales(mut self, x_scales: TensorRef<'t>, out_scales: TensorRef<'t>) -> Self {
        self.x_scales = Some(x_scales);
        self.out_scales = Some(out_scales);
        self
    }

    /// Carry `topk_weights` `[B, K]` FP32 into `out_topk_weights` `[rows, K]` FP32: the
    /// weight of entry k where its expert lives on the receiving rank, else 0.
    pub fn weights(mut self, topk_weights: TensorRef<'t>, out_topk_weights: TensorRef<'t>) -> Self {
        self.topk_weights = Some(topk_weights);
        self.out_topk_weights = Some(out_topk_weights);
        self
    }

    /// Write `[rows, K]` INT32: the local expert id of entry k where that expert lives on the
    /// receiving rank, else -1.
    pub fn out_topk_idx(mut self, out_topk_idx: TensorRef<'t>) -> Self {
        self.out_topk_idx = Some(out_topk_idx);
        self
    }

    /// Write `[L]` INT32: the received (token, entry) pairs per local expert (an expert a
    /// token chose twice counts twice).
    pub fn out_expert_counts(mut self, out_expert_counts: TensorRef<'t>) -> Self {
        self.out_expert_counts = Some(out_expert_counts);
        self
    }

    /// Write `[1]` INT32: N, the tokens this rank received (with [`HtSizing::CAPACITY`] the
    /// only place N is known, on the device).
    pub fn out_num_recv(mut self, out_num_recv: TensorRef<'t>) -> Self {
        self.out_num_recv = Some(out_num_recv);
        self
    }

    /// Pass `flags` (none are defined for dispatch yet: the library refuses any bit).
    pub fn flags(mut self, flags: Flags) -> Self {
        self.flags = flags;
        self
    }
}

impl<'g> HtHandle<'g> {
    /// Create a handle on the high-throughput `group` for the routing `topk_idx`
    /// (`epc_ht_handle_create`, ABI 1.2): copy it, compute on the GPU which tokens go to
    /// which rank and where they land there, and exchange those counts with every rank.
    ///
    /// `topk_idx`: `[B, K]`, INT64 or INT32, contiguous, on the group's device; `-1` masks an
    /// entry; `B <= max_tokens_per_rank`, `K <= max_topk`. `sizing` decides
    /// [`rows`](HtHandle::rows): with [`HtSizing::EXACT`] this call synchronises `stream`
    /// (None: the legacy default stream) once to learn N; with [`HtSizing::CAPACITY`] it does
    /// not. A low-latency group refuses it: its handles are [`Handle`](crate::Handle)s.
    ///
    /// Collective over the group's ranks; stream-ordered (blocking with EXACT sizing); not
    /// graph-capturable (it allocates). A library older than ABI 1.2 has no such entry:
    /// [`Status::UNSUPPORTED`](crate::Status::UNSUPPORTED), nothing called.
    pub fn create(
        group: &'g Group<'_>,
        topk_idx: TensorRef<'_>,
        sizing: HtSizing,
        stream: Option<StreamRef<'_>>,
    ) -> Result<Self> {
        let mut rows = 0i64;
        let inner = RawHandle::create(group, "epc_ht_handle_create", |api, group, out| {
            let create = entry!(api, ht_handle_create);
            // SAFETY: the group is live for 'g; the tensor and stream are valid by their
            // constructors' contracts; out and rows are valid out-parameters.
            Ok(unsafe { create(group, topk_idx.as_raw(), sizing.raw(), stream_raw(stream), out, &mut rows) })
        })?;
        Ok(HtHandle { inner, rows, sizing })
    }

    /// The row count of every `[rows, ...]` tensor the handle's calls take: N (the tokens
    /// this rank receives) with [`HtSizing::EXACT`], `nranks * max_tokens_per_rank` with
    /// [`HtSizing::CAPACITY`].
    pub fn rows(&self) -> i64 {
        self.rows
    }

    /// How the handle was created.
    pub fn sizing(&self) -> HtSizing {
        self.sizing
    }

    /// Replace the routing with `topk_idx` and recompute the layout (`epc_handle_update`):
    /// same rules as [`create`](HtHandle::create), `B` may change, `K` may not. Only
    /// [`HtSizing::CAPACITY`] handles accept it (an EXACT handle's row count would change:
    /// create a new handle instead). No allocation and no host synchronisation
    /// (graph-capturable).
    ///
    /// Collective (the layout is exchanged); stream-ordered.
    pub fn update(&self, topk_idx: TensorRef<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.inner.update(topk_idx, stream)
    }

    /// Send each of this rank's tokens once to every rank hosting one of its unmasked
    /// entries, and receive this rank's N tokens (`epc_ht_dispatch`); the tensors are in
    /// `args`. The gradient of a [`combine`](HtHandle::combine) is this call with the
    /// combine's output gradient as `x`.
    ///
    /// Collective over the group's ranks; stream-ordered; graph-capturable. The tensors must
    /// stay valid until the stream has passed the call.
    pub fn dispatch(&self, args: HtDispatch<'_>, stream: Option<StreamRef<'_>>) -> Result<()> {
        self.inner.call(|api, handle| {
            let dispatch = entry!(api, ht_dispatch);
            // SAFETY: the handle is live; tensors and stream are valid by their contracts;
            // absent optional tensors are NULL, which the library accepts.
            Ok(unsafe {
                dispatch(
                    handle,
                    args.x.as_raw(),
                    optional(&args.x_scales),
                    optional(&args.topk_weights),
                    args.out_x.as_raw(),
                    optional(&args.out_scales),
                    optional(&args.out_topk_idx),
                    optional(&args.out_topk_weights),
                    optional(&args.out_expert_counts),
                    optional(&args.out_num_recv),
                    args.flags.bits(),
                    stream_raw(stream),
                )
            })
        })
    }

    /// Return the rows to their tokens' ranks and sum them there (`epc_ht_combine`).
    ///
    /// - `x`: `[rows, H]` BF16, in dispatch's row order (the caller has already weighted and
    ///   summed its local experts' outputs);
    /// - `out`: `[B, H]` BF16: per token, the FP32 sum over the ranks that received it, in
    ///   ascending rank order, rounded once. Tokens sent nowhere get zeros.
    /// - with [`Flags::BACKWARD_WEIGHTS`] also `topk_weights` `[rows, K]` FP32 into
    ///   `out_topk_weights` `[B, K]` FP32: entry k of a token takes the value the rank
    ///   hosting entry k's expert holds for it (0 where masked); without the flag both must
    ///   be None.
    ///
    /// `x` must not overlap `out`. The gradient of a [`dispatch`](HtHandle::dispatch) is this
    /// call with the row gradients as `x`. Collective; stream-ordered; graph-capturable.
    pub fn combine(
        &self,
        x: TensorRef<'_>,
        topk_weights: Option<TensorRef<'_>>,
        out: TensorRef<'_>,
        out_topk_weights: Option<TensorRef<'_>>,
        flags: Flags,
        stream: Option<StreamRef<'_>>,
    ) -> Result<()> {
        self.inner.call(|api, handle| {
            let combine = entry!(api, ht_combine);
            // SAFETY: as in dispatch.
            Ok(unsafe {
                combine(
                    handle,
                    x.as_raw(),
                    optional(&topk_weights),
                    out.as_raw(),
                    optional(&out_topk_weights),
                    flags.bits(),
                    stream_raw(stream),
                )
            })
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
    pub(crate) fn wrap_for_test(inner: RawHandle<'g>, rows: i64, sizing: HtSizing) -> Self {
        HtHandle { inner, rows, sizing }
    }
}

impl std::fmt::Debug for HtHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HtHandle")
            .field("raw", &self.inner)
            .field("rows", &self.rows)
            .field("sizing", &self.sizing)
            .finish()
    }
}

/// An optional tensor for the C ABI: its descriptor, or NULL.
fn optional(tensor: &Option<TensorRef<'_>>) -> *const sys::EpcTensor {
    tensor.as_ref().map_or(std::ptr::null(), |t| t.as_raw())
}
