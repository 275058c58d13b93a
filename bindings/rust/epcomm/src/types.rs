// SPDX-License-Identifier: Apache-2.0
//! The ABI's small enumerations: payload dtypes, group modes, plan region kinds, and how a
//! high-throughput handle sizes its rows.

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
    }
}

impl Dtype {
    /// Bytes per element, or None for INVALID and dtypes these bindings do not know.
    pub fn size_in_bytes(self) -> Option<usize> {
        match self {
            Dtype::FP8_E4M3 => Some(1),
            Dtype::BF16 | Dtype::FP16 => Some(2),
            Dtype::FP32 | Dtype::INT32 => Some(4),
            Dtype::INT64 => Some(8),
            _ => None,
        }
    }
}

open_enum! {
    /// How a group moves tokens (`EpcMode`).
    pub struct Mode(u32) {
        /// Decode: direct all-to-all, double-buffered (the default).
        LOW_LATENCY = sys::EPC_MODE_LOW_LATENCY,
        /// Prefill and training: flat layout, few SMs.
        HIGH_THROUGHPUT = sys::EPC_MODE_HIGH_THROUGHPUT,
    }
}

open_enum! {
    /// What a region of a group's symmetric window holds (`EpcRegionKind`).
    pub struct RegionKind(u32) {
        /// Error word, barrier epochs, step counters.
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
        /// puts it (ABI 1.3); planned only when the group spans several (virtual) nodes,
        /// see [`GroupConfig::virtual_node_size`](crate::GroupConfig::virtual_node_size).
        NET_STAGING = sys::EPC_REGION_NET_STAGING,
        /// HT across nodes: tokens from this rank's rail peers (its local index in every
        /// other node), to be forwarded inside the node (ABI 1.3).
        RAIL_RECV = sys::EPC_REGION_RAIL_RECV,
        /// HT across nodes: one flag per rail peer and chunk (ABI 1.3).
        RAIL_SIGNAL = sys::EPC_REGION_RAIL_SIGNAL,
    }
}

open_enum! {
    /// How a high-throughput handle sizes its received rows (`EpcHtSizing`, ABI 1.2); see
    /// [`HtHandle::create`](crate::HtHandle::create).
    pub struct HtSizing(u32) {
        /// rows = N, the tokens this rank receives: creating the handle waits once for the
        /// count exchange to learn N.
        EXACT = sys::EPC_HT_SIZING_EXACT,
        /// rows = nranks * max_tokens_per_rank (the worst case): no host synchronisation, so
        /// creation, update, dispatch and combine are all graph-capturable. Rows at or past N
        /// are left unspecified; N is on the device (`out_num_recv` of a dispatch).
        CAPACITY = sys::EPC_HT_SIZING_CAPACITY,
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
        assert_eq!(HtSizing::CAPACITY.raw(), sys::EPC_HT_SIZING_CAPACITY);
        assert_eq!(format!("{:?}", HtSizing::EXACT), "HtSizing::EXACT");
    }

    #[test]
    fn every_known_dtype_but_invalid_has_a_size() {
        for dtype in Dtype::KNOWN {
            assert_eq!(dtype.size_in_bytes().is_some(), *dtype != Dtype::INVALID, "{dtype:?}");
        }
    }
}
