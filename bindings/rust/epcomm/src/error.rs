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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    /// The detail message; may be empty when the library gave none.
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
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
