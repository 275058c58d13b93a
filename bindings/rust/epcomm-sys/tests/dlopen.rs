// SPDX-License-Identifier: Apache-2.0
//! The `dlopen` feature: nothing is linked; the library named by EPCOMM_LIB (or
//! libepcomm.so.2 on the loader's path) is opened at run time and only epc_get_api is
//! resolved. Run with `cargo test --features dlopen`.
#![cfg(feature = "dlopen")]

use std::ffi::CStr;

use epcomm_sys as sys;

#[test]
fn epc_get_api_is_resolved_and_the_table_works() {
    let api = sys::api().unwrap_or_else(|e| panic!("loading {}: {e}", sys::default_library()));
    assert!(api.struct_size as usize >= std::mem::size_of::<sys::EpcApi>());

    let get_version = api.get_version.expect("get_version entry");
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    assert_eq!(unsafe { get_version(&mut major, &mut minor, &mut patch) }, sys::EPC_OK);
    assert_eq!(major, sys::EPC_ABI_MAJOR);
    assert_eq!(api.abi_version, major * 10000 + minor * 100 + patch);

    // A real call with a real failure, and its message, all through the table.
    let plan_query = api.plan_query.expect("plan_query entry");
    let last_error = api.last_error.expect("last_error entry");
    let config = sys::EpcGroupConfig {
        struct_size: std::mem::size_of::<sys::EpcGroupConfig>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        num_experts: 256,
        ..Default::default()
    };
    let mut plan = sys::EpcPlan {
        struct_size: std::mem::size_of::<sys::EpcPlan>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        ..Default::default()
    };
    let status = unsafe { plan_query(&config, 4, 4, 1, &mut plan) };
    assert_eq!(status, sys::EPC_ERR_INVALID_ARGUMENT);
    let mut buf = [0u8; 256];
    let mut length = 0;
    assert_eq!(unsafe { last_error(buf.as_mut_ptr().cast(), buf.len(), &mut length) }, sys::EPC_OK);
    let message = CStr::from_bytes_until_nul(&buf).unwrap().to_str().unwrap();
    assert!(message.contains("hidden"), "{message:?}");
    assert_eq!(length, message.len());

    let status_string = api.status_string.expect("status_string entry");
    let text = unsafe { CStr::from_ptr(status_string(12345)) };
    assert_eq!(text.to_str().unwrap(), "unknown status");
}

#[test]
fn a_missing_library_is_an_error_naming_it() {
    let error = sys::load("/nonexistent/libepcomm.so.2").unwrap_err();
    assert_eq!(error.status, None);
    assert!(error.message.contains("/nonexistent/libepcomm.so.2"), "{}", error.message);
}

#[test]
fn a_library_without_epc_get_api_is_refused() {
    // The C library is certainly loadable and certainly has no epc_get_api.
    let error = sys::load("libc.so.6").unwrap_err();
    assert!(error.message.contains("epc_get_api"), "{}", error.message);
}

/// The handle and step entries of a dlopen'd table reach the library: each refuses a NULL
/// handle (or group) with INVALID_ARGUMENT and leaves this thread a message saying so. The
/// library checks the handle first, so the zeroed argument structs are never looked at.
#[test]
fn the_handle_entries_of_the_table_reach_the_library() {
    use std::ptr::{null, null_mut};
    let api = sys::api().expect("table");
    let message = || {
        let mut buf = [0u8; 256];
        let mut length = 0;
        unsafe { api.last_error.unwrap()(buf.as_mut_ptr().cast(), buf.len(), &mut length) };
        String::from_utf8_lossy(&buf[..length.min(buf.len())]).into_owned()
    };
    let expect_refusal = |name: &str, status: sys::EpcStatus, words: &str| {
        assert_eq!(status, sys::EPC_ERR_INVALID_ARGUMENT, "{name}");
        let text = message();
        assert!(text.contains(words), "{name}: {text:?}");
    };
    let dispatch_args = sys::EpcDispatchArgs {
        struct_size: std::mem::size_of::<sys::EpcDispatchArgs>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        ..Default::default()
    };
    let combine_args = sys::EpcCombineArgs {
        struct_size: std::mem::size_of::<sys::EpcCombineArgs>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        flags: sys::EPC_STEP_SEND_ONLY,
        ..Default::default()
    };
    let mut info = sys::EpcHandleInfo {
        struct_size: std::mem::size_of::<sys::EpcHandleInfo>() as u32,
        abi_version: sys::EPC_ABI_VERSION,
        ..Default::default()
    };
    let mut out = null_mut();
    unsafe {
        let status = api.handle_create.unwrap()(null_mut(), null(), null(), null_mut(), &mut out);
        expect_refusal("handle_create", status, "group is NULL");
        assert!(out.is_null(), "out-parameters are written only on success");
        expect_refusal(
            "handle_update",
            api.handle_update.unwrap()(null_mut(), null(), null_mut()),
            "handle is NULL",
        );
        let status = api.handle_query.unwrap()(null(), &mut info);
        expect_refusal("handle_query", status, "handle is NULL");
        assert_eq!(info.num_tokens, 0, "out-parameters are written only on success");
        let status = api.dispatch.unwrap()(null_mut(), &dispatch_args, null_mut());
        expect_refusal("dispatch", status, "handle is NULL");
        let status = api.combine.unwrap()(null_mut(), &combine_args, null_mut());
        expect_refusal("combine", status, "handle is NULL");
        expect_refusal("complete", api.complete.unwrap()(null_mut(), 0, null_mut()), "handle is NULL");
        let async_error = api.group_async_error.expect("group_async_error entry");
        expect_refusal("group_async_error", async_error(null()), "group is NULL");
        // destroy(NULL) is the documented no-op, and a success clears the message.
        assert_eq!(api.handle_destroy.unwrap()(null_mut()), sys::EPC_OK);
    }
    assert_eq!(message(), "");
}
