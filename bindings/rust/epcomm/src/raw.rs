// SPDX-License-Identifier: Apache-2.0
//! [`DevicePtr`] and [`RawStream`]: device addresses and CUDA streams as other CUDA crates
//! hand them out, converted with `From`/`TryFrom` so that epcomm depends on none of them.
//!
//! | where it comes from | its type | conversion |
//! | --- | --- | --- |
//! | `cudarc` (`CudaSlice::device_ptr`), the CUDA driver API | `CUdeviceptr` = `u64` | `DevicePtr::from` |
//! | a raw or `NonNull` pointer (`cudaMalloc`, `tch::Tensor::data_ptr`) | `*mut T`, `*const T`, `NonNull<T>` | `DevicePtr::from` |
//! | an integer address from Python or C++ (`tensor.data_ptr()`) | `i64` | `DevicePtr::try_from` (negative: refused) |
//! | `cudarc` (`CudaStream::cu_stream`), `candle` through cudarc, `cudaStream_t` | `*mut CUstream_st` | `RawStream::from` |
//! | an integer stream from Python (`torch.cuda.Stream.cuda_stream`) | `i64` | `RawStream::try_from` |
//!
//! These are plain values: they borrow nothing and are safe to make. Using one is not:
//! [`TensorRef::from_raw_parts`](crate::TensorRef::from_raw_parts) and
//! [`StreamRef::from_raw`](crate::StreamRef::from_raw) take anything `Into` them and are
//! `unsafe`, because the caller promises that the memory or stream outlives the work.
//!
//! ```no_run
//! # #![allow(non_camel_case_types)]
//! use epcomm::{Dtype, StreamRef, TensorRef};
//! // What cudarc's CudaSlice::device_ptr() and CudaStream::cu_stream() return:
//! # pub enum CUstream_st {}
//! # fn cudarc_values() -> (u64, *mut CUstream_st) { (0, std::ptr::null_mut()) }
//! let (device_ptr, cu_stream): (u64, *mut CUstream_st) = cudarc_values();
//! // SAFETY: the slice holds 128 x 7168 bf16 and the stream lives, for the tensor's uses.
//! let x = unsafe { TensorRef::from_raw_parts(device_ptr, Dtype::BF16, &[128, 7168]) }?;
//! let stream = unsafe { StreamRef::from_raw(cu_stream) };
//! # let _ = (x, stream);
//! # Ok::<(), epcomm::Error>(())
//! ```

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

use crate::{Error, Result, Status};

/// A device address (`CUdeviceptr`, the `data` of a tensor descriptor). 0 is NULL.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DevicePtr(u64);

impl DevicePtr {
    pub const NULL: DevicePtr = DevicePtr(0);

    pub const fn new(address: u64) -> DevicePtr {
        DevicePtr(address)
    }

