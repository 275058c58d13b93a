// SPDX-License-Identifier: Apache-2.0
//! The few CUDA calls the GPU tests need (make a device current, allocate, copy, wait),
//! through the CUDA driver API loaded at run time from `libcuda.so.1`. Loading it at run
//! time keeps CUDA out of the crates and out of the test binaries' link line: the binaries
//! build on machines without CUDA, and on a GPU machine the driver library is always on
//! the loader's path (unlike the toolkit's libcudart). The driver's primary context is the
//! one the CUDA runtime inside libepcomm uses, so memory allocated here is usable there.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use epcomm::{Dtype, TensorRef};

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;

type CuResult = c_int;
type DevicePtr = u64;

struct Driver {
    init: unsafe extern "C" fn(u32) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(DevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
    memset_d8: unsafe extern "C" fn(DevicePtr, u8, usize) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

fn driver() -> Result<&'static Driver, String> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Driver, String> {
    // SAFETY: a C string literal and the platform's flag value.
    let lib = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) };
    if lib.is_null() {
        return Err("cannot dlopen libcuda.so.1 (no NVIDIA driver on this machine?)".into());
    }
    // SAFETY (every resolve): each field's type spells the C signature of the driver API
    // function of that name (CUdeviceptr is a 64-bit integer, CUresult and CUdevice are
    // ints, a CUcontext is a pointer).
    unsafe {
        Ok(Driver {
            init: resolve(lib, c"cuInit")?,
            device_get: resolve(lib, c"cuDeviceGet")?,
            primary_ctx_retain: resolve(lib, c"cuDevicePrimaryCtxRetain")?,
            ctx_set_current: resolve(lib, c"cuCtxSetCurrent")?,
            ctx_synchronize: resolve(lib, c"cuCtxSynchronize")?,
            mem_alloc: resolve(lib, c"cuMemAlloc_v2")?,
            mem_free: resolve(lib, c"cuMemFree_v2")?,
            memcpy_htod: resolve(lib, c"cuMemcpyHtoD_v2")?,
            memcpy_dtoh: resolve(lib, c"cuMemcpyDtoH_v2")?,
            memset_d8: resolve(lib, c"cuMemsetD8_v2")?,
            get_error_string: resolve(lib, c"cuGetErrorString")?,
        })
    }
}

/// The symbol `name` of `lib` as the function pointer type `F`.
///
/// # Safety
/// `lib` is a live library handle and `F` the type of the function `name` names.
unsafe fn resolve<F>(lib: *mut c_void, name: &CStr) -> Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let found = dlsym(lib, name.as_ptr());
    if found.is_null() {
        return Err(format!("libcuda.so.1 has no {name:?}"));
    }
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&found))
}

fn check(driver: &Driver, what: &str, result: CuResult) -> Result<(), String> {
    if result == 0 {
        return Ok(());
    }
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: text is a valid out-pointer; the driver returns a static string or fails.
    let known = unsafe { (driver.get_error_string)(result, &mut text) } == 0 && !text.is_null();
    let name =
        if known { unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned() } else { String::new() };
    Err(format!("{what} failed: CUDA driver error {result} {name}"))
}

/// Make GPU `ordinal`'s primary context current on the calling thread.
pub fn use_device(ordinal: i32) -> Result<(), String> {
    let d = driver()?;
    let mut device = 0;
    let mut context = std::ptr::null_mut();
    // SAFETY: valid out-pointers; these calls take no other pointers.
    unsafe {
        check(d, "cuInit", (d.init)(0))?;
        check(d, "cuDeviceGet", (d.device_get)(&mut device, ordinal))?;
        check(d, "cuDevicePrimaryCtxRetain", (d.primary_ctx_retain)(&mut context, device))?;
        check(d, "cuCtxSetCurrent", (d.ctx_set_current)(context))
    }
}

/// Wait for all work of the current device.
pub fn synchronize() -> Result<(), String> {
    let d = driver()?;
    // SAFETY: no arguments.
    check(d, "cuCtxSynchronize", unsafe { (d.ctx_synchronize)() })
}

/// Device memory of the current context, zeroed, freed on drop.
pub struct DeviceBuffer {
    ptr: DevicePtr,
    bytes: usize,
}

impl DeviceBuffer {
    pub fn zeroed(bytes: usize) -> Result<DeviceBuffer, String> {
        let d = driver()?;
        let mut ptr = 0;
        // SAFETY: ptr is a valid out-pointer; never 0 bytes, so the pointer is never NULL.
        check(d, "cuMemAlloc", unsafe { (d.mem_alloc)(&mut ptr, bytes.max(16)) })?;
        let buffer = DeviceBuffer { ptr, bytes };
        buffer.clear()?;
        Ok(buffer)
    }

    pub fn clear(&self) -> Result<(), String> {
        let d = driver()?;
        // SAFETY: the range lies inside this allocation.
        check(d, "cuMemsetD8", unsafe { (d.memset_d8)(self.ptr, 0, self.bytes) })
    }

    /// Copy `data` to the start of the buffer (synchronous).
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<(), String> {
        let bytes = std::mem::size_of_val(data);
        assert!(bytes <= self.bytes, "upload of {bytes} bytes into {}", self.bytes);
        let d = driver()?;
        // SAFETY: both ranges are valid for `bytes` bytes.
        check(d, "cuMemcpyHtoD", unsafe { (d.memcpy_htod)(self.ptr, data.as_ptr().cast(), bytes) })
    }

    /// The first `count` elements (synchronous, after all work of the device).
    pub fn download<T: Copy + Default>(&self, count: usize) -> Result<Vec<T>, String> {
        let mut out = vec![T::default(); count];
        let bytes = std::mem::size_of_val(out.as_slice());
        assert!(bytes <= self.bytes, "download of {bytes} bytes from {}", self.bytes);
        synchronize()?;
        let d = driver()?;
        // SAFETY: both ranges are valid for `bytes` bytes.
        check(d, "cuMemcpyDtoH", unsafe { (d.memcpy_dtoh)(out.as_mut_ptr().cast(), self.ptr, bytes) })?;
        Ok(out)
    }

    /// A tensor over the start of the buffer, borrowed from it; panics if it would not fit.
    pub fn tensor(&self, dtype: Dtype, shape: &[i64]) -> TensorRef<'_> {
        let elements: i64 = shape.iter().product();
        let needed = elements as usize * dtype.size_in_bytes().expect("a sized dtype");
        assert!(
            needed <= self.bytes,
            "a {shape:?} {dtype:?} tensor needs {needed} bytes, the buffer has {}",
            self.bytes
        );
        // SAFETY: the memory is device memory of this buffer, large enough for the tensor,
        // and lives as long as the borrow of self.
        // CUdeviceptr (u64) converts into epcomm::DevicePtr, as a cudarc device pointer would.
        unsafe { TensorRef::from_raw_parts(self.ptr, dtype, shape) }.expect("tensor")
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: ptr came from cuMemAlloc and is freed once. Errors are ignored: a
            // test that got this far has reported what matters.
            unsafe { (d.mem_free)(self.ptr) };
        }
    }
}
