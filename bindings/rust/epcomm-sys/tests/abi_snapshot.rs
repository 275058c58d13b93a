// SPDX-License-Identifier: Apache-2.0
//! The generated declarations against the ABI snapshot capi/abi.json: every struct's size,
//! alignment and field offsets and sizes as Rust lays them out, every typedef's size,
//! every constant's value and the set of functions must equal the snapshot entry of the
//! header version ffi.rs was generated from. A wrong field type, a missing field or a stale
//! ffi.rs fails here instead of corrupting memory at run time.
//!
//! The snapshot path comes from EPCOMM_ABI_JSON (set by `meson test`); without it the
//! repository's own capi/abi.json is used.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;

use epcomm_sys::{CONSTANT_VALUES, FUNCTION_NAMES, STRUCT_LAYOUTS, TYPEDEF_LAYOUTS};
use support::json::Json;

fn snapshot_path() -> PathBuf {
    match std::env::var_os("EPCOMM_ABI_JSON") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../capi/abi.json"),
    }
}

/// The snapshot entry for the ABI version the bindings were generated for.
fn snapshot() -> Json {
    let path = snapshot_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the ABI snapshot {}: {e}", path.display()));
    let root = Json::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let version =
        format!("{}.{}.{}", epcomm_sys::EPC_ABI_MAJOR, epcomm_sys::EPC_ABI_MINOR, epcomm_sys::EPC_ABI_PATCH);
    root.get("versions")
        .and_then(|versions| versions.get(&version))
        .unwrap_or_else(|| panic!("{} has no entry versions.{version}", path.display()))
        .clone()
}

fn integer(value: Option<&Json>, what: &str) -> i128 {
    value.and_then(Json::as_i128).unwrap_or_else(|| panic!("snapshot: {what} is missing or not an integer"))
}

#[test]
fn every_struct_matches_the_snapshot_size_alignment_and_field_offsets() {
    let snapshot = snapshot();
    let structs = snapshot.get("structs").and_then(Json::as_object).expect("snapshot: no structs");
    let mut problems = Vec::new();
    let mut checked_fields = 0;

    for layout in STRUCT_LAYOUTS {
        let Some(expected) = structs.get(layout.name) else {
            problems.push(format!("{}: generated, but not in the snapshot", layout.name));
            continue;
        };
        let size = integer(expected.get("size"), &format!("{}.size", layout.name));
        let align = integer(expected.get("align"), &format!("{}.align", layout.name));
        if layout.size as i128 != size {
            problems.push(format!("{}: size {} in Rust, {size} in the snapshot", layout.name, layout.size));
        }
        if layout.align as i128 != align {
            problems
                .push(format!("{}: align {} in Rust, {align} in the snapshot", layout.name, layout.align));
        }
        let fields =
            expected.get("fields").and_then(Json::as_object).expect("snapshot: struct without fields");
        for field in layout.fields {
            let where_ = format!("{}.{}", layout.name, field.name);
            let Some(expected) = fields.get(field.name) else {
                problems.push(format!("{where_}: generated, but not in the snapshot"));
                continue;
            };
            let offset = integer(expected.get("offset"), &format!("{where_}.offset"));
            let size = integer(expected.get("size"), &format!("{where_}.size"));
            if field.offset as i128 != offset {
                problems.push(format!("{where_}: offset {} in Rust, {offset} in the snapshot", field.offset));
            }
            if field.size as i128 != size {
                problems.push(format!("{where_}: size {} in Rust, {size} in the snapshot", field.size));
            }
            checked_fields += 1;
        }
        let generated: BTreeSet<&str> = layout.fields.iter().map(|f| f.name).collect();
        for name in fields.keys() {
            if !generated.contains(name.as_str()) {
                problems.push(format!("{}.{name}: in the snapshot, missing from ffi.rs", layout.name));
            }
        }
    }
    let generated: BTreeSet<&str> = STRUCT_LAYOUTS.iter().map(|s| s.name).collect();
    for name in structs.keys() {
        if !generated.contains(name.as_str()) {
            problems.push(format!("{name}: in the snapshot, missing from ffi.rs"));
        }
    }

    assert!(
        problems.is_empty(),
        "ffi.rs differs from {}:\n  {}",
        snapshot_path().display(),
        problems.join("\n  ")
    );
    assert!(checked_fields > 0, "no fields were compared");
}

#[test]
fn every_typedef_has_the_snapshot_size_and_alignment() {
    let snapshot = snapshot();
    let typedefs = snapshot.get("typedefs").and_then(Json::as_object).expect("snapshot: no typedefs");
    for layout in TYPEDEF_LAYOUTS {
        let expected = typedefs
            .get(layout.name)
            .unwrap_or_else(|| panic!("{}: generated, but not in the snapshot", layout.name));
        assert_eq!(layout.size as i128, integer(expected.get("size"), layout.name), "{} size", layout.name);
        assert_eq!(
            layout.align as i128,
            integer(expected.get("align"), layout.name),
            "{} align",
            layout.name
        );
    }
}

#[test]
fn every_constant_has_the_snapshot_value() {
    let snapshot = snapshot();
    let constants = snapshot.get("constants").and_then(Json::as_object).expect("snapshot: no constants");
    for (name, value) in CONSTANT_VALUES {
        let expected = integer(constants.get(*name), name);
        assert_eq!(*value, expected, "{name}");
    }
    let generated: BTreeSet<&str> = CONSTANT_VALUES.iter().map(|(name, _)| *name).collect();
    let missing: Vec<&String> = constants.keys().filter(|name| !generated.contains(name.as_str())).collect();
    assert!(missing.is_empty(), "constants in the snapshot but not in ffi.rs: {missing:?}");
}

#[test]
fn functions_are_exactly_the_snapshot_functions() {
    let snapshot = snapshot();
    let listed: BTreeSet<&str> = snapshot
        .get("functions")
        .and_then(Json::as_array)
        .expect("snapshot: no functions")
        .iter()
        .map(|f| f.get("name").and_then(Json::as_str).expect("snapshot: function without a name"))
        .collect();
    let generated: BTreeSet<&str> = FUNCTION_NAMES.iter().copied().collect();
    assert_eq!(generated, listed);
}
