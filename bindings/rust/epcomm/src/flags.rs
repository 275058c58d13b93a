// SPDX-License-Identifier: Apache-2.0
//! [`Flags`]: the options of the dispatch and combine calls (`EpcFlags`).

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use epcomm_sys as sys;

/// A set of `EPC_FLAG_*` bits. Bits these bindings have no name for are passed through
/// unchanged, so a newer library's flags can be used (and an older library rejects them
/// with INVALID_ARGUMENT naming them).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Flags(pub u32);

impl Flags {
    /// No flag: the call runs both halves of the step.
    pub const NONE: Flags = Flags(0);
    /// Queue only the sending half; [`Handle::complete`](crate::Handle::complete) finishes
    /// the step (`EPC_FLAG_SEND_ONLY`).
    pub const SEND_ONLY: Flags = Flags(sys::EPC_FLAG_SEND_ONLY);
    /// [`Handle::ll_dispatch_fp8`](crate::Handle::ll_dispatch_fp8): round every scale up to
    /// a power of two, so that it is UE8M0-representable (`EPC_FLAG_FP8_POW2_SCALES`, ABI 1.1).
    pub const FP8_POW2_SCALES: Flags = Flags(sys::EPC_FLAG_FP8_POW2_SCALES);
    /// [`HtHandle::combine`](crate::HtHandle::combine): also carry a `[rows, K]` FP32 tensor
    /// back to the tokens' ranks (`EPC_FLAG_BACKWARD_WEIGHTS`, ABI 1.2).
    pub const BACKWARD_WEIGHTS: Flags = Flags(sys::EPC_FLAG_BACKWARD_WEIGHTS);

    /// Every named flag with its name, for `Debug` and for checking against the header.
    pub const NAMED: &'static [(&'static str, Flags)] = &[
        ("SEND_ONLY", Flags::SEND_ONLY),
        ("FP8_POW2_SCALES", Flags::FP8_POW2_SCALES),
        ("BACKWARD_WEIGHTS", Flags::BACKWARD_WEIGHTS),
    ];

    /// The raw bits, as the C ABI carries them.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, other: Flags) {
        self.0 |= other.0;
    }
}

impl fmt::Debug for Flags {
    /// `Flags(SEND_ONLY)`, `Flags(NONE)`, or `Flags(SEND_ONLY | 0x8)` for unnamed bits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut rest = self.0;
        for (name, flag) in Flags::NAMED {
            if self.contains(*flag) && flag.0 != 0 {
                parts.push((*name).to_string());
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            parts.push(format!("{rest:#x}"));
        }
        if parts.is_empty() {
            parts.push("NONE".to_string());
        }
        write!(f, "Flags({})", parts.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_print() {
        assert_eq!(Flags::default(), Flags::NONE);
        assert!(Flags::SEND_ONLY.contains(Flags::NONE));
        assert!(!Flags::NONE.contains(Flags::SEND_ONLY));
        let mut flags = Flags::NONE;
        flags |= Flags::SEND_ONLY;
        assert_eq!(flags, Flags::SEND_ONLY);
        assert_eq!((Flags::SEND_ONLY | Flags(0x8)).bits(), sys::EPC_FLAG_SEND_ONLY | 0x8);
        assert_eq!(format!("{:?}", Flags::NONE), "Flags(NONE)");
        assert_eq!(format!("{:?}", Flags::SEND_ONLY | Flags(0x8)), "Flags(SEND_ONLY | 0x8)");
        assert_eq!(Flags::FP8_POW2_SCALES.bits(), sys::EPC_FLAG_FP8_POW2_SCALES);
        assert_eq!(
            format!("{:?}", Flags::SEND_ONLY | Flags::FP8_POW2_SCALES),
            "Flags(SEND_ONLY | FP8_POW2_SCALES)"
        );
        assert_eq!(Flags::BACKWARD_WEIGHTS.bits(), sys::EPC_FLAG_BACKWARD_WEIGHTS);
        assert_eq!(format!("{:?}", Flags::BACKWARD_WEIGHTS | Flags(0x80)), "Flags(BACKWARD_WEIGHTS | 0x80)");
    }
}
