// SPDX-License-Identifier: Apache-2.0
//! [`StreamRef`]: a borrowed CUDA stream.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use crate::RawStream;

/// A `cudaStream_t` borrowed for `'a`. These bindings never create or destroy streams: take
/// them from your CUDA binding or framework. The stream-ordered calls enqueue work on it.
#[derive(Clone, Copy)]
pub struct StreamRef<'a> {
    raw: *mut c_void,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: a cudaStream_t is a handle CUDA accepts from any thread.
unsafe impl Send for StreamRef<'_> {}
unsafe impl Sync for StreamRef<'_> {}

impl StreamRef<'static> {
    /// CUDA's legacy default stream (NULL), which synchronises with every other stream of
    /// the device.
    pub const LEGACY_DEFAULT: StreamRef<'static> =
        StreamRef { raw: std::ptr::null_mut(), _borrow: PhantomData };
}

impl<'a> StreamRef<'a> {
    /// Borrow `stream`: anything that converts into a [`RawStream`] (`cudaStream_t`,
    /// cudarc's `CUstream`, an integer stream from Python through [`RawStream::try_from`]).
    ///
    /// # Safety
    /// `stream` must be NULL or a valid `cudaStream_t` of the device the calls using it run
    /// on, and stay valid (not destroyed) for `'a`.
    pub unsafe fn from_raw(stream: impl Into<RawStream>) -> StreamRef<'a> {
        StreamRef { raw: stream.into().as_ptr(), _borrow: PhantomData }
    }

    pub fn as_raw(self) -> *mut c_void {
        self.raw
    }
}

impl From<StreamRef<'_>> for RawStream {
    fn from(stream: StreamRef<'_>) -> RawStream {
        RawStream::from(stream.raw)
    }
}

impl fmt::Debug for StreamRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamRef({:p})", self.raw)
    }
}
