# SPDX-License-Identifier: Apache-2.0
"""Tensors: borrowing device memory from other libraries as EpcTensor descriptors.

as_tensor(obj) accepts
  - torch tensors, read directly (data_ptr, shape, stride, dtype, device: from_torch),
  - DLPack producers (`__dlpack__` / `__dlpack_device__`: torch, CuPy, JAX, numpy...),
  - objects with `__cuda_array_interface__` (CuPy, numba, torch.cuda tensors of
    non-bfloat16 dtypes),
  - an EpcTensor (returned as is),
and tensor_from_pointer(pointer, dtype, shape, strides) describes raw device memory.

The result borrows: it keeps the producer (and, for DLPack, the managed tensor) alive until
release() is called or the EpcTensor is collected. Only CUDA device memory is accepted
(host=True: only host memory, for the one field that takes pinned host memory,
out_expert_counts_host), in the dtypes the ABI knows (bf16, fp16, fp32, fp8_e4m3, int32,
int64, uint8, fp8_e5m2, e8m0, e8m0x4, fp4_e2m1x2), with at most EPC_TENSOR_MAX_DIMS
dimensions. Conversion is local and touches neither the GPU nor the
library; an EpcTensor itself is not thread-safe to release from two threads at once
(release is idempotent, but the memory must not be in use while it runs).
"""

import ctypes
import sys
import threading
from typing import Any, Callable, Optional, Sequence, Tuple

from . import _dlpack, _ffi
from ._handles import address
from .enums import DTYPE_ITEMSIZE, Dtype, dtype_names, parse_dtype
from .errors import InvalidTensorError

MAX_DIMS = _ffi.EPC_TENSOR_MAX_DIMS

# (DLDataTypeCode, bits) -> Dtype, for lanes == 1.
_DLPACK_DTYPES = {
    (_dlpack.KDL_BFLOAT, 16): Dtype.BF16,
    (_dlpack.KDL_FLOAT, 16): Dtype.FP16,
    (_dlpack.KDL_FLOAT, 32): Dtype.FP32,
    (_dlpack.KDL_FLOAT8_E4M3FN, 8): Dtype.FP8_E4M3,
    (_dlpack.KDL_INT, 32): Dtype.INT32,
    (_dlpack.KDL_INT, 64): Dtype.INT64,
    (_dlpack.KDL_UINT, 8): Dtype.UINT8,
    (_dlpack.KDL_FLOAT8_E5M2, 8): Dtype.FP8_E5M2,
    (_dlpack.KDL_FLOAT8_E8M0FNU, 8): Dtype.E8M0,
}
_DLPACK_CODE_NAMES = {
    0: "int",
    1: "uint",
    2: "float",
    3: "opaque",
    4: "bfloat",
    5: "complex",
    6: "bool",
    7: "float8_e3m4",
    8: "float8_e4m3",
    9: "float8_e4m3b11fnuz",
    10: "float8_e4m3fn",
    11: "float8_e4m3fnuz",
    12: "float8_e5m2",
    13: "float8_e5m2fnuz",
    14: "float8_e8m0fnu",
}

# (typestr kind, bytes) -> Dtype for __cuda_array_interface__. bfloat16 and fp8 have no
# typestr of their own (producers export raw 'V2'/'u1'...): pass dtype= for those.
_TYPESTR_DTYPES = {
    ("f", 2): Dtype.FP16,
    ("f", 4): Dtype.FP32,
    ("i", 4): Dtype.INT32,
    ("i", 8): Dtype.INT64,
    ("u", 1): Dtype.UINT8,
}


