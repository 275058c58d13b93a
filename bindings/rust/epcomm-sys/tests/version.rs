// SPDX-License-Identifier: Apache-2.0
//! The crate's version names the library version its declarations were generated from:
//! `0.x.y+M.m.p` with M.m.p = EPC_ABI_MAJOR.MINOR.PATCH of ffi.rs. build.rs derives the
//! library's accepted version range and SONAME from that metadata, so the two must agree.

use epcomm_sys as sys;

#[test]
fn the_build_metadata_is_the_generated_abi_version() {
    let version = env!("CARGO_PKG_VERSION");
    let generated = format!("{}.{}.{}", sys::EPC_ABI_MAJOR, sys::EPC_ABI_MINOR, sys::EPC_ABI_PATCH);
    assert_eq!(
        version.split_once('+').map(|(_, metadata)| metadata),
        Some(generated.as_str()),
        "epcomm-sys {version}: set version = \"0.x.y+{generated}\" in epcomm-sys/Cargo.toml"
    );
    assert_eq!(sys::SONAME, format!("libepcomm.so.{}", sys::EPC_ABI_MAJOR));
}
