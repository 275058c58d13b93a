// SPDX-License-Identifier: Apache-2.0
//! Finds libepcomm for linking (std only, no build dependencies).
//!
//! The library is linked by its SONAME, `libepcomm.so.<major>` of the ABI major ffi.rs was
//! generated for ([`SONAME`]), never through the unversioned `libepcomm.so` development
//! link, which may name another major (or be missing on a machine with only the runtime).
//!
//! Where the library is looked for, first match wins:
//!   1. `EPCOMM_LIB_DIR`: a directory holding it (Meson's build/capi, an install's lib/);
//!   2. `pkg-config --libs-only-L epcomm` (an installed epcomm.pc; honours PKG_CONFIG_PATH);
//!   3. the linker's default search path.
//!
//! For 1 and 2 the directory also goes into the run path of this crate's test binaries, and
//! to dependents as DEP_EPCOMM_LIB_DIR (the `epcomm` crate adds it to its own run path, since
//! link arguments of a build script do not reach other packages).
//!
//! With the `dlopen` feature nothing is linked: the library is loaded at run time.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The file linked: the SONAME of ABI major 2 (`EPC_ABI_MAJOR` in ffi.rs; the crate's tests
/// check that the two agree, see `tests/linked.rs`).
const SONAME: &str = "libepcomm.so.2";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=EPCOMM_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // The tests compare it with EPC_ABI_MAJOR.
    println!("cargo:rustc-env=EPCOMM_SYS_SONAME={SONAME}");
    if env::var_os("CARGO_FEATURE_DLOPEN").is_some() {
        return;
    }

    if let Some(dir) = library_dir() {
        if !dir.join(SONAME).exists() {
            println!(
                "cargo:warning=no {SONAME} in {} (from {}); linking will likely fail",
                dir.display(),
                if env::var_os("EPCOMM_LIB_DIR").is_some() { "EPCOMM_LIB_DIR" } else { "pkg-config" }
            );
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
    }
    // `verbatim`: the linker gets `-l:libepcomm.so.2`, this exact file, not libepcomm.so.
    println!("cargo:rustc-link-lib=dylib:+verbatim={SONAME}");
}

/// The directory to link from, or None for the linker's default search path.
fn library_dir() -> Option<PathBuf> {
    if let Some(dir) = env::var_os("EPCOMM_LIB_DIR").filter(|dir| !dir.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    pkg_config_dir()
}

/// The first `-L` directory pkg-config reports for epcomm; None when pkg-config or the
/// package is missing, or when the library lives in a default directory (no `-L` printed).
fn pkg_config_dir() -> Option<PathBuf> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = Command::new(program).args(["--libs-only-L", "epcomm"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .find_map(|flag| flag.strip_prefix("-L").map(PathBuf::from))
}