class EpcTensor:
    """A borrowed, strided view of CUDA device memory, as the C ABI's EpcTensor.

    `descriptor` is the ctypes _ffi.EpcTensor the library reads (data, dtype, ndim,
    shape and strides in elements; all-zero strides mean row-major contiguous, which is
    how contiguous inputs are always described). `strides` gives the effective element
    strides either way. `device` is the CUDA device ordinal when the producer said
    (DLPack), else None. `readonly` is the producer's read-only flag. `producer_stream`
    is the stream a __cuda_array_interface__ v3 producer asked consumers to synchronise
    with (None if it did not): order your work after it.

    The memory stays valid while the EpcTensor is alive and not released: it holds a
    reference to its producer and, for DLPack, the managed tensor whose deleter
    release() calls.
    """

    def __init__(
        self,
        data: int,
        dtype: Dtype,
        shape: Tuple[int, ...],
        strides: Tuple[int, ...],
        *,
        owner: Any = None,
        release: Optional[Callable[[], None]] = None,
        device: Optional[int] = None,
        readonly: bool = False,
        producer_stream: Optional[int] = None,
    ):
        self._data = data
        self._dtype = dtype
        self._shape = shape
        self._strides = strides
        self._contiguous = is_row_major(shape, strides)
        self._owner = owner
        self._release = release
        self._released = False  # set by release(); a raw pointer may have no owner at all
        self._lock = threading.Lock()
        self.device = device
        self.readonly = readonly
        self.producer_stream = producer_stream
        self.descriptor = _ffi.EpcTensor()
        self.descriptor.data = data or None
        self.descriptor.dtype = int(dtype)
        self.descriptor.ndim = len(shape)
        for i, extent in enumerate(shape):
            self.descriptor.shape[i] = extent
            if not self._contiguous:
                self.descriptor.strides[i] = strides[i]

    @property
    def data(self) -> int:
        return self._data

    @property
    def dtype(self) -> Dtype:
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def strides(self) -> Tuple[int, ...]:
        """Element strides (computed row-major ones for contiguous tensors)."""
        return self._strides

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE[self._dtype]

    @property
    def is_contiguous(self) -> bool:
        return self._contiguous

    @property
    def released(self) -> bool:
        return self._released

    def byref(self) -> Any:
        """`ctypes.byref(descriptor)`, for passing to a C function taking
        `const EpcTensor*`. Raises InvalidTensorError if the tensor was released."""
        if self.released:
            raise InvalidTensorError("the EpcTensor was released; its memory may be gone")
        return ctypes.byref(self.descriptor)

    def release(self) -> None:
        """End the borrow: call the DLPack deleter (if any) and drop the producer. Idempotent.
        Call it only when no GPU work using the memory is pending."""
        with self._lock:
            release, self._release, self._owner = self._release, None, None
            self._released = True
        if release is not None:
            release()

    def __enter__(self) -> "EpcTensor":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 (a finalizer must never raise)
            pass

    def __repr__(self) -> str:
        layout = "contiguous" if self._contiguous else f"strides={self._strides}"
        return f"EpcTensor(data={self._data:#x}, dtype={self._dtype.name.lower()}, shape={self._shape}, {layout})"


def row_major_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


