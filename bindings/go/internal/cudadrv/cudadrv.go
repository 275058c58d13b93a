// SPDX-License-Identifier: Apache-2.0

// Package cudadrv is the little CUDA the binding's GPU tests need (make a device current,
// allocate, copy, wait), through the CUDA driver API loaded at run time from libcuda.so.1.
// Loading it at run time keeps CUDA off the link line: the tests build on machines without
// CUDA, and on a GPU machine the driver library is always on the loader's path (unlike
// the toolkit's libcudart). The driver's primary context is the one the CUDA runtime
// inside libepcomm uses, so memory allocated here is usable there.
//
// It is internal: test support, not part of the binding's API. CUDA state is per OS
// thread, so callers hold runtime.LockOSThread.
package cudadrv

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef unsigned long long cu_ptr;  // CUdeviceptr on 64-bit platforms

static int (*p_init)(unsigned);
static int (*p_device_get)(int*, int);
static int (*p_primary_ctx_retain)(void**, int);
static int (*p_ctx_set_current)(void*);
static int (*p_ctx_synchronize)(void);
static int (*p_mem_alloc)(cu_ptr*, size_t);
static int (*p_mem_free)(cu_ptr);
static int (*p_memcpy_htod)(cu_ptr, const void*, size_t);
static int (*p_memcpy_dtoh)(void*, cu_ptr, size_t);
static int (*p_memset_d8)(cu_ptr, unsigned char, size_t);
static int (*p_get_error_string)(int, const char**);

// Returns NULL on success, else what is missing. Called once (under a sync.Once).
static const char* cudadrv_load(void) {
	void* lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (lib == NULL) return "cannot dlopen libcuda.so.1 (no NVIDIA driver on this machine?)";
#define RESOLVE(field, name) \
	if ((*(void**)(&field) = dlsym(lib, name)) == NULL) return "libcuda.so.1 lacks " name;
	RESOLVE(p_init, "cuInit")
	RESOLVE(p_device_get, "cuDeviceGet")
	RESOLVE(p_primary_ctx_retain, "cuDevicePrimaryCtxRetain")
	RESOLVE(p_ctx_set_current, "cuCtxSetCurrent")
	RESOLVE(p_ctx_synchronize, "cuCtxSynchronize")
	RESOLVE(p_mem_alloc, "cuMemAlloc_v2")
	RESOLVE(p_mem_free, "cuMemFree_v2")
	RESOLVE(p_memcpy_htod, "cuMemcpyHtoD_v2")
	RESOLVE(p_memcpy_dtoh, "cuMemcpyDtoH_v2")
	RESOLVE(p_memset_d8, "cuMemsetD8_v2")
	RESOLVE(p_get_error_string, "cuGetErrorString")
#undef RESOLVE
	return NULL;
}

static int cudadrv_use_device(int ordinal) {
	int device = 0;
	void* context = NULL;
	int result = p_init(0);
	if (result == 0) result = p_device_get(&device, ordinal);
	if (result == 0) result = p_primary_ctx_retain(&context, device);
	if (result == 0) result = p_ctx_set_current(context);
	return result;
}
static int cudadrv_synchronize(void) { return p_ctx_synchronize(); }
static int cudadrv_alloc(size_t bytes, cu_ptr* out) { return p_mem_alloc(out, bytes); }
static int cudadrv_free(cu_ptr ptr) { return p_mem_free(ptr); }
static int cudadrv_upload(cu_ptr dst, const void* src, size_t bytes) { return p_memcpy_htod(dst, src, bytes); }
static int cudadrv_download(void* dst, cu_ptr src, size_t bytes) { return p_memcpy_dtoh(dst, src, bytes); }
static int cudadrv_clear(cu_ptr ptr, size_t bytes) { return p_memset_d8(ptr, 0, bytes); }
static const char* cudadrv_error_string(int result) {
	const char* text = NULL;
	if (p_get_error_string(result, &text) != 0 || text == NULL) return "unknown CUDA driver error";
	return text;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

func load() error {
	loadOnce.Do(func() {
		if missing := C.cudadrv_load(); missing != nil {
			loadErr = fmt.Errorf("cudadrv: %s", C.GoString(missing))
		}
	})
	return loadErr
}

func check(what string, result C.int) error {
	if result == 0 {
		return nil
	}
	return fmt.Errorf("%s failed: CUDA driver error %d %s", what, int(result), C.GoString(C.cudadrv_error_string(result)))
}

// UseDevice makes GPU ordinal's primary context current on the calling OS thread.
func UseDevice(ordinal int) error {
	if err := load(); err != nil {
		return err
	}
	return check("making the device current", C.cudadrv_use_device(C.int(ordinal)))
}

// Synchronize waits for all work of the current device.
func Synchronize() error {
	if err := load(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", C.cudadrv_synchronize())
}

// Buffer is zeroed device memory of the current context; Free releases it.
type Buffer struct {
	ptr   C.cu_ptr
	bytes int
}

// Alloc allocates bytes of device memory (at least 16, so the address is never NULL) and
// zeroes them.
func Alloc(bytes int) (*Buffer, error) {
	if err := load(); err != nil {
		return nil, err
	}
	size := bytes
	if size < 16 {
		size = 16
	}
	var ptr C.cu_ptr
	if err := check("cuMemAlloc", C.cudadrv_alloc(C.size_t(size), &ptr)); err != nil {
		return nil, err
	}
	b := &Buffer{ptr: ptr, bytes: bytes}
	return b, b.Clear()
}

// Address is the device address as an integer, for an epcomm Tensor (epcomm.DevicePtr).
func (b *Buffer) Address() uintptr { return uintptr(b.ptr) }

// Bytes is the size asked for.
func (b *Buffer) Bytes() int { return b.bytes }

// Clear zeroes the buffer.
func (b *Buffer) Clear() error {
	return check("cuMemsetD8", C.cudadrv_clear(b.ptr, C.size_t(b.bytes)))
}

// Free releases the buffer; it must not be used afterwards.
func (b *Buffer) Free() error { return check("cuMemFree", C.cudadrv_free(b.ptr)) }

// Upload copies data to the start of b (synchronous). T must hold no Go pointers.
func Upload[T any](b *Buffer, data []T) error {
	if len(data) == 0 {
		return nil
	}
	bytes := len(data) * int(unsafe.Sizeof(data[0]))
	if bytes > b.bytes {
		return fmt.Errorf("upload of %d bytes into a %d-byte buffer", bytes, b.bytes)
	}
	return check("cuMemcpyHtoD", C.cudadrv_upload(b.ptr, unsafe.Pointer(&data[0]), C.size_t(bytes)))
}

// Download copies the first count elements of b after all work of the device has finished.
func Download[T any](b *Buffer, count int) ([]T, error) {
	out := make([]T, count)
	if count == 0 {
		return out, nil
	}
	bytes := count * int(unsafe.Sizeof(out[0]))
	if bytes > b.bytes {
		return nil, fmt.Errorf("download of %d bytes from a %d-byte buffer", bytes, b.bytes)
	}
	if err := Synchronize(); err != nil {
		return nil, err
	}
	return out, check("cuMemcpyDtoH", C.cudadrv_download(unsafe.Pointer(&out[0]), b.ptr, C.size_t(bytes)))
}
