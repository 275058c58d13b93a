//! Helpers shared by the integration tests of epcomm-sys.
pub mod json;
