// SPDX-License-Identifier: Apache-2.0
//! The default build links libepcomm: direct calls work, and the table from the linked
//! epc_get_api is complete for this ABI version.
#![cfg(not(feature = "dlopen"))]

use std::ffi::CStr;

use epcomm_sys as sys;

#[test]
fn direct_calls_reach_the_linked_library() {
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    let status = unsafe { sys::epc_get_version(&mut major, &mut minor, &mut patch) };
    assert_eq!(status, sys::EPC_OK);
    assert_eq!(major, sys::EPC_ABI_MAJOR);
    let text = unsafe { CStr::from_ptr(sys::epc_status_string(sys::EPC_ERR_TIMEOUT)) };
    assert!(text.to_str().unwrap().starts_with("timeout"), "{text:?}");
}

#[test]
fn the_linked_table_has_every_entry() {
    let api = sys::api().expect("the linked library's epc_get_api");
    assert!(api.struct_size as usize >= std::mem::size_of::<sys::EpcApi>());
    assert_eq!(api.abi_version / 10000, sys::EPC_ABI_MAJOR);
    let status_string = api.status_string.expect("status_string entry");
    let text = unsafe { CStr::from_ptr(status_string(sys::EPC_ERR_INVALID_ARGUMENT)) };
    assert_eq!(text.to_str().unwrap(), "invalid argument");
    assert!(api.group_barrier.is_some());
    assert_eq!(
        api.complete.map(|f| f as usize),
        Some(sys::epc_complete as *const () as usize),
        "the table's last entry of ABI 2.0 is the linked epc_complete"
    );
    assert_eq!(
        api.comm_init_config.map(|f| f as usize),
        Some(sys::epc_comm_init_config as *const () as usize),
        "the table's last entry (ABI 2.3) is the linked epc_comm_init_config"
    );
}

#[test]
fn the_linked_file_is_the_soname_of_the_generated_abi_major() {
    assert_eq!(sys::SONAME, format!("libepcomm.so.{}", sys::EPC_ABI_MAJOR));
    // Only ABI 2 has these codes; a library of another major is refused by epc_get_api.
    let text = unsafe { CStr::from_ptr(sys::epc_status_string(sys::EPC_ERR_INVALID_USAGE)) };
    assert_ne!(text.to_str().unwrap(), "unknown status");
}
