// SPDX-License-Identifier: Apache-2.0
//! The arguments of the handle's calls, built with chained setters: [`Routing`] for
//! create and update, [`Dispatch`] and [`Combine`] for the steps. Each setter fills one
//! field of the C struct (`EpcRouting`, `EpcDispatchArgs`, `EpcCombineArgs`); a tensor
//! left unset is NULL, "absent", and every other field left alone is 0, "default".

use epcomm_sys as sys;

use crate::{CombineFlags, DispatchFlags, Quant, ScaleLayout, TensorRef, Weighting};

/// An optional tensor for the C ABI: its descriptor, or NULL.
fn optional(tensor: &Option<TensorRef<'_>>) -> *const sys::EpcTensor {
    tensor.as_ref().map_or(std::ptr::null(), |t| t.as_raw())
}

/// One batch's routing (`EpcRouting`), for [`Handle::create`](crate::Handle::create) and
/// [`Handle::update`](crate::Handle::update).
#[derive(Clone, Copy, Debug)]
pub struct Routing<'t> {
    topk_idx: TensorRef<'t>,
    num_tokens: Option<TensorRef<'t>>,
}

impl<'t> Routing<'t> {
    /// `topk_idx`: `[B, K]` INT32 or INT64 expert ids on the group's device; -1 masks an
    /// entry; `B <= max_tokens_per_rank`, `K <= max_topk`. It is copied on the call's
    /// stream, so it may be reused once the stream has passed the call.
    pub fn new(topk_idx: TensorRef<'t>) -> Self {
        Routing { topk_idx, num_tokens: None }
    }

    /// `[1]` INT32 on the device: only the first n rows of `topk_idx` take part, so one
    /// graph captured at B serves every batch up to B (UNSUPPORTED in 2.0 to 2.2).
    pub fn num_tokens(mut self, num_tokens: TensorRef<'t>) -> Self {
        self.num_tokens = Some(num_tokens);
        self
    }

    /// The C struct; its tensor pointers point into `self`.
    pub fn to_raw(&self) -> sys::EpcRouting {
        sys::EpcRouting {
            struct_size: std::mem::size_of::<sys::EpcRouting>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            topk_idx: self.topk_idx.as_raw(),
            num_tokens: optional(&self.num_tokens),
        }
    }
}

/// The tensors and options of one [`Handle::dispatch`](crate::Handle::dispatch)
/// (`EpcDispatchArgs`), built from the two it always needs:
///
/// ```no_run
/// # use epcomm::{Dispatch, Quant, TensorRef};
/// # fn example(x: TensorRef<'_>, recv_x: TensorRef<'_>, scales: TensorRef<'_>, w: TensorRef<'_>, counts: TensorRef<'_>) {
/// let args = Dispatch::new(x, recv_x) // [B, H] bf16 -> [L, R*T, H] fp8
///     .quant(Quant::FP8)
///     .out_scales(scales) // [L, R*T, H/128] fp32
///     .topk_weights(w) // [B, K] fp32, used by combine
///     .out_expert_counts(counts) // [L] int32
///     .send_only(); // complete() writes the outputs
/// # let _ = args; }
/// ```
///
/// Shapes: `B` this rank's tokens, `H` hidden, `K` top-k, `L` local experts, `R` ranks;
/// the received tensors' shapes follow the handle's [`Layout`](crate::Layout).
#[derive(Clone, Copy, Debug)]
pub struct Dispatch<'t> {
    flags: DispatchFlags,
    quant: Quant,
    scale_block: u32,
    scale_layout: ScaleLayout,
    x: TensorRef<'t>,
    x_scales: Option<TensorRef<'t>>,
    x_global_scale: Option<TensorRef<'t>>,
    topk_weights: Option<TensorRef<'t>>,
    out_x: TensorRef<'t>,
    out_scales: Option<TensorRef<'t>>,
    out_topk_idx: Option<TensorRef<'t>>,
    out_topk_weights: Option<TensorRef<'t>>,
    out_expert_counts: Option<TensorRef<'t>>,
    out_expert_offsets: Option<TensorRef<'t>>,
    out_rank_counts: Option<TensorRef<'t>>,
    out_num_recv: Option<TensorRef<'t>>,
    out_expert_counts_host: Option<TensorRef<'t>>,
    acc_expert_counts: Option<TensorRef<'t>>,
    send_sms: u32,
    max_step_tokens: u32,
}

