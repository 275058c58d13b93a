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
    use crate::Flags;

    /// `ll_dispatch_fp8` through `api`, as `Handle::ll_dispatch_fp8` looks it up; the
    /// arguments are never looked at when the lookup fails.
    fn dispatch_fp8(api: &sys::EpcApi) -> Result<sys::EpcStatus> {
        let dispatch = entry!(api, ll_dispatch_fp8);
        let null = std::ptr::null();
        // SAFETY: a NULL handle, which the library refuses before reading anything else.
        Ok(unsafe {
            dispatch(
                std::ptr::null_mut(),
                null,
                null,
                null,
                null,
                null,
                Flags::NONE.bits(),
                std::ptr::null_mut(),
            )
        })
    }

    /// This library's table as a library of `abi_version` fills it: `struct_size` says it
    /// ends at byte `end`. The pointers past the end are left in place to prove that
    /// struct_size, not the bytes, decides.
    fn older_table(abi_version: u32, end: usize) -> sys::EpcApi {
        let mut table = *library().expect("library");
        table.struct_size = end as u32;
        table.abi_version = abi_version;
        table
    }

    #[test]
    fn the_table_of_this_library_has_ll_dispatch_fp8() {
        let api = library().expect("library");
        assert!(api.struct_size as usize >= std::mem::size_of::<sys::EpcApi>());
        let status = dispatch_fp8(api).expect("the entry");
        assert_eq!(status, sys::EPC_ERR_INVALID_ARGUMENT);
        let error = check(api, status).unwrap_err();
        assert!(error.message.contains("handle is NULL"), "{:?}", error.message);
    }

    #[test]
    fn an_entry_past_an_older_librarys_table_is_unsupported_and_never_called() {
        // The table of an ABI 1.0 library: it ends where ll_dispatch_fp8 begins.
        let old = older_table(10000, std::mem::offset_of!(sys::EpcApi, ll_dispatch_fp8));
        assert!(old.ll_dispatch_fp8.is_some());
        let error = dispatch_fp8(&old).unwrap_err();
        assert_eq!(error.status, Status::UNSUPPORTED);
        assert!(error.message.contains("ABI 1.0.0"), "{:?}", error.message);
        assert!(error.message.contains("no ll_dispatch_fp8 in its function table"), "{:?}", error.message);
        assert!(error.message.contains("older than these bindings"), "{:?}", error.message);

        // Entries the old table has still work through it.
        let complete = (|| Ok::<_, Error>(entry!(&old, complete)))().expect("complete entry");
        // SAFETY: a NULL handle, refused by the library.
        assert_eq!(
            unsafe { complete(std::ptr::null_mut(), std::ptr::null_mut()) },
            sys::EPC_ERR_INVALID_ARGUMENT
        );
    }

    /// The three ABI 1.2 entries through `api`, as `HtHandle` looks them up, each called
    /// with a NULL group or handle; the first failing lookup is returned.
    fn ht_entries(api: &sys::EpcApi) -> Result<[sys::EpcStatus; 3]> {
        let create = entry!(api, ht_handle_create);
        let dispatch = entry!(api, ht_dispatch);
        let combine = entry!(api, ht_combine);
        let (null, stream) = (std::ptr::null(), std::ptr::null_mut());
        let (mut handle, mut rows) = (std::ptr::null_mut(), 0i64);
        // SAFETY: NULL group and handles, refused by the library before anything else is read.
        Ok(unsafe {
            [
                create(std::ptr::null_mut(), null, sys::EPC_HT_SIZING_EXACT, stream, &mut handle, &mut rows),
                dispatch(
                    std::ptr::null_mut(),
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    0,
                    stream,
                ),
                combine(std::ptr::null_mut(), null, null, null, null, Flags::BACKWARD_WEIGHTS.bits(), stream),
            ]
        })
    }

    #[test]
    fn the_table_of_this_library_has_the_high_throughput_entries() {
        let api = library().expect("library");
        let statuses = ht_entries(api).expect("the ABI 1.2 entries");
        assert_eq!(statuses, [sys::EPC_ERR_INVALID_ARGUMENT; 3]);
        let error = check(api, statuses[2]).unwrap_err();
        assert!(error.message.contains("handle is NULL"), "{:?}", error.message);
    }

    #[test]
    fn the_high_throughput_entries_past_an_abi_1_1_table_are_unsupported() {
        // An ABI 1.1 table ends where ht_handle_create begins; its ll_dispatch_fp8 works.
        let mut old = older_table(10100, std::mem::offset_of!(sys::EpcApi, ht_handle_create));
        let error = ht_entries(&old).unwrap_err();
        assert_eq!(error.status, Status::UNSUPPORTED);
        assert!(error.message.contains("(ABI 1.1.0) has no ht_handle_create"), "{:?}", error.message);
        assert_eq!(dispatch_fp8(&old).expect("ll_dispatch_fp8 entry"), sys::EPC_ERR_INVALID_ARGUMENT);
        // A table that ends inside the three entries has the ones before its end only.
        old.struct_size = std::mem::offset_of!(sys::EpcApi, ht_combine) as u32;
        let error = ht_entries(&old).unwrap_err();
        assert!(error.message.contains("no ht_combine in its function table"), "{:?}", error.message);
    }

    /// `group_async_error` through `api`, as `Group::async_error` looks it up, with a NULL
    /// group.
    fn async_error(api: &sys::EpcApi) -> Result<sys::EpcStatus> {
        let query = entry!(api, group_async_error);
        // SAFETY: a NULL group, which the library refuses without reading anything.
        Ok(unsafe { query(std::ptr::null()) })
    }

    #[test]
    fn the_table_of_this_library_has_group_async_error_last() {
        let api = library().expect("library");
        assert_eq!(
            std::mem::offset_of!(sys::EpcApi, group_async_error) + std::mem::size_of::<usize>(),
            std::mem::size_of::<sys::EpcApi>()
        );
        let status = async_error(api).expect("the ABI 1.3 entry");
        assert_eq!(status, sys::EPC_ERR_INVALID_ARGUMENT);
        let error = check(api, status).unwrap_err();
        assert!(error.message.contains("group is NULL"), "{:?}", error.message);
    }

    #[test]
    fn group_async_error_past_an_abi_1_2_table_is_unsupported() {
        // An ABI 1.2 table ends where group_async_error begins; its HT entries work.
        let old = older_table(10200, std::mem::offset_of!(sys::EpcApi, group_async_error));
        assert!(old.group_async_error.is_some());
        let error = async_error(&old).unwrap_err();
        assert_eq!(error.status, Status::UNSUPPORTED);
        assert!(error.message.contains("(ABI 1.2.0) has no group_async_error"), "{:?}", error.message);
        assert_eq!(ht_entries(&old).expect("the ABI 1.2 entries"), [sys::EPC_ERR_INVALID_ARGUMENT; 3]);
    }

    #[test]
    fn a_null_entry_within_the_table_is_unsupported() {
        let mut api = *library().expect("library");
        api.ll_dispatch_fp8 = None;
        let error = dispatch_fp8(&api).unwrap_err();
        assert_eq!(error.status, Status::UNSUPPORTED);
        assert!(error.message.contains("no ll_dispatch_fp8"), "{:?}", error.message);
    }
}
