// SPDX-License-Identifier: Apache-2.0
//! Raw bindings of libepcomm, the expert-parallel (Mixture-of-Experts) communication library.
//!
//! - [`ffi`] (re-exported at the crate root) is generated from `capi/include/epcomm/epcomm.h`
//!   by `tools/bindgen/generate.py`: every constant, typedef, `#[repr(C)]` struct and function
//!   of the header, with the header's own comments (collective or local, blocking,
//!   thread-safety, pointer lifetimes). It also carries layout tables that the tests compare
//!   with the ABI snapshot `capi/abi.json`.
//! - [`api()`] gives the library's function table ([`EpcApi`]). By default the library is
//!   linked (see `build.rs` for how it is found) and the table comes from the linked
//!   `epc_get_api`. With the `dlopen` feature nothing is linked: the first call `dlopen`s
//!   `$EPCOMM_LIB` (or [`SONAME`]) and resolves the one symbol `epc_get_api`. The safe
//!   `epcomm` crate calls everything through this table, so it behaves the same both ways.
//!
//! Everything here is `unsafe` to call; use the `epcomm` crate unless you need the raw ABI.

// Generated: formatted by tools/bindgen/rust.py, not by rustfmt (generate.py --check compares it).
#[rustfmt::skip]
pub mod ffi;
pub use ffi::*;

/// The library file these bindings use: `libepcomm.so.<EPC_ABI_MAJOR>`, the SONAME of the ABI
/// major ffi.rs was generated for. The default build links exactly this file (see
/// `build.rs`); the `dlopen` feature opens it when `EPCOMM_LIB` is not set.
pub const SONAME: &str = env!("EPCOMM_SYS_SONAME");

mod load_error;
mod table;
pub use load_error::LoadError;

#[cfg(not(feature = "dlopen"))]
mod linked;
#[cfg(not(feature = "dlopen"))]
pub use linked::api;

#[cfg(feature = "dlopen")]
mod dlopen;
#[cfg(feature = "dlopen")]
pub use dlopen::{api, default_library, load};
