// SPDX-License-Identifier: Apache-2.0
//! CPU-only calls against the real library: version, status strings, error messages.

use epcomm::{sys, GroupConfig, Status};

#[test]
fn the_loaded_library_has_the_bindings_abi_major() {
    let loaded = epcomm::version().expect("version");
    assert_eq!(loaded.major, epcomm::BINDINGS_ABI.major);
    assert!(loaded >= epcomm::BINDINGS_ABI, "library {loaded} is older than the bindings' header");
}

#[test]
fn known_statuses_print_the_library_text() {
    assert_eq!(Status::OK.to_string(), "success");
    assert_eq!(Status::INVALID_ARGUMENT.to_string(), "invalid argument");
    assert_eq!(Status::INTERNAL.to_string(), "internal error in epcomm");
    for status in Status::KNOWN {
        assert_ne!(status.to_string(), "unknown status", "{status:?}");
    }
}

#[test]
fn unknown_status_codes_are_kept() {
    let unknown = Status(12345);
    assert_eq!(unknown.code(), 12345);
    assert_eq!(unknown.to_string(), "unknown status");
    assert_eq!(format!("{unknown:?}"), "Status(12345)");
    assert!(!unknown.is_known() && !unknown.is_ok());
    for known in Status::KNOWN {
        assert_ne!(unknown, *known);
    }
}

#[test]
fn every_status_code_of_the_header_has_a_constant_and_a_kind() {
    // When the header gains a code, ffi.rs gains it on regeneration and this test asks for
    // the matching Status constant.
    for (name, value) in sys::CONSTANT_VALUES {
        if *name == "EPC_OK" || name.starts_with("EPC_ERR_") {
            let status = Status(*value as i32);
            let expected = name.trim_start_matches("EPC_ERR_").trim_start_matches("EPC_");
            assert_eq!(status.name(), Some(expected), "{name}");
            if !status.is_ok() {
                let kind = epcomm::ErrorKind::of(status);
                assert!(!matches!(kind, epcomm::ErrorKind::Other(_)), "{name} has no ErrorKind");
            }
        }
    }
}

#[test]
fn every_enumerator_and_flag_of_the_header_has_a_constant() {
    use epcomm::{
        CombineFlags, DispatchFlags, Dtype, GroupFlags, HandleFlags, Layout, Mode, Overflow, Pending, Quant,
        RegionKind, ScaleLayout, Sizing, Weighting,
    };
    // A name in a (prefix, values) family must be a constant of the matching type.
    fn named<T: Copy>(family: &[(&str, T)], rest: &str, value: T, eq: impl Fn(T, T) -> bool) -> bool {
        family.iter().any(|(name, v)| *name == rest && eq(*v, value))
    }
    let mut checked = 0;
    for (name, value) in sys::CONSTANT_VALUES {
        let v = *value as u32;
        let known = if let Some(rest) = name.strip_prefix("EPC_DTYPE_") {
            Dtype(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_MODE_") {
            Mode(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_REGION_") {
            RegionKind(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_LAYOUT_") {
            Layout(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_SIZING_") {
            Sizing(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_QUANT_") {
            Quant(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_SCALES_") {
            ScaleLayout(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_WEIGHTING_") {
            Weighting(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_OVERFLOW_") {
            Overflow(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_PENDING_") {
            Pending(v).name() == Some(rest)
        } else if let Some(rest) = name.strip_prefix("EPC_STEP_") {
            named(DispatchFlags::NAMED, rest, DispatchFlags(v), |a, b| a == b)
                && named(CombineFlags::NAMED, rest, CombineFlags(v), |a, b| a == b)
        } else if let Some(rest) = name.strip_prefix("EPC_DISPATCH_") {
            named(DispatchFlags::NAMED, rest, DispatchFlags(v), |a, b| a == b)
        } else if let Some(rest) = name.strip_prefix("EPC_HANDLE_") {
            named(HandleFlags::NAMED, rest, HandleFlags(v), |a, b| a == b)
        } else if let Some(rest) = name.strip_prefix("EPC_GROUP_") {
            named(GroupFlags::NAMED, rest, GroupFlags(v), |a, b| a == b)
        } else {
            continue;
        };
        assert!(known, "{name} has no matching constant in the safe API");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} constants checked");
}

#[test]
fn a_failure_carries_the_library_message_of_this_thread() {
    let config = GroupConfig::new().num_experts(256); // hidden left 0: required
    let error = epcomm::plan_query(&config, 4, 4, 1).unwrap_err();
    assert_eq!(error.status(), Status::INVALID_ARGUMENT);
    assert!(error.message().contains("hidden"), "{:?}", error.message());
    assert_eq!(error.to_string(), format!("invalid argument: {}", error.message()));

    // The message is what epc_last_error still holds on this thread.
    let api = sys::api().unwrap();
    let mut buf = [0u8; 1024];
    let mut length = 0;
    let status = unsafe { api.last_error.unwrap()(buf.as_mut_ptr().cast(), buf.len(), &mut length) };
    assert_eq!(status, sys::EPC_OK);
    assert_eq!(&buf[..length], error.message().as_bytes());

    // Another thread has its own (empty) message.
    let other = std::thread::spawn(move || {
        let mut length = usize::MAX;
        unsafe { api.last_error.unwrap()(std::ptr::null_mut(), 0, &mut length) };
        length
    });
    assert_eq!(other.join().unwrap(), 0);
}

#[test]
fn errors_are_std_errors() {
    fn takes_std_error(_: &dyn std::error::Error) {}
    let error = epcomm::plan_query(&GroupConfig::new(), 4, 4, 1).unwrap_err();
    takes_std_error(&error);
    let boxed: Box<dyn std::error::Error + Send + Sync> = error.into();
    assert!(boxed.to_string().starts_with("invalid argument"));
}
