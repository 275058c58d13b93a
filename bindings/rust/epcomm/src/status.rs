// SPDX-License-Identifier: Apache-2.0
//! [`Status`]: the library's status codes, including ones these bindings do not know.

use std::ffi::CStr;
use std::fmt;

use epcomm_sys as sys;

use crate::open_enum::open_enum;

open_enum! {
    /// An `EpcStatus`: 0 is success, every other value an error. Values are stable; a newer
    /// library may return codes that are not listed here, and they are kept as they are (a
    /// `Status(99)` is still an error and still prints the library's text for it).
    /// [`Error::kind`](crate::Error::kind) gives the same as a Rust enum to `match` on.
    pub struct Status(i32) {
        /// Success.
        OK = sys::EPC_OK,
        /// A NULL required pointer, a value out of range, a bad shape or dtype, a field
        /// meaningless for the mode or layout.
        INVALID_ARGUMENT = sys::EPC_ERR_INVALID_ARGUMENT,
        /// `struct_size`/`abi_version` (or the library's ABI major) not compatible.
        ABI_MISMATCH = sys::EPC_ERR_ABI_MISMATCH,
        /// A request the ABI defines that this library or machine cannot serve (yet).
        UNSUPPORTED = sys::EPC_ERR_UNSUPPORTED,
        /// A host or device allocation failed.
        OUT_OF_MEMORY = sys::EPC_ERR_OUT_OF_MEMORY,
        /// A CUDA runtime call failed.
        CUDA = sys::EPC_ERR_CUDA,
        /// An NCCL call failed or the NCCL found is too old.
        NCCL = sys::EPC_ERR_NCCL,
        /// A device-side wait expired; the group is unusable.
        TIMEOUT = sys::EPC_ERR_TIMEOUT,
        /// No CUDA device is present.
        NO_DEVICE = sys::EPC_ERR_NO_DEVICE,
        /// A caller buffer was too small.
        BUFFER_TOO_SMALL = sys::EPC_ERR_BUFFER_TOO_SMALL,
        /// A bug in epcomm: please report it.
        INTERNAL = sys::EPC_ERR_INTERNAL,
        /// A step received more rows than the handle's capacity under
        /// [`Overflow::FAIL`](crate::Overflow::FAIL); not sticky.
        CAPACITY = sys::EPC_ERR_CAPACITY,
        /// A call out of order: complete with nothing pending, a step on a handle with one
        /// pending (or on a handle without routing), more pending steps than the group's
        /// `max_pending_steps`.
        INVALID_USAGE = sys::EPC_ERR_INVALID_USAGE,
    }
}

impl Status {
    /// The raw code.
    pub const fn code(self) -> i32 {
        self.0
    }

    pub const fn is_ok(self) -> bool {
        self.0 == sys::EPC_OK
    }
}

impl fmt::Display for Status {
    /// The library's own text for the code (`epc_status_string`): "unknown status" for a
    /// code the loaded library does not know. If the library cannot be loaded at all, a
    /// text made here from the code and its name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(status_string) = crate::library::library().ok().and_then(|api| api.status_string) {
            // SAFETY: epc_status_string accepts any code and returns a static string, never NULL.
            let text = unsafe { CStr::from_ptr(status_string(self.0)) };
            return f.write_str(&text.to_string_lossy());
        }
        match self.name() {
            Some(name) => write!(f, "epcomm status {} ({name})", self.0),
            None => write!(f, "epcomm status {}", self.0),
        }
    }
}