def is_row_major(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether `strides` address `shape` densely in row-major order (dimensions of extent
    1 may have any stride, as in torch; an empty tensor is contiguous)."""
    if any(extent == 0 for extent in shape):
        return True
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _describe(
    data: int,
    dtype: Any,
    shape: Sequence[int],
    strides: Optional[Sequence[int]],
    *,
    contiguous: bool,
    source: str,
    **extras: Any,
) -> EpcTensor:
    """Check everything the descriptor requires and build the EpcTensor."""
    dtype = _supported_dtype(dtype, source)
    shape = tuple(int(s) for s in shape)
    if len(shape) > MAX_DIMS:
        raise InvalidTensorError(
            f"{source}: the tensor has {len(shape)} dimensions; an "
            f"EpcTensor holds at most {MAX_DIMS} (reshape it first)"
        )
    if any(extent < 0 for extent in shape):
        raise InvalidTensorError(f"{source}: negative extent in shape {shape}")
    if strides is None:
        strides = row_major_strides(shape)
    else:
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise InvalidTensorError(f"{source}: {len(strides)} strides for {len(shape)} dimensions")
    numel = 1
    for extent in shape:
        numel *= extent
    if numel > 1:
        for axis, (extent, stride) in enumerate(zip(shape, strides)):
            if stride == 0 and extent > 1:
                raise InvalidTensorError(
                    f"{source}: stride 0 in dimension {axis} (a broadcast view): every "
                    "element needs its own memory; materialize it first (e.g. .contiguous())"
                )
    if contiguous and not is_row_major(shape, strides):
        raise InvalidTensorError(
            f"{source}: the tensor is not contiguous (shape {shape}, element strides "
            f"{strides}); pass a contiguous tensor (e.g. x.contiguous())"
        )
    if numel and not data:
        raise InvalidTensorError(f"{source}: NULL data pointer for {numel} elements")
    itemsize = DTYPE_ITEMSIZE[dtype]
    if data % itemsize:
        raise InvalidTensorError(
            f"{source}: data pointer {data:#x} is not aligned to the {itemsize}-byte {dtype.name.lower()} element"
        )
    if is_row_major(shape, strides):
        strides = row_major_strides(shape)
    return EpcTensor(data, dtype, shape, strides, **extras)


def _supported_dtype(dtype: Any, source: str) -> Dtype:
    try:
        parsed = parse_dtype(dtype)
    except ValueError as error:
        raise InvalidTensorError(f"{source}: {error}") from None
    if parsed not in DTYPE_ITEMSIZE:
        raise InvalidTensorError(f"{source}: unsupported dtype {parsed!r}; epcomm tensors are {dtype_names()}")
    return Dtype(parsed)


def _override(found: Optional[Dtype], found_bytes: int, dtype: Any, found_name: str, source: str) -> Dtype:
    """The dtype to use: the one found, or `dtype` reinterpreting same-sized elements."""
    if dtype is None:
        if found is None:
            raise InvalidTensorError(
                f"{source}: unsupported dtype {found_name}; epcomm tensors are "
                f"{dtype_names()} (for raw bfloat16/fp8 views pass dtype=...)"
            )
        return found
    wanted = _supported_dtype(dtype, source)
    if DTYPE_ITEMSIZE[wanted] != found_bytes:
        raise InvalidTensorError(
            f"{source}: dtype={wanted.name.lower()} needs {DTYPE_ITEMSIZE[wanted]}-byte "
            f"elements but the tensor's {found_name} elements are {found_bytes} bytes"
        )
    return wanted


def tensor_from_pointer(
    pointer: Any,
    dtype: Any,
    shape: Sequence[int],
    strides: Optional[Sequence[int]] = None,
    *,
    owner: Any = None,
    device: Optional[int] = None,
    contiguous: bool = False,
) -> EpcTensor:
    """Describe raw CUDA device memory at `pointer` (an int or ctypes pointer).

    `strides` are in elements (None: row-major contiguous). `owner` is kept alive as long
    as the EpcTensor; nothing checks that the memory is on a GPU: that is the caller's
    promise. `contiguous=True` rejects non-contiguous layouts."""
    data = address(pointer, "pointer") or 0
    return _describe(
        data, dtype, shape, strides, contiguous=contiguous, source="tensor_from_pointer", owner=owner, device=device
    )


def from_cuda_array_interface(obj: Any, *, dtype: Any = None, contiguous: bool = False) -> EpcTensor:
    """Describe an object exposing `__cuda_array_interface__` (versions 0-3)."""
    source = f"__cuda_array_interface__ of {type(obj).__name__}"
    try:
        interface = obj.__cuda_array_interface__
    except Exception as error:  # torch raises for dtypes the protocol cannot express
        raise InvalidTensorError(f"{source}: the producer cannot export it ({error})") from error
    if interface.get("mask") is not None:
        raise InvalidTensorError(f"{source}: masked arrays are not supported")
    typestr = interface["typestr"]
    byteorder, kind, size = typestr[0], typestr[1], int(typestr[2:])
    if byteorder == ">" and size > 1:
        raise InvalidTensorError(f"{source}: big-endian typestr {typestr!r} is not supported")
    found = _TYPESTR_DTYPES.get((kind, size))
    chosen = _override(found, size, dtype, f"typestr {typestr!r}", source)
    pointer, readonly = interface["data"]
    shape = tuple(int(s) for s in interface["shape"])
    byte_strides = interface.get("strides")
    strides = None
    if byte_strides is not None:
        strides = []
        for axis, step in enumerate(byte_strides):
            if step % size:
                raise InvalidTensorError(
                    f"{source}: stride {step} bytes in dimension {axis} is not a multiple of the {size}-byte element"
                )
            strides.append(step // size)
    return _describe(
        pointer or 0,
        chosen,
        shape,
        strides,
        contiguous=contiguous,
        source=source,
        owner=obj,
        readonly=bool(readonly),
        producer_stream=interface.get("stream"),
    )


# DLPack device types of host memory: pinned memory is reported as CPU by most producers
# (torch) and as CUDAHost by some; the library itself checks that it is pinned.
_HOST_DEVICE_TYPES = (_dlpack.KDL_CPU, _dlpack.KDL_CUDA_HOST)


def _require_memory(device_type: int, device_id: int, source: str, host: bool) -> None:
    if host:
        if device_type not in _HOST_DEVICE_TYPES:
            name = _dlpack.DEVICE_NAMES.get(device_type, f"device type {device_type}")
            raise InvalidTensorError(
                f"{source}: not host memory (its memory is on {name}, DLPack device type "
                f"{device_type}, device {device_id}); this field takes pinned host memory "
                "(e.g. torch.empty(..., pin_memory=True))"
            )
        return
    if device_type != _dlpack.KDL_CUDA:
        name = _dlpack.DEVICE_NAMES.get(device_type, f"device type {device_type}")
        raise InvalidTensorError(
            f"{source}: not a CUDA tensor (its memory is on {name}, DLPack device type "
            f"{device_type}, device {device_id}); epcomm reads CUDA device memory only: "
            "move it to the GPU first (e.g. x.cuda())"
        )


def from_managed_tensor(
    managed: "_dlpack.ManagedTensor",
    *,
    owner: Any = None,
    dtype: Any = None,
    contiguous: bool = False,
    source: str = "DLPack",
    host: bool = False,
) -> EpcTensor:
    """Describe a consumed DLPack tensor. On success the EpcTensor owns `managed` (its
    release() calls the deleter); on failure `managed` is released before raising."""
    try:
        _require_memory(managed.device_type, managed.device_id, source, host)
        code, bits, lanes = managed.dtype_code, managed.dtype_bits, managed.dtype_lanes
        name = f"{_DLPACK_CODE_NAMES.get(code, f'code {code}')}{bits}"
        if lanes != 1:
            raise InvalidTensorError(f"{source}: vector dtype {name}x{lanes} is not supported")
        chosen = _override(_DLPACK_DTYPES.get((code, bits)), (bits + 7) // 8, dtype, name, source)
        return _describe(
            managed.data,
            chosen,
            managed.shape,
            managed.strides,
            contiguous=contiguous,
            source=source,
            owner=(owner, managed),
            release=managed.release,
            device=None if host else managed.device_id,
            readonly=managed.read_only,
        )
    except BaseException:
        managed.release()
        raise


def from_dlpack(
    obj: Any, *, dtype: Any = None, stream: Optional[int] = None, contiguous: bool = False, host: bool = False
) -> EpcTensor:
    """Describe a DLPack producer. Its device is checked with `__dlpack_device__` before
    anything is exported. `stream` (an int cudaStream_t) is passed to `__dlpack__` so the
    producer orders its pending work before it (None: the producer's default, the legacy
    default stream); never for host memory (host=True), which has no stream."""
    source = f"DLPack tensor from {type(obj).__name__}"
    device_of = getattr(obj, "__dlpack_device__", None)
    if device_of is not None:
        device_type, device_id = device_of()
        _require_memory(int(device_type), int(device_id), source, host)
    try:
        capsule = obj.__dlpack__() if stream is None or host else obj.__dlpack__(stream=stream)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise InvalidTensorError(f"{source}: the producer refused to export it ({error})") from error
    try:
        managed = _dlpack.consume_capsule(capsule)
    except ValueError as error:
        raise InvalidTensorError(f"{source}: {error}") from None
    return from_managed_tensor(managed, owner=obj, dtype=dtype, contiguous=contiguous, source=source, host=host)


# torch dtype name -> Dtype, for the torch fast path (names, so torch is never imported here).
_TORCH_DTYPES = {
    "torch.bfloat16": Dtype.BF16,
    "torch.float16": Dtype.FP16,
    "torch.float32": Dtype.FP32,
    "torch.float8_e4m3fn": Dtype.FP8_E4M3,
    "torch.int32": Dtype.INT32,
    "torch.int64": Dtype.INT64,
    "torch.uint8": Dtype.UINT8,
    "torch.float8_e5m2": Dtype.FP8_E5M2,
    "torch.float8_e8m0fnu": Dtype.E8M0,
}


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, getattr(torch, "Tensor", ())) and hasattr(obj, "data_ptr")


def from_torch(tensor: Any, *, dtype: Any = None, contiguous: bool = False, host: bool = False) -> EpcTensor:
    """Describe a torch tensor from data_ptr(), shape, stride() and dtype read directly (no
    DLPack or __cuda_array_interface__ round trip). The EpcTensor keeps `tensor` alive; it
    is the caller's to reuse across steps (a handle never releases an EpcTensor it was
    given). CUDA tensors only, or (host=True) CPU tensors (pinned, for
    out_expert_counts_host: the library checks)."""
    source = f"torch tensor ({tensor.dtype}, {tensor.device})"
    index = tensor.get_device()
    if host and index >= 0:
        raise InvalidTensorError(
            f"{source}: not host memory; this field takes pinned host memory (e.g. torch.empty(..., pin_memory=True))"
        )
    if not host and index < 0:
        raise InvalidTensorError(
            f"{source}: not a CUDA tensor; epcomm reads CUDA device memory only: move it to the GPU first (e.g. x.cuda())"
        )
    found = _TORCH_DTYPES.get(str(tensor.dtype))
    chosen = _override(found, tensor.element_size(), dtype, str(tensor.dtype), source)
    return _describe(
        tensor.data_ptr(),
        chosen,
        tuple(tensor.shape),
        tuple(tensor.stride()),
        contiguous=contiguous,
        source=source,
        owner=tensor,
        device=None if index < 0 else index,
    )


def _has_attribute(obj: Any, name: str) -> bool:
    """hasattr() that counts a property raising something other than AttributeError (torch's
    __cuda_array_interface__ raises TypeError for bfloat16) as present: the conversion then
    reports the producer's own message."""
    try:
        getattr(obj, name)
    except AttributeError:
        return False
    except Exception:  # noqa: BLE001
        return True
    return True


