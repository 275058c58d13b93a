// SPDX-License-Identifier: Apache-2.0
//! Puts the directory epcomm-sys linked libepcomm from into this crate's run path (for its
//! tests and examples): link arguments of epcomm-sys's build script apply to epcomm-sys's
//! own targets only, so each crate that links the library has to say it again.
//! Applications do the same in their build.rs, or set LD_LIBRARY_PATH, or install the
//! library where the loader looks.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_EPCOMM_LIB_DIR");
    if let Some(dir) = std::env::var_os("DEP_EPCOMM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.to_string_lossy());
    }
}
