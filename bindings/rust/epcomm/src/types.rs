// SPDX-License-Identifier: Apache-2.0
//! The ABI's small enumerations: element types, group modes, plan region kinds, and how a
//! handle lays out and sizes what it receives, how dispatch encodes the payload and how
//! combine weights the rows.

use epcomm_sys as sys;

use crate::open_enum::open_enum;

open_enum! {
    /// An element type (`EpcDtype`).
    pub struct Dtype(u32) {
        /// Not a dtype; what an all-zero descriptor holds.
        INVALID = sys::EPC_DTYPE_INVALID,
        BF16 = sys::EPC_DTYPE_BF16,
        FP16 = sys::EPC_DTYPE_FP16,
        FP32 = sys::EPC_DTYPE_FP32,
        FP8_E4M3 = sys::EPC_DTYPE_FP8_E4M3,
        INT32 = sys::EPC_DTYPE_INT32,
        INT64 = sys::EPC_DTYPE_INT64,
        /// Raw bytes (caller-defined scale formats).
        UINT8 = sys::EPC_DTYPE_UINT8,
        FP8_E5M2 = sys::EPC_DTYPE_FP8_E5M2,
        /// One unsigned power-of-two exponent per byte (UE8M0).
        E8M0 = sys::EPC_DTYPE_E8M0,
        /// Four E8M0 exponents in one 32-bit word, lowest byte first.
        E8M0X4 = sys::EPC_DTYPE_E8M0X4,
        /// Two e2m1 values per byte, low nibble first; the last dimension counts bytes.
        FP4_E2M1X2 = sys::EPC_DTYPE_FP4_E2M1X2,
    }
}

impl Dtype {
    /// Bytes per element (FP4_E2M1X2: per byte of two values), or None for INVALID and
    /// dtypes these bindings do not know.
    pub fn size_in_bytes(self) -> Option<usize> {
        match self {
            Dtype::FP8_E4M3 | Dtype::FP8_E5M2 | Dtype::UINT8 | Dtype::E8M0 | Dtype::FP4_E2M1X2 => Some(1),
            Dtype::BF16 | Dtype::FP16 => Some(2),
            Dtype::FP32 | Dtype::INT32 | Dtype::E8M0X4 => Some(4),
            Dtype::INT64 => Some(8),
            _ => None,
        }
    }
}

open_enum! {
    /// How a group moves tokens (`EpcMode`).
    pub struct Mode(u32) {
        /// Decode: direct all-to-all between every pair of ranks, double-buffered (the
        /// default).
        LOW_LATENCY = sys::EPC_MODE_LOW_LATENCY,
        /// Prefill and training: hierarchical across nodes, few SMs, a backward pass.
        HIGH_THROUGHPUT = sys::EPC_MODE_HIGH_THROUGHPUT,
    }
}

open_enum! {
    /// What a step does when more rows arrive than a handle's capacity holds
    /// (`EpcOverflow`). Neither is sticky: the next step starts afresh.
    pub struct Overflow(u32) {
        /// Nothing is written past capacity, the step's outputs are undefined, and the
        /// handle's next call fails with [`Status::CAPACITY`](crate::Status::CAPACITY)
        /// naming the rank and the count (see [`HandleInfo`](crate::HandleInfo)).
        FAIL = sys::EPC_OVERFLOW_FAIL,
        /// Rows past capacity, in row order, are dropped; counts describe the rows written.
        DROP = sys::EPC_OVERFLOW_DROP,
    }
}

open_enum! {
    /// What a region of a group's symmetric window holds (`EpcRegionKind`).
    pub struct RegionKind(u32) {
        /// Barrier epochs, one per rank.
        CONTROL = sys::EPC_REGION_CONTROL,
        /// Incoming dispatch messages (LL: one per slot).
        DISPATCH_RECV = sys::EPC_REGION_DISPATCH_RECV,
        /// Per-source-rank arrival counters.
        DISPATCH_SIGNAL = sys::EPC_REGION_DISPATCH_SIGNAL,
        /// Incoming combine rows.
        COMBINE_RECV = sys::EPC_REGION_COMBINE_RECV,
        /// Per-source-rank arrival counters for combine.
        COMBINE_SIGNAL = sys::EPC_REGION_COMBINE_SIGNAL,
        /// HT: per-rank token and expert counts exchanged.
        LAYOUT = sys::EPC_REGION_LAYOUT,
        /// What is bound for ranks in other nodes, staged here until the network transport
        /// puts it; planned only when the group spans several (virtual) nodes, see
        /// [`GroupConfig::virtual_node_size`](crate::GroupConfig::virtual_node_size).
        NET_STAGING = sys::EPC_REGION_NET_STAGING,
        /// HT across nodes: tokens from this rank's rail peers (its local index in every
        /// other node), to be forwarded inside the node.
        RAIL_RECV = sys::EPC_REGION_RAIL_RECV,
        /// HT across nodes: one flag per rail peer and chunk.
        RAIL_SIGNAL = sys::EPC_REGION_RAIL_SIGNAL,
    }
}

