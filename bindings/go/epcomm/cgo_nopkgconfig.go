// SPDX-License-Identifier: Apache-2.0

//go:build epcomm_nopkgconfig

package epcomm

// With -tags epcomm_nopkgconfig: no pkg-config; the header's directory comes from
// CGO_CFLAGS (-I.../capi/include) and the library's from CGO_LDFLAGS (-L<dir of
// libepcomm.so.2>).

/*
#cgo LDFLAGS: -lepcomm
*/
import "C"
