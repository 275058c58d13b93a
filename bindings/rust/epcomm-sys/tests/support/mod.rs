// SPDX-License-Identifier: Apache-2.0
//! Helpers shared by the integration tests of epcomm-sys.
pub mod json;
