// SPDX-License-Identifier: Apache-2.0
//! [`Error`]: a failed call's status and the library's detail message.

use std::fmt;

use epcomm_sys as sys;

use crate::Status;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed call: the [`Status`] the library returned, and the detail message it left for
/// the calling thread (`epc_last_error`), read on the same thread right after the call, so
/// it belongs to that call. Errors found by these bindings before reaching the library
/// (a bad shape, a library that cannot be loaded) use the same form.
///
/// ```
/// use epcomm::{ErrorKind, GroupConfig};
/// let error = epcomm::plan_query(&GroupConfig::new().num_experts(256), 4, 4, 1).unwrap_err();
/// assert_eq!(error.kind(), ErrorKind::InvalidArgument);
/// assert!(error.message().contains("hidden")); // the library names the field
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Error {
    status: Status,
    message: String,
}

/// What kind of failure an [`Error`] is: its [`Status`] as an enum to `match` on. New
/// statuses may come with a newer library (the enum is non-exhaustive); a code these
/// bindings do not know is [`ErrorKind::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Status::INVALID_ARGUMENT`]: a NULL required pointer, a value out of range, a bad
    /// shape or dtype, a field meaningless for the mode or layout.
    InvalidArgument,
    /// [`Status::ABI_MISMATCH`]: `struct_size`/`abi_version`, or the library's ABI major.
    AbiMismatch,
    /// [`Status::UNSUPPORTED`]: a request the ABI defines that this library or machine
    /// cannot serve (yet).
    Unsupported,
    /// [`Status::OUT_OF_MEMORY`].
    OutOfMemory,
    /// [`Status::CUDA`]: a CUDA runtime call failed.
    Cuda,
    /// [`Status::NCCL`]: an NCCL call failed, or the NCCL found is too old.
    Nccl,
    /// [`Status::TIMEOUT`]: a device-side wait expired; the group is unusable.
    Timeout,
    /// [`Status::NO_DEVICE`].
    NoDevice,
    /// [`Status::BUFFER_TOO_SMALL`].
    BufferTooSmall,
    /// [`Status::INTERNAL`]: a bug in epcomm.
    Internal,
    /// [`Status::CAPACITY`]: a step received more rows than the handle's capacity; not
    /// sticky.
    Capacity,
    /// [`Status::INVALID_USAGE`]: calls out of order (a complete with nothing pending, a
    /// step on a handle with one pending or without routing).
    InvalidUsage,
    /// A status these bindings have no name for (never [`Status::OK`] in an [`Error`] made
    /// by this crate).
    Other(i32),
}

impl ErrorKind {
    /// The kind of `status`.
    pub fn of(status: Status) -> ErrorKind {
        match status {
            Status::INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            Status::ABI_MISMATCH => ErrorKind::AbiMismatch,
            Status::UNSUPPORTED => ErrorKind::Unsupported,
            Status::OUT_OF_MEMORY => ErrorKind::OutOfMemory,
            Status::CUDA => ErrorKind::Cuda,
            Status::NCCL => ErrorKind::Nccl,
            Status::TIMEOUT => ErrorKind::Timeout,
            Status::NO_DEVICE => ErrorKind::NoDevice,
            Status::BUFFER_TOO_SMALL => ErrorKind::BufferTooSmall,
            Status::INTERNAL => ErrorKind::Internal,
            Status::CAPACITY => ErrorKind::Capacity,
            Status::INVALID_USAGE => ErrorKind::InvalidUsage,
            other => ErrorKind::Other(other.code()),
        }
    }
}

impl Error {
    /// An error with `status` and `message`, e.g. for code that wraps these bindings.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The status the library returned.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The status as an enum.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(self.status)
    }

    /// The raw status code (`EpcStatus`).
    pub fn code(&self) -> i32 {
        self.status.code()
    }

    /// The detail message, naming the struct and field where the library found the problem;
    /// may be empty when the library gave none.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error for `status` returned by a call through `api`, with that thread's message.
    pub(crate) fn from_call(api: &sys::EpcApi, status: Status) -> Error {
        Error { status, message: last_error_message(api) }
    }

    /// The library, or the entry `name` of its function table, is missing.
    pub(crate) fn missing_entry(name: &str) -> Error {
        Error::new(
            Status::UNSUPPORTED,
            format!(
                "the loaded libepcomm has no {name} in its function table (it is older than these bindings)"
            ),
        )
    }

    pub(crate) fn from_load(error: sys::LoadError) -> Error {
        let status = match error.status {
            Some(status) if status != sys::EPC_OK => Status(status),
            _ => Status::UNSUPPORTED,
        };
        Error { status, message: error.message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{}: {}", self.status, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// The calling thread's last error message (`epc_last_error`), or "" if there is none or
/// it cannot be read. Reading does not clear it.
pub(crate) fn last_error_message(api: &sys::EpcApi) -> String {
    let Some(last_error) = api.last_error else {
        return String::new();
    };
    let mut length = 0usize;
    // SAFETY: a NULL buffer of size 0 asks for the length only.
    if unsafe { last_error(std::ptr::null_mut(), 0, &mut length) } != sys::EPC_OK || length == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; length + 1];
    // SAFETY: buf is writable for buf.len() bytes; the library writes at most that many.
    if unsafe { last_error(buf.as_mut_ptr().cast(), buf.len(), &mut length) } != sys::EPC_OK {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_status_but_ok_has_its_own_kind() {
        let mut kinds = Vec::new();
        for status in Status::KNOWN.iter().filter(|s| !s.is_ok()) {
            let kind = ErrorKind::of(*status);
            assert!(!matches!(kind, ErrorKind::Other(_)), "{status:?} has no kind");
            assert!(!kinds.contains(&kind), "{status:?}: {kind:?} twice");
            kinds.push(kind);
        }
        assert_eq!(ErrorKind::of(Status::CAPACITY), ErrorKind::Capacity);
        assert_eq!(ErrorKind::of(Status::INVALID_USAGE), ErrorKind::InvalidUsage);
        assert_eq!(ErrorKind::of(Status(99)), ErrorKind::Other(99));
    }

    #[test]
    fn accessors_return_what_the_error_holds() {
        let error = Error::new(Status::INVALID_USAGE, "epc_complete: nothing is pending");
        assert_eq!(error.status(), Status::INVALID_USAGE);
        assert_eq!(error.code(), sys::EPC_ERR_INVALID_USAGE);
        assert_eq!(error.kind(), ErrorKind::InvalidUsage);
        assert_eq!(error.message(), "epc_complete: nothing is pending");
    }
}
