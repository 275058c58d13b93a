// SPDX-License-Identifier: Apache-2.0
//! Bit sets of the ABI: [`DispatchFlags`], [`CombineFlags`], [`HandleFlags`], [`GroupFlags`].

/// `flag_set!`: a `u32` bit set with named bits. Bits without a name are passed through
/// unchanged, so a newer library's flags can be used (and an older library rejects them
/// with INVALID_ARGUMENT naming them).
macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$item_meta:meta])* $item:ident = $value:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// No bit set.
            pub const NONE: $name = $name(0);
            $( $(#[$item_meta])* pub const $item: $name = $name($value); )*

            /// Every named bit with its name, for `Debug` and for checking against the header.
            pub const NAMED: &'static [(&'static str, $name)] = &[$((stringify!($item), $name::$item)),*];

            /// The raw bits, as the C ABI carries them.
            pub const fn bits(self) -> u32 {
                self.0
            }

            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, other: $name) {
                self.0 |= other.0;
            }
        }

        impl core::fmt::Debug for $name {
            /// `Name(A | B)`, `Name(NONE)`, or `Name(A | 0x8)` for unnamed bits.
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut parts: Vec<String> = Vec::new();
                let mut rest = self.0;
                for (name, flag) in $name::NAMED {
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
                write!(f, "{}({})", stringify!($name), parts.join(" | "))
            }
        }
    };
}

use epcomm_sys as sys;

flag_set! {
    /// `EpcDispatchArgs.flags`; set them with [`Dispatch`](crate::Dispatch)'s methods.
    pub struct DispatchFlags {
        /// Queue only the sending half; [`Handle::complete`](crate::Handle::complete) writes
        /// the outputs (`EPC_STEP_SEND_ONLY`; served on low-latency groups in 2.0).
        SEND_ONLY = sys::EPC_STEP_SEND_ONLY,
        /// [`Quant::FP8`](crate::Quant::FP8) into FP32 scales: round each scale up to a power
        /// of two (`EPC_DISPATCH_POW2_SCALES`).
        POW2_SCALES = sys::EPC_DISPATCH_POW2_SCALES,
    }
}

flag_set! {
    /// `EpcCombineArgs.flags`; set them with [`Combine`](crate::Combine)'s methods.
    pub struct CombineFlags {
        /// Queue only the sending half; [`Handle::complete`](crate::Handle::complete) writes
        /// the output (`EPC_STEP_SEND_ONLY`; served on low-latency groups in 2.0).
        SEND_ONLY = sys::EPC_STEP_SEND_ONLY,
    }
}

flag_set! {
    /// `EpcHandleConfig.flags` (`EPC_HANDLE_*`).
    pub struct HandleFlags {
        /// Dispatch zero-fills padding rows and scales (EXPERT_PACKED; not served in 2.0).
        ZERO_PADDING = sys::EPC_HANDLE_ZERO_PADDING,
        /// `out_topk_idx` holds global expert ids (rank * L + local id); else local ids.
        GLOBAL_EXPERT_IDS = sys::EPC_HANDLE_GLOBAL_EXPERT_IDS,
    }
}

flag_set! {
    /// `EpcGroupConfig.flags` (`EPC_GROUP_*`).
    pub struct GroupFlags {
        /// Size the combine window for one row per (token, top-k entry), which
        /// [`Weighting::HOME`](crate::Weighting::HOME) needs (not served in 2.0).
        COMBINE_PER_ENTRY = sys::EPC_GROUP_COMBINE_PER_ENTRY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_print() {
        assert_eq!(DispatchFlags::default(), DispatchFlags::NONE);
        assert!(DispatchFlags::SEND_ONLY.contains(DispatchFlags::NONE));
        assert!(!DispatchFlags::NONE.contains(DispatchFlags::SEND_ONLY));
        let mut flags = DispatchFlags::NONE;
        flags |= DispatchFlags::SEND_ONLY;
        assert_eq!(flags, DispatchFlags::SEND_ONLY);
        assert_eq!((DispatchFlags::SEND_ONLY | DispatchFlags(0x8)).bits(), sys::EPC_STEP_SEND_ONLY | 0x8);
        assert_eq!(format!("{:?}", DispatchFlags::NONE), "DispatchFlags(NONE)");
        assert_eq!(
            format!("{:?}", DispatchFlags::SEND_ONLY | DispatchFlags::POW2_SCALES | DispatchFlags(0x80)),
            "DispatchFlags(SEND_ONLY | POW2_SCALES | 0x80)"
        );
        assert_eq!(format!("{:?}", CombineFlags::SEND_ONLY), "CombineFlags(SEND_ONLY)");
        assert_eq!(
            format!("{:?}", HandleFlags::GLOBAL_EXPERT_IDS | HandleFlags::ZERO_PADDING),
            "HandleFlags(ZERO_PADDING | GLOBAL_EXPERT_IDS)"
        );
        assert_eq!(GroupFlags::COMBINE_PER_ENTRY.bits(), sys::EPC_GROUP_COMBINE_PER_ENTRY);
    }
}
