// SPDX-License-Identifier: Apache-2.0
//! `open_enum!`: a C "enum" (a typedef'd integer plus named constants) as a Rust newtype
//! with associated constants. Unlike a Rust `enum`, it keeps values this version of the
//! bindings does not know, which a newer library may return (the ABI may add codes).

macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($repr:ty) {
            $( $(#[$item_meta:meta])* $item:ident = $value:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(transparent)]
        pub struct $name(pub $repr);

        impl $name {
            $( $(#[$item_meta])* pub const $item: $name = $name($value); )*

            /// Every value these bindings have a name for.
            pub const KNOWN: &'static [$name] = &[$($name::$item),*];

            /// The raw value, as the C ABI carries it.
            pub const fn raw(self) -> $repr {
                self.0
            }

            /// The constant's name (e.g. `"BF16"`), or None for a value these bindings do not know.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( $name::$item => Some(stringify!($item)), )*
                    _ => None,
                }
            }

            /// Whether these bindings have a name for this value.
            pub fn is_known(self) -> bool {
                self.name().is_some()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(name) => write!(f, "{}::{}", stringify!($name), name),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl From<$repr> for $name {
            fn from(raw: $repr) -> Self {
                $name(raw)
            }
        }

        impl From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.0
            }
        }
    };
}

pub(crate) use open_enum;
