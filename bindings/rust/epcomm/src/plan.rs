// SPDX-License-Identifier: Apache-2.0
//! [`plan_query()`]: the memory and resources a configuration needs, computed on the CPU.

use std::ffi::c_char;

use epcomm_sys as sys;

use crate::library::{check, entry, library};
use crate::{Error, GroupConfig, Mode, RegionKind, Result, Status};

/// The byte layout of a group's symmetric window and its resource requests (`EpcPlan`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Plan {
    pub mode: Mode,
    /// Double-buffer depth: 2 for LL, 1 for HT.
    pub num_slots: u32,
    /// Per rank: the registered window (sum of regions, aligned).
    pub symmetric_bytes: u64,
    /// Per rank: ordinary device memory beside the window.
    pub workspace_bytes: u64,
    /// Device memory one handle with the default [`HandleConfig`](crate::HandleConfig) holds.
    pub handle_bytes: u64,
    /// Tokens per rank the receive window holds, after defaults.
    pub recv_capacity: u64,
    /// SM budget the kernels will use.
    pub num_sms: u32,
    /// Threads per block / 32.
    pub warps_per_block: u32,
    /// NCCL LSA barriers requested in the device communicator.
    pub lsa_barriers: u32,
    /// GIN contexts requested (0 while every rank shares one LSA team).
    pub gin_contexts: u32,
    /// GIN signals requested.
    pub gin_signals: u32,
    /// Bytes one token occupies in a dispatch receive buffer.
    pub message_bytes: u32,
    /// Dispatch bytes per token the window holds, after defaults and rounding.
    pub max_token_bytes: u32,
    /// Send-only steps that may await completion at once, after defaults.
    pub max_pending_steps: u32,
    /// The window's regions, in window order.
    pub regions: Vec<PlanRegion>,
}

/// One region of the symmetric window (`EpcPlanRegion`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanRegion {
    pub kind: RegionKind,
    /// The double-buffer slot (0 or 1); None for regions that are not per slot.
    pub slot: Option<u32>,
    /// Bytes from the start of the window.
    pub offset: u64,
    pub size: u64,
    /// E.g. `dispatch_recv[1]`.
    pub name: String,
}

/// The layout `config` needs on `nranks` ranks whose NVLink (LSA) domains hold `lsa_size`
/// ranks each, on `num_nodes` nodes (`epc_plan_query`), validated exactly as
/// [`crate::Group::create`] validates it. Pure CPU, no GPU needed. With
/// [`GroupConfig::virtual_node_size`] set, `lsa_size` is the NVLink team that the virtual
/// nodes split.
/// Local, blocking, thread-safe.
pub fn plan_query(config: &GroupConfig, nranks: i32, lsa_size: i32, num_nodes: i32) -> Result<Plan> {
    let api = library()?;
    let query = entry!(api, plan_query);
    let mut raw = sys::EpcPlan {
        struct_size: std::mem::size_of::<sys::EpcPlan>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        ..Default::default()
    };
    // SAFETY: config is read during the call only; raw is a valid out-parameter whose
    // struct_size says how much may be written.
    check(api, unsafe { query(config.as_raw(), nranks, lsa_size, num_nodes, &mut raw) })?;
    Plan::from_raw(&raw)
}

impl Plan {
    fn from_raw(raw: &sys::EpcPlan) -> Result<Plan> {
        let count = raw.num_regions as usize;
        if count > raw.regions.len() {
            return Err(Error::new(
                Status::INTERNAL,
                format!(
                    "epc_plan_query reported {count} regions; the ABI has room for {}",
                    raw.regions.len()
                ),
            ));
        }
        Ok(Plan {
            mode: Mode(raw.mode),
            num_slots: raw.num_slots,
            symmetric_bytes: raw.symmetric_bytes,
            workspace_bytes: raw.workspace_bytes,
            handle_bytes: raw.handle_bytes,
            recv_capacity: raw.recv_capacity,
            num_sms: raw.num_sms,
            warps_per_block: raw.warps_per_block,
            lsa_barriers: raw.lsa_barriers,
            gin_contexts: raw.gin_contexts,
            gin_signals: raw.gin_signals,
            message_bytes: raw.message_bytes,
            max_token_bytes: raw.max_token_bytes,
            max_pending_steps: raw.max_pending_steps,
            regions: raw.regions[..count].iter().map(PlanRegion::from_raw).collect(),
        })
    }

    /// The first region named `name`.
    pub fn region(&self, name: &str) -> Option<&PlanRegion> {
        self.regions.iter().find(|region| region.name == name)
    }
}

impl PlanRegion {
    fn from_raw(raw: &sys::EpcPlanRegion) -> PlanRegion {
        PlanRegion {
            kind: RegionKind(raw.kind),
            slot: (raw.slot != sys::EPC_SLOT_NONE).then_some(raw.slot),
            offset: raw.offset,
            size: raw.size,
            name: fixed_c_string(&raw.name),
        }
    }
}

/// A NUL-terminated name in a fixed buffer; the whole buffer if it lacks the NUL.
fn fixed_c_string(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::fixed_c_string;

    #[test]
    fn names_stop_at_the_nul_or_the_buffer_end() {
        let mut buffer = [0 as std::ffi::c_char; 8];
        for (slot, byte) in buffer.iter_mut().zip(b"abc") {
            *slot = *byte as std::ffi::c_char;
        }
        assert_eq!(fixed_c_string(&buffer), "abc");
        assert_eq!(fixed_c_string(&[b'x' as std::ffi::c_char; 4]), "xxxx");
    }
}
