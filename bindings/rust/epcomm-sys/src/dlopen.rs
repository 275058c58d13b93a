// SPDX-License-Identifier: Apache-2.0
//! The `dlopen` feature: nothing is linked at build time. The library is opened at run time
//! and exactly one symbol, `epc_get_api`, is resolved; everything else goes through the
//! function table it fills. This is how inference engines load epcomm.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::{fn_types, EpcApi, LoadError};

// libdl, declared here rather than through a libc crate (no crates.io dependencies).
#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

#[cfg(target_os = "linux")]
const RTLD_NOW: c_int = 0x2;
#[cfg(target_os = "linux")]
const RTLD_LOCAL: c_int = 0;
#[cfg(target_os = "macos")]
const RTLD_NOW: c_int = 0x2;
#[cfg(target_os = "macos")]
const RTLD_LOCAL: c_int = 0x4;

/// What [`api()`] opens: `$EPCOMM_LIB` if set (a path or a file name), else the SONAME of
/// the ABI major these bindings were generated for, `libepcomm.so.<EPC_ABI_MAJOR>`, found
/// the way the dynamic loader finds it (LD_LIBRARY_PATH, ld.so.cache, ...).
pub fn default_library() -> String {
    match std::env::var("EPCOMM_LIB") {
        Ok(path) if !path.is_empty() => path,
        _ => crate::SONAME.to_string(),
    }
}

/// The function table of [`default_library()`], loaded once per process; the library stays
/// loaded until the process exits (the table points into it). Local, thread-safe.
pub fn api() -> Result<&'static EpcApi, LoadError> {
    static TABLE: OnceLock<Result<EpcApi, LoadError>> = OnceLock::new();
    TABLE.get_or_init(|| load(&default_library())).as_ref().map_err(Clone::clone)
}

/// Open `library` (RTLD_NOW | RTLD_LOCAL), resolve `epc_get_api` and fill a table from it.
/// The library is never closed, so the returned function pointers stay valid for the rest
/// of the process. Local, thread-safe (dlerror is per thread).
pub fn load(library: &str) -> Result<EpcApi, LoadError> {
    let name = CString::new(library)
        .map_err(|_| LoadError::new(None, format!("library path {library:?} contains a NUL byte")))?;
    // SAFETY: name is a valid C string; the flags are the platform's own values.
    let handle = unsafe { dlopen(name.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
    if handle.is_null() {
        return Err(LoadError::new(None, format!("cannot dlopen {library}: {}", take_dlerror())));
    }
    // SAFETY: clears a stale error so that the check below sees dlsym's own.
    unsafe { dlerror() };
    // SAFETY: handle is a live library handle and the symbol name a C string literal.
    let symbol = unsafe { dlsym(handle, c"epc_get_api".as_ptr()) };
    if symbol.is_null() {
        return Err(LoadError::new(
            None,
            format!("{library} has no symbol epc_get_api ({}); is it libepcomm?", take_dlerror()),
        ));
    }
    // SAFETY: epc_get_api has exactly this signature in every libepcomm (it is the ABI's
    // fixed entry point), and a function pointer has the size of a data pointer here.
    let get_api: fn_types::epc_get_api = unsafe { core::mem::transmute(symbol) };
    // SAFETY: get_api is that library's epc_get_api.
    unsafe {
        crate::table::fill_from(get_api, |status| {
            let why = if status == crate::EPC_ERR_ABI_MISMATCH {
                format!("it does not implement ABI major {}", crate::EPC_ABI_MAJOR)
            } else {
                format!("status {status}")
            };
            format!("epc_get_api of {library} refused the table: {why}")
        })
    }
}

fn take_dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call
    // on this thread; it is copied before any.
    let text = unsafe { dlerror() };
    if text.is_null() {
        "unknown error".to_string()
    } else {
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}