open_enum! {
    /// How dispatch lays out what a rank receives, and so what combine takes (`EpcLayout`).
    /// Shapes, with L local experts, C the handle's capacity, R ranks, T tokens per rank,
    /// K top-k, S scales per row, `rows` as [`HandleInfo::rows`](crate::HandleInfo::rows):
    ///
    /// | layout | out_x | out_scales | out_topk_idx / _weights | counts |
    /// | --- | --- | --- | --- | --- |
    /// | EXPERT_PADDED | `[L, C, H]` | `[L, C, S]` | - / `[L, C]` | out_expert_counts `[L]` |
    /// | EXPERT_PACKED | `[rows, H]` | `[rows, S]` | - / `[rows]` | out_expert_counts `[L]`, out_expert_offsets `[L+1]` |
    /// | RANK_MAJOR | `[R, T, H]` | `[R, T, S]` | `[R, T, K]` / `[R, T, K]` | out_rank_counts `[R]` |
    /// | FLAT | `[rows, H]` | `[rows, S]` | `[rows, K]` / `[rows, K]` | out_expert_counts `[L]`, out_num_recv `[1]` |
    ///
    /// Served in 2.0: EXPERT_PADDED on low-latency groups (C = R * T), FLAT on
    /// high-throughput groups; the others are refused with
    /// [`Status::UNSUPPORTED`](crate::Status::UNSUPPORTED).
    pub struct Layout(u32) {
        /// EXPERT_PADDED on low-latency groups, FLAT on high-throughput groups.
        DEFAULT = sys::EPC_LAYOUT_DEFAULT,
        /// One zone of C rows per local expert (a grouped GEMM masked by counts).
        EXPERT_PADDED = sys::EPC_LAYOUT_EXPERT_PADDED,
        /// Expert zones back to back, aligned (a contiguous grouped GEMM by offsets).
        EXPERT_PACKED = sys::EPC_LAYOUT_EXPERT_PACKED,
        /// One zone of T rows per source rank.
        RANK_MAJOR = sys::EPC_LAYOUT_RANK_MAJOR,
        /// Received tokens back to back, once per rank.
        FLAT = sys::EPC_LAYOUT_FLAT,
    }
}

open_enum! {
    /// How a handle's row count is chosen (`EpcSizing`).
    pub struct Sizing(u32) {
        /// rows = capacity: no host synchronisation anywhere, so update, dispatch, combine
        /// and complete are graph-capturable (the default).
        CAPACITY = sys::EPC_SIZING_CAPACITY,
        /// rows = what this rank receives: create (with routing) and update wait once for
        /// the count exchange. FLAT and EXPERT_PACKED only.
        EXACT = sys::EPC_SIZING_EXACT,
    }
}