impl<'t> Dispatch<'t> {
    /// Send `x` (`[B, H]`; FP4_E2M1X2: `[B, H/2]`; B may be 0 with a null data pointer) and
    /// receive into `out_x` (`x`'s dtype, or FP8_E4M3 with [`Quant::FP8`]).
    pub fn new(x: TensorRef<'t>, out_x: TensorRef<'t>) -> Self {
        Dispatch {
            flags: DispatchFlags::NONE,
            quant: Quant::NONE,
            scale_block: 0,
            scale_layout: ScaleLayout::STRIDED,
            x,
            x_scales: None,
            x_global_scale: None,
            topk_weights: None,
            out_x,
            out_scales: None,
            out_topk_idx: None,
            out_topk_weights: None,
            out_expert_counts: None,
            out_expert_offsets: None,
            out_rank_counts: None,
            out_num_recv: None,
            out_expert_counts_host: None,
            acc_expert_counts: None,
            send_sms: 0,
            max_step_tokens: 0,
        }
    }

    /// Replace every flag bit (the named setters below each add one).
    pub fn flags(mut self, flags: DispatchFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Queue only the sending half; [`Handle::complete`](crate::Handle::complete) writes
    /// the outputs ([`DispatchFlags::SEND_ONLY`]).
    pub fn send_only(mut self) -> Self {
        self.flags |= DispatchFlags::SEND_ONLY;
        self
    }

    /// [`Quant::FP8`] into FP32 scales: round each scale up to a power of two
    /// ([`DispatchFlags::POW2_SCALES`]).
    pub fn pow2_scales(mut self) -> Self {
        self.flags |= DispatchFlags::POW2_SCALES;
        self
    }

    /// How the payload travels; default [`Quant::NONE`].
    pub fn quant(mut self, quant: Quant) -> Self {
        self.quant = quant;
        self
    }

    /// Channels per scale of the casts; 0: 128 (FP8), 16 (NVFP4).
    pub fn scale_block(mut self, channels: u32) -> Self {
        self.scale_block = channels;
        self
    }

    /// Where `out_scales`' elements lie; default [`ScaleLayout::STRIDED`].
    pub fn scale_layout(mut self, layout: ScaleLayout) -> Self {
        self.scale_layout = layout;
        self
    }

    /// [`Quant::PASSTHROUGH`]: `x`'s scales, `[B, S]`, copied into `out_scales`.
    pub fn x_scales(mut self, x_scales: TensorRef<'t>) -> Self {
        self.x_scales = Some(x_scales);
        self
    }

    /// [`Quant::NVFP4`], and (2.1) [`Quant::PASSTHROUGH`] of FP4_E2M1X2 `x`: `[1]` FP32, the
    /// same on every rank; checked, not sent.
    pub fn x_global_scale(mut self, scale: TensorRef<'t>) -> Self {
        self.x_global_scale = Some(scale);
        self
    }

    /// `[B, K]` FP32: required by [`out_topk_weights`](Dispatch::out_topk_weights), and by
    /// the expert layouts' default combine ([`Weighting::SENDER`](crate::Weighting::SENDER)
    /// weights the rows with it on low-latency EXPERT_PADDED and high-throughput
    /// EXPERT_PACKED handles); without it, combine with
    /// [`Weighting::HOME`](crate::Weighting::HOME) and
    /// [`Combine::home_topk_weights`] (low-latency since ABI 2.2). The other layouts'
    /// combine does not use it.
    pub fn topk_weights(mut self, topk_weights: TensorRef<'t>) -> Self {
        self.topk_weights = Some(topk_weights);
        self
    }

    /// Required with a cast or [`Quant::PASSTHROUGH`]: the received rows' scales.
    pub fn out_scales(mut self, out_scales: TensorRef<'t>) -> Self {
        self.out_scales = Some(out_scales);
        self
    }

    /// INT32: each received entry's expert id (local, or global with
    /// [`HandleFlags::GLOBAL_EXPERT_IDS`](crate::HandleFlags::GLOBAL_EXPERT_IDS)) where the
    /// expert is on this rank, else -1.
    pub fn out_topk_idx(mut self, out_topk_idx: TensorRef<'t>) -> Self {
        self.out_topk_idx = Some(out_topk_idx);
        self
    }

    /// FP32: each received entry's weight where its expert is on this rank, else 0.
    pub fn out_topk_weights(mut self, out_topk_weights: TensorRef<'t>) -> Self {
        self.out_topk_weights = Some(out_topk_weights);
        self
    }

    /// `[L]` INT32: rows written per local expert (FLAT: received (token, entry) pairs).
    pub fn out_expert_counts(mut self, counts: TensorRef<'t>) -> Self {
        self.out_expert_counts = Some(counts);
        self
    }

    /// `[L + 1]` INT32 or INT64: zone starts (EXPERT_PACKED).
    pub fn out_expert_offsets(mut self, offsets: TensorRef<'t>) -> Self {
        self.out_expert_offsets = Some(offsets);
        self
    }

    /// `[R]` INT32: tokens received per source rank (RANK_MAJOR).
    pub fn out_rank_counts(mut self, counts: TensorRef<'t>) -> Self {
        self.out_rank_counts = Some(counts);
        self
    }

    /// `[1]` INT32: rows that arrived, before any drop (FLAT, EXPERT_PACKED).
    pub fn out_num_recv(mut self, num_recv: TensorRef<'t>) -> Self {
        self.out_num_recv = Some(num_recv);
        self
    }

    /// `[L]` INT32 in pinned host memory: a copy of the per-expert counts, queued after the
    /// step; read it once the stream has passed it.
    pub fn out_expert_counts_host(mut self, counts: TensorRef<'t>) -> Self {
        self.out_expert_counts_host = Some(counts);
        self
    }

    /// `[L]` INT64: rows per local expert are added at every step (load-balancer
    /// statistics); the caller zeroes it.
    pub fn acc_expert_counts(mut self, counts: TensorRef<'t>) -> Self {
        self.acc_expert_counts = Some(counts);
        self
    }

    /// The SMs the sending launch may occupy (ABI 2.1): the send half's grid with
    /// [`send_only`](Dispatch::send_only), else the whole step's; 0 (the default): the
    /// group's `num_sms`; at most that and the GPU's SM count. Outputs do not depend on it;
    /// a 2.0 library refuses a non-zero value (`ABI_MISMATCH`).
    pub fn send_sms(mut self, sms: u32) -> Self {
        self.send_sms = sms;
        self
    }

    /// The most tokens any rank of the group dispatches in this step (ABI 2.2), the same
    /// on every rank: every rank's B at most this; 0 (the default): `max_tokens_per_rank`.
    /// A bound of few tokens lets a low-latency group of one node move the step as line
    /// records; outputs do not depend on it. Above `max_tokens_per_rank` or below this
    /// rank's B: `INVALID_ARGUMENT`; ranks that pass different values time out and fail
    /// the group (`TIMEOUT`, its message saying so); a 2.1 library refuses a non-zero value
    /// (`ABI_MISMATCH`).
    pub fn max_step_tokens(mut self, tokens: u32) -> Self {
        self.max_step_tokens = tokens;
        self
    }

    /// The flags as set.
    pub fn get_flags(&self) -> DispatchFlags {
        self.flags
    }

    /// The C struct; its tensor pointers point into `self`.
    pub fn to_raw(&self) -> sys::EpcDispatchArgs {
        sys::EpcDispatchArgs {
            struct_size: std::mem::size_of::<sys::EpcDispatchArgs>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            flags: self.flags.bits(),
            quant: self.quant.0,
            scale_block: self.scale_block,
            scale_layout: self.scale_layout.0,
            x: self.x.as_raw(),
            x_scales: optional(&self.x_scales),
            x_global_scale: optional(&self.x_global_scale),
            topk_weights: optional(&self.topk_weights),
            out_x: self.out_x.as_raw(),
            out_scales: optional(&self.out_scales),
            out_topk_idx: optional(&self.out_topk_idx),
            out_topk_weights: optional(&self.out_topk_weights),
            out_expert_counts: optional(&self.out_expert_counts),
            out_expert_offsets: optional(&self.out_expert_offsets),
            out_rank_counts: optional(&self.out_rank_counts),
            out_num_recv: optional(&self.out_num_recv),
            out_expert_counts_host: optional(&self.out_expert_counts_host),
            acc_expert_counts: optional(&self.acc_expert_counts),
            send_sms: self.send_sms,
            reserved0: 0,
            max_step_tokens: self.max_step_tokens,
            reserved1: 0,
        }
    }
}

/// The tensors and options of one [`Handle::combine`](crate::Handle::combine)
/// (`EpcCombineArgs`), built from the two it always needs. On high-throughput groups the
/// same call is the backward of dispatch: `x` the rows' gradients, and
/// [`topk_weights`](Combine::topk_weights) with
/// [`out_topk_weights`](Combine::out_topk_weights) the weights' gradients.
#[derive(Clone, Copy, Debug)]
pub struct Combine<'t> {
    flags: CombineFlags,
    weighting: Weighting,
    x: TensorRef<'t>,
    topk_weights: Option<TensorRef<'t>>,
    home_topk_weights: Option<TensorRef<'t>>,
    out: TensorRef<'t>,
    out_topk_weights: Option<TensorRef<'t>>,
    send_sms: u32,
}

