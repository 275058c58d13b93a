// SPDX-License-Identifier: Apache-2.0

//go:build !epcomm_nopkgconfig

package epcomm

// The default: cgo asks pkg-config for epcomm's header and library flags (the epcomm.pc
// that `meson install` writes; PKG_CONFIG_PATH for a prefix outside the default paths).

/*
#cgo pkg-config: epcomm
*/
import "C"
