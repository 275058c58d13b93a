// SPDX-License-Identifier: Apache-2.0
//! The default: libepcomm is linked (see build.rs), and the table comes from the linked
//! `epc_get_api`.

use std::sync::OnceLock;

use crate::{ffi, EpcApi, LoadError};

/// The linked library's function table, fetched once per process. Local, thread-safe.
pub fn api() -> Result<&'static EpcApi, LoadError> {
    static TABLE: OnceLock<Result<EpcApi, LoadError>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            // SAFETY: ffi::epc_get_api is the linked library's own entry point.
            unsafe {
                crate::table::fill_from(ffi::epc_get_api, |status| {
                    format!(
                        "epc_get_api({}) failed with status {status}: {}",
                        ffi::EPC_ABI_MAJOR,
                        last_error()
                    )
                })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The calling thread's last error message of the linked library.
fn last_error() -> String {
    let mut buf = [0u8; 512];
    let mut length = 0usize;
    // SAFETY: buf is writable for its whole length; the library writes at most that much.
    let status = unsafe { ffi::epc_last_error(buf.as_mut_ptr().cast(), buf.len(), &mut length) };
    if status != ffi::EPC_OK {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