open_enum! {
    /// How dispatch encodes the payload (`EpcQuant`). The scales' encoding follows
    /// `out_scales`' dtype.
    pub struct Quant(u32) {
        /// `x` (BF16 or FP16) travels as it is; no scales (the default).
        NONE = sys::EPC_QUANT_NONE,
        /// Cast in the send kernel to FP8_E4M3 with one scale per `scale_block` channels,
        /// scale = max(amax of the block, 1e-4) / 448 (rounded up to a power of two with
        /// [`Dispatch::pow2_scales`](crate::Dispatch::pow2_scales)), e4m3 = x / scale,
        /// saturated to ±448, rounded to nearest even. Served in 2.0: low-latency groups,
        /// FP32 scales, scale_block 128.
        FP8 = sys::EPC_QUANT_FP8,
        /// Cast in the send kernel to FP4_E2M1X2 with one E4M3 scale per 16 channels
        /// relative to `x_global_scale` (not served in 2.0).
        NVFP4 = sys::EPC_QUANT_NVFP4,
        /// The caller quantized: `x` and `x_scales` are copied byte for byte into `out_x`
        /// and `out_scales` of the same dtypes. Served in 2.0: high-throughput groups,
        /// FP8_E4M3 `x` with FP32 scales `[B, H/128]`; 2.1: both modes, FP8_E4M3 or
        /// FP4_E2M1X2 `x` with any scale count and scale dtype (LL: elements of 1, 2 or 4
        /// bytes, row and scales within the group's message).
        PASSTHROUGH = sys::EPC_QUANT_PASSTHROUGH,
    }
}

open_enum! {
    /// Where `out_scales`' elements lie (`EpcScaleLayout`).
    pub struct ScaleLayout(u32) {
        /// As `out_scales`' strides say: row-major, or column-major over tokens (the
        /// default; served in 2.0: row-major).
        STRIDED = sys::EPC_SCALES_STRIDED,
        /// The block-scaled GEMM layout of tiles of 128 rows x 4 scale columns; `out_scales`
        /// is then 1-D, the padded size in bytes (not served in 2.0).
        SWIZZLED_128X4 = sys::EPC_SCALES_SWIZZLED_128X4,
    }
}

open_enum! {
    /// How combine weights the expert outputs before it sums them (`EpcWeighting`).
    pub struct Weighting(u32) {
        /// SENDER for expert layouts, NONE for the others.
        DEFAULT = sys::EPC_WEIGHTING_DEFAULT,
        /// Rows are summed as given: the caller weighted them.
        NONE = sys::EPC_WEIGHTING_NONE,
        /// Expert layouts: on the expert's rank each row is multiplied by its entry's weight
        /// in dispatch's `topk_weights`, and one token's rows are summed into one partial
        /// per rank.
        SENDER = sys::EPC_WEIGHTING_SENDER,
        /// Expert layouts: every (token, entry) row crosses, and the token's rank weights
        /// them by `home_topk_weights` (not served in 2.0).
        HOME = sys::EPC_WEIGHTING_HOME,
    }
}

open_enum! {
    /// Which send-only call of a handle awaits [`Handle::complete`](crate::Handle::complete)
    /// (`EPC_PENDING_*`).
    pub struct Pending(u32) {
        NONE = sys::EPC_PENDING_NONE,
        DISPATCH = sys::EPC_PENDING_DISPATCH,
        COMBINE = sys::EPC_PENDING_COMBINE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_are_kept_and_named_by_number() {
        let dtype = Dtype(99);
        assert!(!dtype.is_known());
        assert_eq!(format!("{dtype:?}"), "Dtype(99)");
        assert_eq!(format!("{:?}", Dtype::BF16), "Dtype::BF16");
        assert_eq!(Dtype::from(1u32), Dtype::BF16);
        assert_eq!(u32::from(Mode::HIGH_THROUGHPUT), sys::EPC_MODE_HIGH_THROUGHPUT);
        assert_eq!(Sizing::EXACT.raw(), sys::EPC_SIZING_EXACT);
        assert_eq!(format!("{:?}", Quant::FP8), "Quant::FP8");
        assert_eq!(format!("{:?}", Layout(7)), "Layout(7)");
    }

    #[test]
    fn every_known_dtype_but_invalid_has_a_size() {
        for dtype in Dtype::KNOWN {
            assert_eq!(dtype.size_in_bytes().is_some(), *dtype != Dtype::INVALID, "{dtype:?}");
        }
    }

    #[test]
    fn zero_is_the_default_of_every_setting() {
        // The ABI's rule: a zero field means "default"; these are the names of zero.
        assert_eq!(Layout::DEFAULT.raw(), 0);
        assert_eq!(Sizing::CAPACITY.raw(), 0);
        assert_eq!(Quant::NONE.raw(), 0);
        assert_eq!(ScaleLayout::STRIDED.raw(), 0);
        assert_eq!(Weighting::DEFAULT.raw(), 0);
        assert_eq!(Overflow::FAIL.raw(), 0);
    }
}
