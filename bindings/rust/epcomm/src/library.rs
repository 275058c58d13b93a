//! The loaded library: its function table, checked once per process, and the helpers every
//! wrapper uses to call through it.

use std::sync::OnceLock;

use epcomm_sys as sys;

use crate::{Error, Result, Status, Version};

/// The library's function table after the version check: its ABI major must equal the one
/// ffi.rs was generated for, since a different major may lay out every struct differently.
/// Runs once per process; later calls return the same table or the same error.
pub(crate) fn library() -> Result<&'static sys::EpcApi> {
    static CHECKED: OnceLock<Result<&'static sys::EpcApi>> = OnceLock::new();
    CHECKED.get_or_init(load_and_check).clone()
}

fn load_and_check() -> Result<&'static sys::EpcApi> {
    let api = sys::api().map_err(Error::from_load)?;
    let loaded = loaded_version(api)?;
    if loaded.major != sys::EPC_ABI_MAJOR {
        return Err(Error::new(
            Status::ABI_MISMATCH,
            format!(
                "the loaded libepcomm implements ABI {loaded}, but these bindings were generated for ABI major {} \
                 ({}); use bindings generated from that library's header",
                sys::EPC_ABI_MAJOR,
                crate::BINDINGS_ABI
            ),
        ));
    }
    Ok(api)
}

/// `epc_get_version` through the table, before the check (so it can report a mismatch).
pub(crate) fn loaded_version(api: &sys::EpcApi) -> Result<Version> {
    let get_version = api.get_version.ok_or_else(|| Error::missing_entry("get_version"))?;
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    // SAFETY: three valid out-pointers.
    check(api, unsafe { get_version(&mut major, &mut minor, &mut patch) })?;
    Ok(Version { major, minor, patch })
}

/// Ok for EPC_OK; otherwise the error with the calling thread's message, which must be read
/// now, before any other call into the library on this thread replaces it.
pub(crate) fn check(api: &sys::EpcApi, status: sys::EpcStatus) -> Result<()> {
    if status == sys::EPC_OK {
        Ok(())
    } else {
        Err(Error::from_call(api, Status(status)))
    }
}

/// The function-table entry `$name` of `$api`, or an UNSUPPORTED error (from the enclosing
/// function) naming it when the loaded library's table is too short to have it.
macro_rules! entry {
    ($api:expr, $name:ident) => {
        $api.$name.ok_or_else(|| crate::Error::missing_entry(stringify!($name)))?
    };
}
pub(crate) use entry;
