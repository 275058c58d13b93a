// SPDX-License-Identifier: Apache-2.0
//! [`GroupConfig`]: what a group carries and how; every field left alone means "default".

use std::ffi::c_void;
use std::fmt;

use epcomm_sys as sys;

use crate::{GroupFlags, HandleFlags, Layout, Mode, Overflow, Sizing};

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

    /// Dispatch bytes per token the window holds, payload plus scales; 0: `2 * hidden`
    /// (BF16 or FP16 rows; FP8 rows fit too). Down to `hidden + hidden / 32` (FP8 with one
    /// FP32 scale per 128 channels, `hidden % 128 == 0`): such a group carries FP8 payloads
    /// only, in a smaller window. Values are rounded down to one of these two sizes
    /// ([`GroupInfo::max_token_bytes`](crate::GroupInfo::max_token_bytes) says which).
    pub fn max_token_bytes(mut self, bytes: u32) -> Self {
        self.raw.max_token_bytes = bytes;
        self
    }

    /// Tokens per rank the receive window holds; 0: `nranks * max_tokens_per_rank`, which
    /// never overflows (less is refused as UNSUPPORTED in 2.0; served since 2.1 on
    /// high-throughput groups, of one node or several, to FLAT handles).
    pub fn recv_capacity(mut self, tokens: u64) -> Self {
        self.raw.recv_capacity = tokens;
        self
    }

    /// What a step does when more rows arrive than a handle holds; default
    /// [`Overflow::FAIL`].
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.raw.overflow = overflow.0;
        self
    }

    /// Send-only steps awaiting [`Handle::complete`](crate::Handle::complete) at once over
    /// all the group's handles; 0: the default (1 in 2.0; more is refused as UNSUPPORTED).
    pub fn max_pending_steps(mut self, steps: u32) -> Self {
        self.raw.max_pending_steps = steps;
        self
    }

    /// `EPC_GROUP_*` bits ([`GroupFlags::COMBINE_PER_ENTRY`]: UNSUPPORTED in 2.0; served since
    /// 2.1 on LL and HT groups of any number of nodes).
    pub fn flags(mut self, flags: GroupFlags) -> Self {
        self.raw.flags = flags.0;
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
    /// (`virtual_node_size`); 0, the default, makes a node the whole LSA team.
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
            .field("max_token_bytes", &raw.max_token_bytes)
            .field("recv_capacity", &raw.recv_capacity)
            .field("overflow", &Overflow(raw.overflow))
            .field("max_pending_steps", &raw.max_pending_steps)
            .field("num_sms", &raw.num_sms)
            .field("timeout_ms", &raw.timeout_ms)
            .field("flags", &GroupFlags(raw.flags))
            .field("virtual_node_size", &raw.virtual_node_size)
            .field("custom_allocator", &raw.alloc_fn.is_some())
            .finish()
    }
}

/// A handle's receive layout and sizing (`EpcHandleConfig`), built with chained setters;
/// [`Handle::create`](crate::Handle::create) takes `None` for all defaults:
///
/// ```
/// use epcomm::{HandleConfig, HandleFlags, Layout, Sizing};
/// let config = HandleConfig::new().layout(Layout::FLAT).sizing(Sizing::EXACT).flags(HandleFlags::GLOBAL_EXPERT_IDS);
/// assert_eq!(config.as_raw().sizing, 1);
/// ```
///
/// It starts all zeros (every field "default") with `struct_size` and `abi_version` set:
/// the group's default layout (EXPERT_PADDED on low-latency groups, FLAT on
/// high-throughput ones), [`Sizing::CAPACITY`], the layout's default capacity.
#[derive(Clone, Copy)]
pub struct HandleConfig {
    raw: sys::EpcHandleConfig,
}

impl Default for HandleConfig {
    fn default() -> Self {
        let raw = sys::EpcHandleConfig {
            struct_size: std::mem::size_of::<sys::EpcHandleConfig>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            ..Default::default()
        };
        HandleConfig { raw }
    }
}