    pub const fn address(self) -> u64 {
        self.0
    }

    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// As the C ABI takes it.
    pub fn as_ptr(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
}

/// `CUdeviceptr` (cudarc, the driver API).
impl From<u64> for DevicePtr {
    fn from(address: u64) -> DevicePtr {
        DevicePtr(address)
    }
}

impl<T> From<*mut T> for DevicePtr {
    fn from(ptr: *mut T) -> DevicePtr {
        DevicePtr(ptr as usize as u64)
    }
}

impl<T> From<*const T> for DevicePtr {
    fn from(ptr: *const T) -> DevicePtr {
        DevicePtr(ptr as usize as u64)
    }
}

impl<T> From<NonNull<T>> for DevicePtr {
    fn from(ptr: NonNull<T>) -> DevicePtr {
        DevicePtr::from(ptr.as_ptr())
    }
}

/// An address held as a signed integer (Python's `data_ptr()`, C++ `int64_t`); negative
/// values are not addresses and are refused with INVALID_ARGUMENT.
impl TryFrom<i64> for DevicePtr {
    type Error = Error;
    fn try_from(address: i64) -> Result<DevicePtr> {
        u64::try_from(address).map(DevicePtr).map_err(|_| {
            Error::new(Status::INVALID_ARGUMENT, format!("device address {address} is negative"))
        })
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

/// A `cudaStream_t` / `CUstream` value; NULL is CUDA's legacy default stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawStream(*mut c_void);

// SAFETY: a stream handle is a value CUDA accepts from any thread.
unsafe impl Send for RawStream {}
unsafe impl Sync for RawStream {}

impl RawStream {
    pub const LEGACY_DEFAULT: RawStream = RawStream(std::ptr::null_mut());

    pub fn as_ptr(self) -> *mut c_void {
        self.0
    }
}

impl Default for RawStream {
    fn default() -> RawStream {
        RawStream::LEGACY_DEFAULT
    }
}

/// `cudaStream_t`, cudarc's `CUstream` (`*mut CUstream_st`), or any other pointer type a
/// binding gives streams.
impl<T> From<*mut T> for RawStream {
    fn from(stream: *mut T) -> RawStream {
        RawStream(stream.cast())
    }
}

impl<T> From<NonNull<T>> for RawStream {
    fn from(stream: NonNull<T>) -> RawStream {
        RawStream(stream.as_ptr().cast())
    }
}

/// A stream held as a signed integer (`torch.cuda.Stream.cuda_stream`); negative values are
/// refused with INVALID_ARGUMENT.
impl TryFrom<i64> for RawStream {
    type Error = Error;
    fn try_from(stream: i64) -> Result<RawStream> {
        usize::try_from(stream)
            .map(|s| RawStream(s as *mut c_void))
            .map_err(|_| Error::new(Status::INVALID_ARGUMENT, format!("stream handle {stream} is negative")))
    }
}

impl fmt::Debug for RawStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawStream({:p})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dtype, StreamRef, TensorRef};

    #[allow(non_camel_case_types)]
    enum CUstream_st {}

    #[test]
    fn device_pointers_keep_their_address() {
        let address = 0x7f00_0000_1000u64;
        assert_eq!(DevicePtr::from(address).address(), address);
        assert_eq!(DevicePtr::from(address as usize as *mut u16).address(), address);
        assert_eq!(DevicePtr::from(address as usize as *const f32).address(), address);
        let non_null = NonNull::new(address as usize as *mut u8).unwrap();
        assert_eq!(DevicePtr::from(non_null).as_ptr(), address as usize as *mut c_void);
        assert_eq!(DevicePtr::try_from(address as i64).unwrap().address(), address);
        assert!(DevicePtr::default().is_null());
    }

    #[test]
    fn negative_integers_are_not_addresses_or_streams() {
        let error = DevicePtr::try_from(-4096i64).unwrap_err();
        assert_eq!(error.status(), Status::INVALID_ARGUMENT);
        assert!(error.message().contains("-4096"), "{error}");
        assert_eq!(RawStream::try_from(-1i64).unwrap_err().status(), Status::INVALID_ARGUMENT);
    }

    #[test]
    fn streams_keep_their_handle() {
        let cu_stream = 0x5555_0000usize as *mut CUstream_st;
        assert_eq!(RawStream::from(cu_stream).as_ptr(), cu_stream.cast::<c_void>());
        assert_eq!(RawStream::try_from(0x5555_0000i64).unwrap(), RawStream::from(cu_stream));
        assert_eq!(RawStream::default().as_ptr(), std::ptr::null_mut());
        let stream = unsafe { StreamRef::from_raw(cu_stream) };
        assert_eq!(stream.as_raw(), cu_stream.cast::<c_void>());
        assert_eq!(RawStream::from(stream), RawStream::from(cu_stream));
    }

    #[test]
    fn tensors_take_any_device_pointer() {
        let address = 0x7f00_0000_2000u64;
        let from_u64 = unsafe { TensorRef::from_raw_parts(address, Dtype::BF16, &[2, 8]) }.unwrap();
        let from_ptr =
            unsafe { TensorRef::from_raw_parts(address as usize as *mut u16, Dtype::BF16, &[2, 8]) }.unwrap();
        let from_int = unsafe {
            TensorRef::from_raw_parts(DevicePtr::try_from(address as i64).unwrap(), Dtype::BF16, &[2, 8])
        }
        .unwrap();
        for t in [from_u64, from_ptr, from_int] {
            assert_eq!(t.data(), address as usize as *mut c_void);
            assert_eq!(DevicePtr::from(t), DevicePtr::new(address));
        }
    }
}
