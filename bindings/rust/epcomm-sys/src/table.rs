// SPDX-License-Identifier: Apache-2.0
//! Filling an [`EpcApi`] from a library's `epc_get_api`, shared by the linked and the
//! dlopen paths so that both check the same things.

use crate::{fn_types, EpcApi, LoadError, EPC_ABI_MAJOR, EPC_ABI_VERSION, EPC_OK};

/// Ask `get_api` for the table of ABI major [`EPC_ABI_MAJOR`]. `describe` turns a failing
/// status into words (the linked path can read the library's last-error message; the
/// dlopen path has nothing but the one symbol).
///
/// # Safety
/// `get_api` must be a library's `epc_get_api`.
pub(crate) unsafe fn fill_from(
    get_api: fn_types::epc_get_api,
    describe: impl FnOnce(i32) -> String,
) -> Result<EpcApi, LoadError> {
    let mut table = EpcApi {
        struct_size: core::mem::size_of::<EpcApi>() as u32,
        abi_version: EPC_ABI_VERSION,
        ..EpcApi::default()
    };
    let status = get_api(EPC_ABI_MAJOR, &mut table);
    if status != EPC_OK {
        return Err(LoadError::new(Some(status), describe(status)));
    }
    // The library reports its own table size; a library older than these bindings has a
    // shorter table, and the entries it lacks stay None (the safe crate says which).
    if (table.struct_size as usize) < core::mem::offset_of!(EpcApi, status_string) {
        return Err(LoadError::new(
            Some(status),
            format!("epc_get_api returned a table of {} bytes, too small to use", table.struct_size),
        ));
    }
    Ok(table)
}
