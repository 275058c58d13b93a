// SPDX-License-Identifier: Apache-2.0
//! [`TensorRef`]: a borrowed view of device memory, as dispatch and combine will take it.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use epcomm_sys as sys;

use crate::{DevicePtr, Dtype, Error, Result, Status};

/// The most dimensions a tensor descriptor holds (`EPC_TENSOR_MAX_DIMS`).
pub const MAX_DIMS: usize = sys::EPC_TENSOR_MAX_DIMS as usize;

/// A strided view of device memory borrowed for `'a` (`EpcTensor`), with DLPack's meaning:
/// `shape` and `strides` count elements, and a contiguous tensor has all-zero strides in
/// the descriptor. It only describes memory; the library reads or writes it in the
/// stream-ordered calls it is passed to, so `'a` must cover that work, not just the call.
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    raw: sys::EpcTensor,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: the descriptor is an address and a shape; using the memory behind it is subject
// to the unsafe constructors' contract, from whichever thread the descriptor is used.
unsafe impl Send for TensorRef<'_> {}
unsafe impl Sync for TensorRef<'_> {}

impl<'a> TensorRef<'a> {
    /// A row-major contiguous tensor of `shape` at `data`.
    ///
    /// # Safety
    /// `data` must point to device memory holding the whole tensor in `dtype`, that stays
    /// allocated, and is not used in conflicting ways, for `'a` (including stream-ordered
    /// work enqueued on it).
    ///
    /// `data` is anything that converts into a [`DevicePtr`]: a raw or `NonNull` pointer,
    /// a `CUdeviceptr` (`u64`, as cudarc gives it), or a [`DevicePtr`] made with
    /// `DevicePtr::try_from(i64)`.
    pub unsafe fn from_raw_parts(
        data: impl Into<DevicePtr>,
        dtype: Dtype,
        shape: &[i64],
    ) -> Result<TensorRef<'a>> {
        Self::describe(data.into().as_ptr(), dtype, shape, None)
    }

    /// A strided tensor: `strides[i]` elements between neighbours along dimension `i`.
    ///
    /// # Safety
    /// As [`from_raw_parts`](TensorRef::from_raw_parts), for every element the strides reach.
    pub unsafe fn from_raw_parts_strided(
        data: impl Into<DevicePtr>,
        dtype: Dtype,
        shape: &[i64],
        strides: &[i64],
    ) -> Result<TensorRef<'a>> {
        Self::describe(data.into().as_ptr(), dtype, shape, Some(strides))
    }

    fn describe(
        data: *mut c_void,
        dtype: Dtype,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<TensorRef<'a>> {
        let invalid = |message: String| Error::new(Status::INVALID_ARGUMENT, message);
        if shape.len() > MAX_DIMS {
            return Err(invalid(format!("a tensor has at most {MAX_DIMS} dimensions; got shape {shape:?}")));
        }
        if let Some(extent) = shape.iter().find(|&&extent| extent < 0) {
            return Err(invalid(format!("tensor extent {extent} is negative (shape {shape:?})")));
        }
        if let Some(strides) = strides {
            if strides.len() != shape.len() {
                return Err(invalid(format!("{} strides for {} dimensions", strides.len(), shape.len())));
            }
        }
        let mut raw = sys::EpcTensor { data, dtype: dtype.0, ndim: shape.len() as i32, ..Default::default() };
        raw.shape[..shape.len()].copy_from_slice(shape);
        if let Some(strides) = strides {
            raw.strides[..strides.len()].copy_from_slice(strides);
        }
        Ok(TensorRef { raw, _borrow: PhantomData })
    }

    pub fn data(&self) -> *mut c_void {
        self.raw.data
    }

    pub fn dtype(&self) -> Dtype {
        Dtype(self.raw.dtype)
    }

    pub fn shape(&self) -> &[i64] {
        &self.raw.shape[..self.raw.ndim as usize]
    }

    /// The strides as given, or None for a contiguous tensor (all-zero in the descriptor).
    pub fn strides(&self) -> Option<&[i64]> {
        let strides = &self.raw.strides[..self.raw.ndim as usize];
        strides.iter().any(|&s| s != 0).then_some(strides)
    }

    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape().iter().product()
    }

    /// The C descriptor, for calling epcomm-sys directly.
    pub fn as_raw(&self) -> &sys::EpcTensor {
        &self.raw
    }
}

impl From<TensorRef<'_>> for DevicePtr {
    fn from(tensor: TensorRef<'_>) -> DevicePtr {
        DevicePtr::from(tensor.raw.data)
    }
}

impl fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("data", &self.raw.data)
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_address() -> *mut c_void {
        0x7f00_0000_1000usize as *mut c_void
    }

    #[test]
    fn contiguous_tensor_fills_the_descriptor() {
        let t = unsafe { TensorRef::from_raw_parts(fake_address(), Dtype::BF16, &[128, 7168]) }.unwrap();
        assert_eq!(t.shape(), &[128, 7168]);
        assert_eq!(t.strides(), None);
        assert_eq!(t.numel(), 128 * 7168);
        let raw = t.as_raw();
        assert_eq!((raw.ndim, raw.dtype), (2, sys::EPC_DTYPE_BF16));
        assert_eq!(raw.shape, [128, 7168, 0, 0]);
        assert_eq!(raw.strides, [0; 4]);
    }

    #[test]
    fn strided_tensor_keeps_its_strides() {
        let t = unsafe { TensorRef::from_raw_parts_strided(fake_address(), Dtype::FP32, &[4, 8], &[16, 1]) }
            .unwrap();
        assert_eq!(t.strides(), Some(&[16, 1][..]));
    }

    #[test]
    fn bad_shapes_are_invalid_arguments() {
        let five = unsafe { TensorRef::from_raw_parts(fake_address(), Dtype::BF16, &[1, 1, 1, 1, 1]) };
        assert_eq!(five.unwrap_err().status(), Status::INVALID_ARGUMENT);
        let negative = unsafe { TensorRef::from_raw_parts(fake_address(), Dtype::BF16, &[-1]) };
        assert_eq!(negative.unwrap_err().status(), Status::INVALID_ARGUMENT);
        let mismatch =
            unsafe { TensorRef::from_raw_parts_strided(fake_address(), Dtype::BF16, &[2, 2], &[1]) };
        assert_eq!(mismatch.unwrap_err().status(), Status::INVALID_ARGUMENT);
    }
}
