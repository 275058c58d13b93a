// SPDX-License-Identifier: Apache-2.0
//! ABI versions: the loaded library's, and the one these bindings were generated for.

use std::fmt;

use epcomm_sys as sys;

use crate::library::{library, loaded_version};
use crate::Result;

/// An ABI version (`EPC_ABI_MAJOR.MINOR.PATCH`). Within one major every change is additive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The ABI version of the header these bindings were generated from.
pub const BINDINGS_ABI: Version =
    Version { major: sys::EPC_ABI_MAJOR, minor: sys::EPC_ABI_MINOR, patch: sys::EPC_ABI_PATCH };

/// The ABI version of the loaded library. Fails with [`crate::Status::ABI_MISMATCH`] if its
/// major differs from [`BINDINGS_ABI`]'s (every call checks that on first use). A newer
/// minor is fine: the library then offers more than these bindings use.
/// Local, thread-safe.
pub fn version() -> Result<Version> {
    loaded_version(library()?)
}