impl HandleConfig {
    /// All defaults (see the type's docs).
    pub fn new() -> Self {
        Self::default()
    }

    /// How dispatch lays out what this rank receives (see [`Layout`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.raw.layout = layout.0;
        self
    }

    /// How the row count is chosen; default [`Sizing::CAPACITY`] (graph-capturable).
    pub fn sizing(mut self, sizing: Sizing) -> Self {
        self.raw.sizing = sizing.0;
        self
    }

    /// C: EXPERT_PADDED rows per expert zone (0: `nranks * max_tokens_per_rank`); FLAT and
    /// EXPERT_PACKED rows (0: the most the group's receive capacity can produce). Must be 0
    /// for RANK_MAJOR and with [`Sizing::EXACT`]. 2.0 serves only the default; since 2.1 HT
    /// groups serve FLAT capacities below it too (the header's `EpcHandleConfig.capacity`).
    pub fn capacity(mut self, rows: u64) -> Self {
        self.raw.capacity = rows;
        self
    }

    /// EXPERT_PACKED: zone starts and sizes are multiples of this (0: 1). Other layouts:
    /// must be 0.
    pub fn expert_alignment(mut self, alignment: u32) -> Self {
        self.raw.expert_alignment = alignment;
        self
    }

    /// `EPC_HANDLE_*` bits.
    pub fn flags(mut self, flags: HandleFlags) -> Self {
        self.raw.flags = flags.0;
        self
    }

    /// The C struct, e.g. for calling epcomm-sys directly.
    pub fn as_raw(&self) -> &sys::EpcHandleConfig {
        &self.raw
    }
}

impl fmt::Debug for HandleConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = &self.raw;
        f.debug_struct("HandleConfig")
            .field("layout", &Layout(raw.layout))
            .field("sizing", &Sizing(raw.sizing))
            .field("capacity", &raw.capacity)
            .field("expert_alignment", &raw.expert_alignment)
            .field("flags", &HandleFlags(raw.flags))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_fill_the_c_structs() {
        let config = GroupConfig::new()
            .num_experts(64)
            .hidden(2048)
            .max_token_bytes(2048 + 64)
            .recv_capacity(1 << 33)
            .overflow(Overflow::DROP)
            .max_pending_steps(2)
            .flags(GroupFlags::COMBINE_PER_ENTRY)
            .virtual_node_size(2);
        let raw = config.as_raw();
        assert_eq!(
            (raw.struct_size as usize, raw.abi_version),
            (std::mem::size_of_val(raw), sys::EPC_ABI_VERSION)
        );
        assert_eq!((raw.max_token_bytes, raw.recv_capacity), (2112, 1 << 33));
        assert_eq!((raw.overflow, raw.max_pending_steps), (sys::EPC_OVERFLOW_DROP, 2));
        assert_eq!((raw.flags, raw.virtual_node_size), (sys::EPC_GROUP_COMBINE_PER_ENTRY, 2));
        let text = format!("{config:?}");
        assert!(text.contains("overflow: Overflow::DROP") && text.contains("COMBINE_PER_ENTRY"), "{text}");

        let handle = HandleConfig::new()
            .layout(Layout::EXPERT_PACKED)
            .sizing(Sizing::EXACT)
            .capacity(4096)
            .expert_alignment(128)
            .flags(HandleFlags::ZERO_PADDING);
        let raw = handle.as_raw();
        assert_eq!(raw.struct_size as usize, std::mem::size_of::<sys::EpcHandleConfig>());
        assert_eq!((raw.layout, raw.sizing), (sys::EPC_LAYOUT_EXPERT_PACKED, sys::EPC_SIZING_EXACT));
        assert_eq!(
            (raw.capacity, raw.expert_alignment, raw.flags),
            (4096, 128, sys::EPC_HANDLE_ZERO_PADDING)
        );
        assert_eq!(HandleConfig::default().as_raw().layout, 0);
    }
}
