// SPDX-License-Identifier: Apache-2.0
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
        crate::library::table_entry(
            $api,
            $api.$name,
            core::mem::offset_of!(crate::sys::EpcApi, $name),
            stringify!($name),
        )?
    };
}
pub(crate) use entry;

/// The entry `name` (`entry`, at byte `offset` of the table) of `api`. A library older than
/// these bindings fills a shorter table and reports its size in `struct_size`; an entry at or
/// past that end is not the library's, whatever the bytes there hold, so it is refused as
/// UNSUPPORTED (never called), as is an entry the library left NULL.
pub(crate) fn table_entry<F: Copy>(
    api: &sys::EpcApi,
    entry: Option<F>,
    offset: usize,
    name: &str,
) -> Result<F> {
    let end = offset + std::mem::size_of::<Option<F>>();
    if (api.struct_size as usize) < end {
        let version = api.abi_version;
        return Err(Error::new(
            Status::UNSUPPORTED,
            format!(
                "the loaded libepcomm (ABI {}.{}.{}) has no {name} in its function table: the table has {} \
                 bytes and {name} ends at byte {end} (the library is older than these bindings, ABI {})",
                version / 10000,
                version / 100 % 100,
                version % 100,
                api.struct_size,
                crate::BINDINGS_ABI
            ),
        ));
    }
    entry.ok_or_else(|| Error::missing_entry(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `complete` through `api`, as `Handle::complete` looks it up, with a NULL handle; the
    /// library is never called when the lookup fails.
    fn complete(api: &sys::EpcApi) -> Result<sys::EpcStatus> {
        let complete = entry!(api, complete);
        // SAFETY: a NULL handle, which the library refuses before reading anything else.
        Ok(unsafe { complete(std::ptr::null_mut(), 0, std::ptr::null_mut()) })
    }

    /// `dispatch` through `api` with a NULL handle and default arguments.
    fn dispatch(api: &sys::EpcApi) -> Result<sys::EpcStatus> {
        let dispatch = entry!(api, dispatch);
        let args = sys::EpcDispatchArgs {
            struct_size: std::mem::size_of::<sys::EpcDispatchArgs>() as u32,
            abi_version: sys::EPC_ABI_VERSION,
            ..Default::default()
        };
        // SAFETY: a NULL handle, refused before the arguments are read.
        Ok(unsafe { dispatch(std::ptr::null_mut(), &args, std::ptr::null_mut()) })
    }

    /// This library's table as a shorter (older) library of the same major fills it:
    /// `struct_size` says it ends at byte `end`. The pointers past the end are left in place
    /// to prove that struct_size, not the bytes, decides.
    fn shorter_table(end: usize) -> sys::EpcApi {
        let mut table = *library().expect("library");
        table.struct_size = end as u32;
        table
    }

    #[test]
    fn the_table_of_this_library_has_every_entry_of_the_bindings() {
        let api = library().expect("library");
        assert!(api.struct_size as usize >= std::mem::size_of::<sys::EpcApi>());
        assert_eq!(
            std::mem::offset_of!(sys::EpcApi, comm_init_config) + std::mem::size_of::<usize>(),
            std::mem::size_of::<sys::EpcApi>(),
            "comm_init_config is the last entry of ABI 2.3"
        );
        for status in [complete(api).expect("complete"), dispatch(api).expect("dispatch")] {
            assert_eq!(status, sys::EPC_ERR_INVALID_ARGUMENT);
            let error = check(api, status).unwrap_err();
            assert!(error.message().contains("handle is NULL"), "{:?}", error.message());
        }
    }

    #[test]
    fn an_entry_past_a_shorter_table_is_unsupported_and_never_called() {
        let old = shorter_table(std::mem::offset_of!(sys::EpcApi, complete));
        assert!(old.complete.is_some());
        let error = complete(&old).unwrap_err();
        assert_eq!(error.status(), Status::UNSUPPORTED);
        assert!(error.message().contains(&format!("(ABI {})", crate::BINDINGS_ABI)), "{:?}", error.message());
        assert!(error.message().contains("no complete in its function table"), "{:?}", error.message());
        assert!(error.message().contains("older than these bindings"), "{:?}", error.message());
        // Entries the shorter table has still work through it.
        assert_eq!(dispatch(&old).expect("dispatch entry"), sys::EPC_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn a_null_entry_within_the_table_is_unsupported() {
        let mut api = *library().expect("library");
        api.dispatch = None;
        let error = dispatch(&api).unwrap_err();
        assert_eq!(error.status(), Status::UNSUPPORTED);
        assert!(error.message().contains("no dispatch"), "{:?}", error.message());
    }
}
