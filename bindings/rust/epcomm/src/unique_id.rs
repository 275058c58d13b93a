// SPDX-License-Identifier: Apache-2.0
//! [`UniqueId`]: the token every rank needs to join one communicator.

use std::fmt;

use epcomm_sys as sys;

use crate::library::{check, entry, library};
use crate::{Error, Result, Status};

/// Bytes of a unique id (`EPC_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = sys::EPC_UNIQUE_ID_BYTES as usize;

/// An NCCL unique id: created once, on one process, and handed to every rank (through a
/// file, a socket, an environment variable as [`to_hex`](UniqueId::to_hex), or by copying it
/// to threads in one process). It is plain bytes, so it is `Copy`, `Send` and `Sync`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; UNIQUE_ID_BYTES],
}

impl UniqueId {
    /// A new id (`epc_unique_id_create`). Local, blocking, thread-safe.
    pub fn new() -> Result<UniqueId> {
        let api = library()?;
        let create = entry!(api, unique_id_create);
        let mut raw = sys::EpcUniqueId::default();
        // SAFETY: raw is a valid out-parameter.
        check(api, unsafe { create(&mut raw) })?;
        Ok(UniqueId { bytes: raw.bytes })
    }

    /// An id received from the rank that created it.
    pub const fn from_bytes(bytes: [u8; UNIQUE_ID_BYTES]) -> UniqueId {
        UniqueId { bytes }
    }

    pub const fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        &self.bytes
    }

    /// The id as lowercase hex (256 characters), e.g. to pass it in an environment variable.
    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse [`to_hex`](UniqueId::to_hex)'s form; INVALID_ARGUMENT for anything else.
    pub fn from_hex(text: &str) -> Result<UniqueId> {
        let text = text.trim();
        let invalid = || {
            Error::new(
                Status::INVALID_ARGUMENT,
                format!("a unique id is {} hex digits; got {:?}", 2 * UNIQUE_ID_BYTES, text),
            )
        };
        if text.len() != 2 * UNIQUE_ID_BYTES || !text.is_ascii() {
            return Err(invalid());
        }
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| invalid())?;
        }
        Ok(UniqueId { bytes })
    }

    pub(crate) fn as_raw(&self) -> sys::EpcUniqueId {
        sys::EpcUniqueId { bytes: self.bytes }
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({}...)", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let id = UniqueId::from_bytes(bytes);
        assert_eq!(UniqueId::from_hex(&id.to_hex()).unwrap(), id);
        assert_eq!(UniqueId::from_hex("abc").unwrap_err().status(), Status::INVALID_ARGUMENT);
        let not_hex = "zz".repeat(UNIQUE_ID_BYTES);
        assert_eq!(UniqueId::from_hex(&not_hex).unwrap_err().status(), Status::INVALID_ARGUMENT);
    }
}