def as_tensor(
    obj: Any, *, dtype: Any = None, stream: Optional[int] = None, contiguous: bool = False, host: bool = False
) -> EpcTensor:
    """Borrow `obj`'s CUDA memory (host=True: its host memory) as an EpcTensor.

    Torch tensors are read directly (from_torch: no DLPack export, so no stream
    handshake either: a call on another stream than the tensors' current one must be
    ordered after their producers by the caller, as for any torch work on a side stream).
    Otherwise tries DLPack first (it carries bfloat16, fp8 and the device), then
    __cuda_array_interface__. `dtype` reinterprets elements of the same size (e.g. a uint8
    view as Dtype.FP8_E4M3); `stream` is handed to a DLPack producer; `contiguous=True`
    rejects non-contiguous tensors. Raises InvalidTensorError (a ValueError) naming what is
    wrong: not a CUDA tensor, unsupported dtype, more than EPC_TENSOR_MAX_DIMS dimensions,
    broadcast or non-contiguous layouts; TypeError for objects that are not tensors.

    host=True takes host memory only (DLPack CPU or CUDAHost devices; numpy arrays, torch
    tensors with pin_memory=True): the memory of dispatch's out_expert_counts_host, which
    must be pinned (the library checks). __cuda_array_interface__ describes device memory,
    so it is not accepted there."""
    if isinstance(obj, EpcTensor):
        return obj
    if _is_torch_tensor(obj):
        return from_torch(obj, dtype=dtype, contiguous=contiguous, host=host)
    if _has_attribute(obj, "__dlpack__"):
        return from_dlpack(obj, dtype=dtype, stream=stream, contiguous=contiguous, host=host)
    if host:
        raise TypeError(
            f"as_tensor: a {type(obj).__name__} has no __dlpack__, so its host memory cannot "
            "be described (for a raw pinned pointer use epcomm.tensor_from_pointer)"
        )
    if _has_attribute(obj, "__cuda_array_interface__"):
        return from_cuda_array_interface(obj, dtype=dtype, contiguous=contiguous)
    raise TypeError(
        f"as_tensor: a {type(obj).__name__} is not a tensor: it has neither "
        "__dlpack__ nor __cuda_array_interface__ (for a raw device pointer use "
        "epcomm.tensor_from_pointer(pointer, dtype, shape, strides))"
    )
