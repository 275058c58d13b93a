// SPDX-License-Identifier: Apache-2.0
//! Finds libepcomm for linking, and refuses one of another ABI major at build time.
//!
//! The library version the declarations were generated from is this crate's build metadata
//! (`0.5.0+2.3.0` -> 2.3.0). The library linked must be of that major and at least that
//! minor: `>= 2.3, < 3`. It is linked by its SONAME, `libepcomm.so.<major>` ([`SONAME`]),
//! never through the unversioned `libepcomm.so` development link, which may name another
//! major (or be missing on a machine with only the runtime).
//!
//! Where the library is looked for, first match wins:
//!   1. `EPCOMM_LIB_DIR`: a directory holding `libepcomm.so.<major>` (Meson's build/capi, an
//!      install's lib/); a directory with only another major's file is a build error;
//!   2. pkg-config (the `pkg-config` crate; honours PKG_CONFIG_PATH and PKG_CONFIG): an
//!      `epcomm.pc` outside the version range is a build error naming both versions;
//!   3. the linker's default search path (no `epcomm.pc` found at all).
//!
//! For 1 and 2 the directory also goes into the run path of this crate's test binaries, and
//! to dependents as DEP_EPCOMM_LIB_DIR (the `epcomm` crate adds it to its own run path, since
//! link arguments of a build script do not reach other packages).
//!
//! With the `dlopen` feature nothing is linked: the library is loaded at run time, and the
//! function table's ABI check (epc_get_api) refuses another major.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=EPCOMM_LIB_DIR");

    let crate_version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let (major, minor) = library_version(&crate_version);
    let soname = format!("libepcomm.so.{major}");
    // lib.rs exports it as SONAME; the tests compare it and the metadata with EPC_ABI_*.
    println!("cargo:rustc-env=EPCOMM_SYS_SONAME={soname}");
    if env::var_os("CARGO_FEATURE_DLOPEN").is_some() {
        return;
    }

    if let Some(dir) = library_dir(&crate_version, major, minor, &soname) {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
    }
    // `verbatim`: the linker gets `-l:libepcomm.so.2`, this exact file, not libepcomm.so.
    println!("cargo:rustc-link-lib=dylib:+verbatim={soname}");
}

/// (major, minor) of the library version in the crate version's build metadata.
fn library_version(crate_version: &str) -> (u32, u32) {
    let parse = || -> Option<(u32, u32)> {
        let (_, metadata) = crate_version.split_once('+')?;
        let mut parts = metadata.split('.').map(str::parse::<u32>);
        Some((parts.next()?.ok()?, parts.next()?.ok()?))
    };
    parse().unwrap_or_else(|| {
        panic!("epcomm-sys version {crate_version} has no +MAJOR.MINOR.PATCH of the library it was generated from")
    })
}

/// The directory to link from, or None for the linker's default search path. Panics (a build
/// error) when what is found is a library of another version.
fn library_dir(crate_version: &str, major: u32, minor: u32, soname: &str) -> Option<PathBuf> {
    let wanted = format!(">= {major}.{minor}, < {}", major + 1);
    if let Some(dir) = env::var_os("EPCOMM_LIB_DIR").filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join(soname).exists() {
            let others = other_majors(&dir);
            panic!(
                "EPCOMM_LIB_DIR={} has no {soname}{}: epcomm-sys {crate_version} needs libepcomm {wanted} \
                 (ABI major {major})",
                dir.display(),
                if others.is_empty() { String::new() } else { format!(" (it has {})", others.join(", ")) },
            );
        }
        return Some(dir);
    }

    let lower = format!("{major}.{minor}");
    let upper = format!("{}", major + 1);
    let mut config = pkg_config::Config::new();
    config.cargo_metadata(false).print_system_libs(false);
    match config.clone().range_version(lower.as_str()..upper.as_str()).probe("epcomm") {
        Ok(library) => library.link_paths.into_iter().next(),
        Err(range_error) => match config.probe("epcomm") {
            // pkg-config knows epcomm, of a version outside the range.
            Ok(found) => panic!(
                "pkg-config found libepcomm {} ({}), but epcomm-sys {crate_version} needs libepcomm {wanted} \
                 (ABI major {major}): point PKG_CONFIG_PATH at an epcomm {major}.x install, or set \
                 EPCOMM_LIB_DIR",
                found.version,
                found
                    .link_paths
                    .first()
                    .map_or_else(|| "in the default library path".to_string(), |p| p.display().to_string()),
            ),
            // No epcomm.pc (or no pkg-config): the linker's default path may still have it.
            Err(_) => {
                println!(
                    "cargo:warning=pkg-config found no epcomm {wanted} ({}); linking {soname} from the \
                     linker's default path",
                    first_line(&range_error.to_string())
                );
                None
            }
        },
    }
}

/// The libepcomm.so.<N> files in `dir` (other majors), for the error message.
fn other_majors(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            name.strip_prefix("libepcomm.so.").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    names.sort();
    names
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
