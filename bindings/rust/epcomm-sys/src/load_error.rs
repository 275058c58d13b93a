// SPDX-License-Identifier: Apache-2.0
use std::fmt;

/// Why the library's function table could not be obtained: the library was not found or
/// has no `epc_get_api` (dlopen), or `epc_get_api` refused (another ABI major).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The status `epc_get_api` returned, when it was reached at all.
    pub status: Option<crate::EpcStatus>,
    /// What went wrong, in words (including the library's own message where there is one).
    pub message: String,
}

impl LoadError {
    pub(crate) fn new(status: Option<crate::EpcStatus>, message: impl Into<String>) -> Self {
        LoadError { status, message: message.into() }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}