impl<'t> Combine<'t> {
    /// Return `x` (the expert outputs, dispatch's `out_x` shape; BF16 travels) and reduce
    /// into `out` (`[B, H]` BF16, FP16 or FP32; must not overlap `x`).
    pub fn new(x: TensorRef<'t>, out: TensorRef<'t>) -> Self {
        Combine {
            flags: CombineFlags::NONE,
            weighting: Weighting::DEFAULT,
            x,
            topk_weights: None,
            home_topk_weights: None,
            out,
            out_topk_weights: None,
            send_sms: 0,
        }
    }

    /// Replace every flag bit.
    pub fn flags(mut self, flags: CombineFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Queue only the sending half; [`Handle::complete`](crate::Handle::complete) writes
    /// `out` ([`CombineFlags::SEND_ONLY`]).
    pub fn send_only(mut self) -> Self {
        self.flags |= CombineFlags::SEND_ONLY;
        self
    }

    /// How the rows are weighted before they are summed; default [`Weighting::DEFAULT`].
    pub fn weighting(mut self, weighting: Weighting) -> Self {
        self.weighting = weighting;
        self
    }

    /// With [`out_topk_weights`](Combine::out_topk_weights) (high-throughput groups): per
    /// received row, FP32, dispatch's `out_topk_weights` shape; carried back.
    pub fn topk_weights(mut self, topk_weights: TensorRef<'t>) -> Self {
        self.topk_weights = Some(topk_weights);
        self
    }

    /// [`Weighting::HOME`]: `[B, K]` FP32 on this rank.
    pub fn home_topk_weights(mut self, weights: TensorRef<'t>) -> Self {
        self.home_topk_weights = Some(weights);
        self
    }

    /// `[B, K]` FP32: entry k takes the value the rank hosting its expert sent (0 where
    /// masked).
    pub fn out_topk_weights(mut self, out_topk_weights: TensorRef<'t>) -> Self {
        self.out_topk_weights = Some(out_topk_weights);
        self
    }

    /// As [`Dispatch::send_sms`] (ABI 2.1).
    pub fn send_sms(mut self, sms: u32) -> Self {
        self.send_sms = sms;
        self
    }

    /// The flags as set.
    pub fn get_flags(&self) -> CombineFlags {
        self.flags
    }

    /// The C struct; its tensor pointers point into `self`.
    pub fn to_raw(&self) -> sys::EpcCombineArgs {
        sys::EpcCombineArgs {
            struct_size: std::mem::size_of::<sys::EpcCombineArgs>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            flags: self.flags.bits(),
            weighting: self.weighting.0,
            x: self.x.as_raw(),
            topk_weights: optional(&self.topk_weights),
            home_topk_weights: optional(&self.home_topk_weights),
            out: self.out.as_raw(),
            out_topk_weights: optional(&self.out_topk_weights),
            send_sms: self.send_sms,
            reserved0: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;

    use super::*;
    use crate::Dtype;

    /// A distinct fake device tensor per `tag`, so each field can be told apart.
    fn tensor(tag: usize) -> TensorRef<'static> {
        let address = (0x7f00_0000_0000usize + tag * 0x1000) as *mut c_void;
        unsafe { TensorRef::from_raw_parts(address, Dtype::FP32, &[tag as i64]) }.unwrap()
    }

    fn data(tensor: *const sys::EpcTensor) -> usize {
        assert!(!tensor.is_null());
        (unsafe { (*tensor).data as usize } - 0x7f00_0000_0000) / 0x1000
    }

    #[test]
    fn every_dispatch_setter_fills_its_own_field() {
        // The raw structs point into the builders, so those stay alive while they are read.
        let bare_args = Dispatch::new(tensor(1), tensor(2));
        let bare = bare_args.to_raw();
        assert_eq!(bare.struct_size as usize, std::mem::size_of::<sys::EpcDispatchArgs>());
        assert_eq!(bare.abi_version, sys::EPC_ABI_VERSION);
        assert_eq!((data(bare.x), data(bare.out_x)), (1, 2));
        assert_eq!((bare.flags, bare.quant, bare.scale_block, bare.scale_layout), (0, 0, 0, 0));
        assert!(bare.x_scales.is_null() && bare.topk_weights.is_null() && bare.acc_expert_counts.is_null());
        assert_eq!((bare.send_sms, bare.reserved0), (0, 0));
        assert_eq!((bare.max_step_tokens, bare.reserved1), (0, 0));

        let args = Dispatch::new(tensor(1), tensor(2))
            .quant(Quant::FP8)
            .scale_block(128)
            .scale_layout(ScaleLayout::SWIZZLED_128X4)
            .x_scales(tensor(3))
            .x_global_scale(tensor(4))
            .topk_weights(tensor(5))
            .out_scales(tensor(6))
            .out_topk_idx(tensor(7))
            .out_topk_weights(tensor(8))
            .out_expert_counts(tensor(9))
            .out_expert_offsets(tensor(10))
            .out_rank_counts(tensor(11))
            .out_num_recv(tensor(12))
            .out_expert_counts_host(tensor(13))
            .acc_expert_counts(tensor(14))
            .send_only()
            .pow2_scales()
            .send_sms(4)
            .max_step_tokens(8);
        let raw = args.to_raw();
        assert_eq!((raw.send_sms, raw.reserved0), (4, 0));
        assert_eq!((raw.max_step_tokens, raw.reserved1), (8, 0));
        assert_eq!(raw.flags, sys::EPC_STEP_SEND_ONLY | sys::EPC_DISPATCH_POW2_SCALES);
        assert_eq!(args.get_flags(), DispatchFlags::SEND_ONLY | DispatchFlags::POW2_SCALES);
        assert_eq!((raw.quant, raw.scale_block), (sys::EPC_QUANT_FP8, 128));
        assert_eq!(raw.scale_layout, sys::EPC_SCALES_SWIZZLED_128X4);
        let fields = [
            raw.x,
            raw.out_x,
            raw.x_scales,
            raw.x_global_scale,
            raw.topk_weights,
            raw.out_scales,
            raw.out_topk_idx,
            raw.out_topk_weights,
            raw.out_expert_counts,
            raw.out_expert_offsets,
            raw.out_rank_counts,
            raw.out_num_recv,
            raw.out_expert_counts_host,
            raw.acc_expert_counts,
        ];
        let tags: Vec<usize> = fields.iter().map(|&t| data(t)).collect();
        assert_eq!(tags, (1..=14).collect::<Vec<_>>());
        // flags() replaces, the named setters add.
        assert_eq!(args.flags(DispatchFlags::NONE).get_flags(), DispatchFlags::NONE);
    }

    #[test]
    fn every_combine_setter_fills_its_own_field() {
        let bare_args = Combine::new(tensor(1), tensor(2));
        let bare = bare_args.to_raw();
        assert_eq!(bare.struct_size as usize, std::mem::size_of::<sys::EpcCombineArgs>());
        assert_eq!((bare.flags, bare.weighting), (0, 0));
        assert_eq!((data(bare.x), data(bare.out)), (1, 2));
        assert!(
            bare.topk_weights.is_null()
                && bare.home_topk_weights.is_null()
                && bare.out_topk_weights.is_null()
        );

        let args = Combine::new(tensor(1), tensor(2))
            .weighting(Weighting::HOME)
            .topk_weights(tensor(3))
            .home_topk_weights(tensor(4))
            .out_topk_weights(tensor(5))
            .send_only()
            .send_sms(1);
        let raw = args.to_raw();
        assert_eq!((raw.send_sms, raw.reserved0), (1, 0));
        assert_eq!((raw.flags, raw.weighting), (sys::EPC_STEP_SEND_ONLY, sys::EPC_WEIGHTING_HOME));
        let tags: Vec<usize> =
            [raw.x, raw.out, raw.topk_weights, raw.home_topk_weights, raw.out_topk_weights]
                .map(data)
                .to_vec();
        assert_eq!(tags, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn routing_fills_its_fields() {
        let routing = Routing::new(tensor(1));
        let raw = routing.to_raw();
        assert_eq!(raw.struct_size as usize, std::mem::size_of::<sys::EpcRouting>());
        assert_eq!(data(raw.topk_idx), 1);
        assert!(raw.num_tokens.is_null());
        let routing = routing.num_tokens(tensor(2));
        assert_eq!(data(routing.to_raw().num_tokens), 2);
    }
}
