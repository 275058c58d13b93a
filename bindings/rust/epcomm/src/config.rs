// SPDX-License-Identifier: Apache-2.0
//! [`GroupConfig`]: what a group carries and how; every field left alone means "default".

use std::ffi::c_void;
use std::fmt;

use epcomm_sys as sys;

use crate::{Dtype, Error, Mode, Result, Status, Version};

/// The first ABI whose `EpcGroupConfig` has `virtual_node_size` (before it, the field was
/// `reserved0` and had to be 0).
const VIRTUAL_NODES_ABI: Version = Version { major: 1, minor: 3, patch: 0 };

/// A group's configuration (`EpcGroupConfig`), built with chained setters:
///
/// ```
/// use epcomm::{GroupConfig, Mode};
/// let config = GroupConfig::new().mode(Mode::LOW_LATENCY).num_experts(256).hidden(7168);
/// assert_eq!(config.as_raw().num_experts, 256);
/// ```
///
/// It starts all zeros, which the ABI defines as "default" for every field, with
/// `struct_size` and `abi_version` filled in for these bindings' header. `num_experts` and
/// `hidden` are required; the library validates everything (at [`crate::plan_query`] or
/// [`crate::Group::create`]) and says what is wrong.
#[derive(Clone, Copy)]
pub struct GroupConfig {
    raw: sys::EpcGroupConfig,
}

// SAFETY: the only pointers in the struct are the allocator's context and functions, set
// through the unsafe `allocator`, whose contract requires them to be usable from any thread.
unsafe impl Send for GroupConfig {}
unsafe impl Sync for GroupConfig {}

impl Default for GroupConfig {
    fn default() -> Self {
        let raw = sys::EpcGroupConfig {
            struct_size: std::mem::size_of::<sys::EpcGroupConfig>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            ..Default::default()
        };
        GroupConfig { raw }
    }
}

impl GroupConfig {
    /// All defaults (see the type's docs).
    pub fn new() -> Self {
        Self::default()
    }

    /// LOW_LATENCY (decode, the default) or HIGH_THROUGHPUT (prefill, training).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.raw.mode = mode.0;
        self
    }

    /// Total experts over all ranks; required, and divisible by the rank count.
    pub fn num_experts(mut self, num_experts: u32) -> Self {
        self.raw.num_experts = num_experts;
        self
    }

    /// Channels per token; required. A bf16 row must be a multiple of 16 bytes
    /// (hidden % 8 == 0).
    pub fn hidden(mut self, hidden: u32) -> Self {
        self.raw.hidden = hidden;
        self
    }

    /// 0: 128 (LL) or 4096 (HT); at most 1024 (LL), 65536 (HT).
    pub fn max_tokens_per_rank(mut self, tokens: u32) -> Self {
        self.raw.max_tokens_per_rank = tokens;
        self
    }

    /// 0: 8; at most 32.
    pub fn max_topk(mut self, topk: u32) -> Self {
        self.raw.max_topk = topk;
        self
    }

    /// The token payload the buffers are sized for; default BF16 (FP16 and FP8_E4M3 also).
    pub fn dtype(mut self, dtype: Dtype) -> Self {
        self.raw.dtype = dtype.0;
        self
    }

    /// SM budget for the kernels; 0: the mode's default (LL 132, HT 24).
    pub fn num_sms(mut self, num_sms: u32) -> Self {
        self.raw.num_sms = num_sms;
        self
    }

    /// Bound on every device-side wait, in milliseconds; 0: 10000.
    pub fn timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.raw.timeout_ms = timeout_ms;
        self
    }

    /// Split every NVLink (LSA) team into virtual nodes of `ranks` consecutive ranks
    /// (`virtual_node_size`, ABI 1.3); 0, the default, makes a node the whole LSA team.
    /// `ranks` must divide the team size.
    ///
    /// A testing and tuning aid: ranks in different virtual nodes exchange data only through
    /// the network transport (between virtual nodes an NVLink-backed stand-in with the
    /// network's ordering rules), never through direct NVLink stores, so one host can run
    /// the code paths of a multi-node group. [`GroupInfo`](crate::GroupInfo)'s `node` and
    /// `num_nodes` then count virtual nodes, and the plan gains a
    /// [`RegionKind::NET_STAGING`](crate::RegionKind::NET_STAGING) region.
    ///
    /// ```
    /// use epcomm::GroupConfig;
    /// let config = GroupConfig::new().num_experts(256).hidden(7168).virtual_node_size(2);
    /// assert_eq!(config.as_raw().virtual_node_size, 2);
    /// ```
    ///
    /// A library older than ABI 1.3 does not know the field: with a non-zero value,
    /// [`plan_query`](crate::plan_query) and [`Group::create`](crate::Group::create) then
    /// fail with [`Status::UNSUPPORTED`] without calling it.
    pub fn virtual_node_size(mut self, ranks: u32) -> Self {
        self.raw.virtual_node_size = ranks;
        self
    }

    /// Allocate the symmetric window with your own allocator instead of ncclMemAlloc.
    ///
    /// # Safety
    /// `alloc` must return memory NCCL can register as a window (from ncclMemAlloc or the
    /// CUDA VMM API) and `free` must release exactly such memory; both are called with
    /// `ctx` on the thread that creates the group, which may be any thread this config is
    /// sent to, so `ctx` must be valid there and outlive every group created with it.
    pub unsafe fn allocator(
        mut self,
        alloc: sys::EpcAllocFn,
        free: sys::EpcFreeFn,
        ctx: *mut c_void,
    ) -> Self {
        self.raw.alloc_fn = alloc;
        self.raw.free_fn = free;
        self.raw.alloc_ctx = ctx;
        self
    }

    /// The C struct, e.g. for calling epcomm-sys directly.
    pub fn as_raw(&self) -> &sys::EpcGroupConfig {
        &self.raw
    }

    /// Refuse a setting that a library of ABI `library` cannot read: a field newer than that
    /// library, which it takes for a reserved field that must be 0 (and would refuse with a
    /// message about that reserved field).
    pub(crate) fn check_supported_by(&self, library: Version) -> Result<()> {
        if self.raw.virtual_node_size != 0 && library < VIRTUAL_NODES_ABI {
            return Err(Error::new(
                Status::UNSUPPORTED,
                format!(
                    "GroupConfig::virtual_node_size({}) needs libepcomm ABI {VIRTUAL_NODES_ABI} or newer, but the \
                     loaded library implements ABI {library}, which has no virtual nodes; leave it 0 there",
                    self.raw.virtual_node_size
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for GroupConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = &self.raw;
        f.debug_struct("GroupConfig")
            .field("mode", &Mode(raw.mode))
            .field("num_experts", &raw.num_experts)
            .field("hidden", &raw.hidden)
            .field("max_tokens_per_rank", &raw.max_tokens_per_rank)
            .field("max_topk", &raw.max_topk)
            .field("dtype", &Dtype(raw.dtype))
            .field("num_sms", &raw.num_sms)
            .field("timeout_ms", &raw.timeout_ms)
            .field("virtual_node_size", &raw.virtual_node_size)
            .field("custom_allocator", &raw.alloc_fn.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_node_size_needs_a_library_of_abi_1_3() {
        let config = GroupConfig::new().num_experts(64).hidden(2048).virtual_node_size(2);
        assert_eq!(config.as_raw().virtual_node_size, 2);
        assert!(format!("{config:?}").contains("virtual_node_size: 2"), "{config:?}");

        let old = Version { major: 1, minor: 2, patch: 0 };
        let error = config.check_supported_by(old).unwrap_err();
        assert_eq!(error.status, Status::UNSUPPORTED);
        assert!(error.message.contains("virtual_node_size(2)"), "{:?}", error.message);
        assert!(error.message.contains("ABI 1.3.0 or newer"), "{:?}", error.message);
        assert!(error.message.contains("implements ABI 1.2.0"), "{:?}", error.message);

        // Left at 0 the config works with the older library; 1.3 and later take any value.
        assert_eq!(config.virtual_node_size(0).check_supported_by(old), Ok(()));
        assert_eq!(config.check_supported_by(VIRTUAL_NODES_ABI), Ok(()));
        assert_eq!(config.check_supported_by(Version { major: 1, minor: 4, patch: 1 }), Ok(()));
    }
}
