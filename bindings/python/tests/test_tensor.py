# SPDX-License-Identifier: Apache-2.0
"""Tensor conversion: raw pointers, __cuda_array_interface__, DLPack (no GPU needed)."""

import ctypes
import gc

import pytest

import epcomm
from epcomm import _dlpack, _ffi
from epcomm.tensor import from_managed_tensor
from fakes import FAKE_DEVICE_POINTER, CudaArrayInterface, DLPackOnly, DLPackProducer

# ---- raw pointers -------------------------------------------------------------------


def test_pointer_contiguous_descriptor_has_zero_strides():
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (16, 2048))
    d = t.descriptor
    assert isinstance(d, _ffi.EpcTensor)
    assert d.data == FAKE_DEVICE_POINTER and d.dtype == _ffi.EPC_DTYPE_BF16 and d.ndim == 2
    assert list(d.shape) == [16, 2048, 0, 0]
    assert list(d.strides) == [0, 0, 0, 0]  # the ABI's "row-major contiguous"
    assert t.strides == (2048, 1) and t.is_contiguous and t.itemsize == 2


def test_pointer_strided_descriptor_keeps_element_strides():
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, epcomm.Dtype.FP32, (8, 4), (16, 2))
    assert list(t.descriptor.strides) == [16, 2, 0, 0]
    assert not t.is_contiguous


def test_pointer_size_one_dimensions_do_not_break_contiguity():
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "fp16", (1, 64), (7, 1))
    assert t.is_contiguous and list(t.descriptor.strides) == [0, 0, 0, 0]


def test_pointer_errors_name_the_problem():
    with pytest.raises(epcomm.InvalidTensorError, match="5 dimensions; an EpcTensor holds at most 4"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (1, 2, 3, 4, 5))
    with pytest.raises(epcomm.InvalidTensorError, match="unknown dtype 'float64'"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "float64", (4,))
    with pytest.raises(epcomm.InvalidTensorError, match="unsupported dtype"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, epcomm.Dtype.INVALID, (4,))
    with pytest.raises(epcomm.InvalidTensorError, match="NULL data pointer"):
        epcomm.tensor_from_pointer(0, "bf16", (4,))
    with pytest.raises(epcomm.InvalidTensorError, match="not aligned"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER + 1, "bf16", (4,))
    with pytest.raises(epcomm.InvalidTensorError, match="broadcast"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (4, 8), (0, 1))
    with pytest.raises(epcomm.InvalidTensorError, match="not contiguous"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (4, 8), (16, 1), contiguous=True)
    with pytest.raises(epcomm.InvalidTensorError, match="2 strides for 3 dimensions"):
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (4, 8, 2), (16, 1))


def test_invalid_tensor_errors_are_value_errors_and_epc_errors():
    with pytest.raises(ValueError) as caught:
        epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (1, 1, 1, 1, 1))
    assert isinstance(caught.value, epcomm.EpcError)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT


def test_empty_tensors_need_no_pointer():
    t = epcomm.tensor_from_pointer(0, "int32", (0, 8))
    assert t.descriptor.data is None and t.is_contiguous


def test_a_raw_pointer_without_owner_is_usable_until_release():
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (4, 8))
    assert not t.released and t.byref()._obj is t.descriptor  # noqa: SLF001
    t.release()
    with pytest.raises(epcomm.InvalidTensorError, match="released"):
        t.byref()


def test_pointer_owner_is_kept_until_release():
    class Owner:
        pass

    owner = Owner()
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "int64", (3,), owner=owner)
    assert t._owner is owner
    t.release()
    assert t.released
    with pytest.raises(epcomm.InvalidTensorError, match="released"):
        t.byref()


# ---- __cuda_array_interface__ ---------------------------------------------------------


@pytest.mark.parametrize(
    "typestr, dtype",
    [
        ("<f2", epcomm.Dtype.FP16),
        ("<f4", epcomm.Dtype.FP32),
        ("<i4", epcomm.Dtype.INT32),
        ("<i8", epcomm.Dtype.INT64),
        ("|u1", epcomm.Dtype.UINT8),
    ],
)
def test_cai_dtypes(typestr, dtype):
    t = epcomm.as_tensor(CudaArrayInterface((4, 8), typestr))
    assert t.dtype == dtype and t.descriptor.dtype == int(dtype)
    assert t.data == FAKE_DEVICE_POINTER and t.shape == (4, 8)


def test_cai_byte_strides_become_element_strides():
    # A [4, 8] fp16 view taking every other column of a [4, 16] array.
    t = epcomm.as_tensor(CudaArrayInterface((4, 8), "<f2", strides=(32, 4)))
    assert t.strides == (16, 2) and list(t.descriptor.strides) == [16, 2, 0, 0]


def test_cai_contiguous_byte_strides_are_described_as_contiguous():
    t = epcomm.as_tensor(CudaArrayInterface((4, 8), "<f4", strides=(32, 4)))
    assert t.is_contiguous and list(t.descriptor.strides) == [0, 0, 0, 0]


def test_cai_keeps_the_producer_and_its_flags():
    producer = CudaArrayInterface((2, 2), "<f4", readonly=True, stream=0x55)
    t = epcomm.as_tensor(producer)
    assert t._owner is producer and t.readonly and t.producer_stream == 0x55


def test_cai_bfloat16_and_fp8_views_need_an_explicit_dtype():
    with pytest.raises(epcomm.InvalidTensorError, match="pass dtype="):
        epcomm.as_tensor(CudaArrayInterface((4,), "<V2"))
    assert epcomm.as_tensor(CudaArrayInterface((4,), "<V2"), dtype="bf16").dtype == epcomm.Dtype.BF16
    assert epcomm.as_tensor(CudaArrayInterface((4,), "|u1"), dtype="fp8_e4m3").dtype == epcomm.Dtype.FP8_E4M3
    with pytest.raises(epcomm.InvalidTensorError, match="needs 2-byte elements"):
        epcomm.as_tensor(CudaArrayInterface((4,), "|u1"), dtype="bf16")


@pytest.mark.parametrize(
    "typestr, dtype, size",
    [("|u1", "e8m0", 1), ("|u1", "fp4_e2m1x2", 1), ("<i4", "e8m0x4", 4), ("|u1", "float8_e5m2", 1)],
)
def test_scale_and_fp4_dtypes_are_views_of_bytes_or_words(typestr, dtype, size):
    t = epcomm.as_tensor(CudaArrayInterface((4, 8), typestr), dtype=dtype)
    assert t.dtype == epcomm.parse_dtype(dtype) and t.itemsize == size
    assert t.descriptor.dtype == getattr(_ffi, f"EPC_DTYPE_{t.dtype.name}")


def test_cai_errors_name_the_problem():
    with pytest.raises(epcomm.InvalidTensorError, match=r"unsupported dtype typestr '<f8'"):
        epcomm.as_tensor(CudaArrayInterface((4,), "<f8"))
    with pytest.raises(epcomm.InvalidTensorError, match="at most 4"):
        epcomm.as_tensor(CudaArrayInterface((1, 1, 1, 1, 2), "<f4"))
    with pytest.raises(epcomm.InvalidTensorError, match="not a multiple of the 4-byte element"):
        epcomm.as_tensor(CudaArrayInterface((2, 2), "<f4", strides=(6, 4)))
    with pytest.raises(epcomm.InvalidTensorError, match="masked"):
        epcomm.as_tensor(CudaArrayInterface((2,), "<f4", mask=object()))
    with pytest.raises(epcomm.InvalidTensorError, match="big-endian"):
        epcomm.as_tensor(CudaArrayInterface((2,), ">f4"))
    with pytest.raises(epcomm.InvalidTensorError, match="not contiguous"):
        epcomm.as_tensor(CudaArrayInterface((4, 8), "<f2", strides=(32, 4)), contiguous=True)


def test_cai_producer_errors_are_reported():
    class Bf16Torch:  # torch raises TypeError for bfloat16's __cuda_array_interface__
        @property
        def __cuda_array_interface__(self):
            raise TypeError("unsupported type: torch.bfloat16")

    with pytest.raises(epcomm.InvalidTensorError, match="torch.bfloat16"):
        epcomm.as_tensor(Bf16Torch())


def test_objects_that_are_not_tensors():
    with pytest.raises(TypeError, match="tensor_from_pointer"):
        epcomm.as_tensor(12345)
    t = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "bf16", (2,))
    assert epcomm.as_tensor(t) is t


# ---- DLPack (a producer in ctypes memory, reporting a CUDA device) ---------------------

DLPACK_DTYPES = [
    ((4, 16, 1), epcomm.Dtype.BF16),
    ((2, 16, 1), epcomm.Dtype.FP16),
    ((2, 32, 1), epcomm.Dtype.FP32),
    ((10, 8, 1), epcomm.Dtype.FP8_E4M3),
    ((0, 32, 1), epcomm.Dtype.INT32),
    ((0, 64, 1), epcomm.Dtype.INT64),
    ((1, 8, 1), epcomm.Dtype.UINT8),
    ((12, 8, 1), epcomm.Dtype.FP8_E5M2),
    ((14, 8, 1), epcomm.Dtype.E8M0),
]


@pytest.mark.parametrize("dl_dtype, dtype", DLPACK_DTYPES)
def test_dlpack_dtypes(dl_dtype, dtype):
    producer = DLPackProducer((3, 5), dtype=dl_dtype, device=(_dlpack.KDL_CUDA, 1))
    t = epcomm.as_tensor(producer)
    assert t.dtype == dtype and t.shape == (3, 5) and t.device == 1
    assert t.data == FAKE_DEVICE_POINTER and t.is_contiguous


def test_dlpack_borrow_lasts_until_release():
    producer = DLPackProducer((4,))
    t = epcomm.as_tensor(producer)
    assert producer.exports == 1 and producer.deleted == 0
    assert t._owner[0] is producer
    t.release()
    assert producer.deleted == 1
    t.release()
    assert producer.deleted == 1


def test_dlpack_borrow_ends_when_collected_and_with_a_context_manager():
    producer = DLPackProducer((4,))
    t = epcomm.as_tensor(producer)
    del t
    gc.collect()
    assert producer.deleted == 1
    with epcomm.as_tensor(producer) as borrowed:
        assert producer.deleted == 1 and not borrowed.released
    assert producer.deleted == 2 and borrowed.released


def test_dlpack_strides_and_byte_offset():
    producer = DLPackProducer((4, 8), dtype=(4, 16, 1), strides=(16, 2), byte_offset=64)
    t = epcomm.as_tensor(producer)
    assert t.data == FAKE_DEVICE_POINTER + 64
    assert t.strides == (16, 2) and list(t.descriptor.strides) == [16, 2, 0, 0]


def test_dlpack_versioned_capsules():
    producer = DLPackProducer((2, 2), versioned=True, flags=_dlpack.FLAG_READ_ONLY)
    t = epcomm.as_tensor(producer)
    assert t.readonly and t.dtype == epcomm.Dtype.FP32
    t.release()
    assert producer.deleted == 1
    future = DLPackProducer((2,), versioned=True, version=(2, 0))
    with pytest.raises(epcomm.InvalidTensorError, match="DLPack 1.x only"):
        epcomm.as_tensor(future)
    assert future.deleted == 1


def test_dlpack_stream_is_passed_to_the_producer():
    producer = DLPackProducer((2,))
    epcomm.as_tensor(producer, stream=0x99).release()
    epcomm.as_tensor(producer).release()
    assert producer.streams == [0x99, None]


def test_dlpack_rejected_tensors_are_given_back():
    cases = [
        (DLPackProducer((2,), dtype=(2, 64, 1)), "unsupported dtype float64"),
        (DLPackProducer((2,), dtype=(2, 16, 2)), "vector dtype"),
        (DLPackProducer((1, 1, 1, 1, 1)), "at most 4"),
        (DLPackProducer((4, 4), strides=(1, 4)), "not contiguous"),
    ]
    for producer, message in cases:
        with pytest.raises(epcomm.InvalidTensorError, match=message):
            epcomm.as_tensor(producer, contiguous=True)
        assert producer.deleted == 1, message


def test_dlpack_dtype_override_reinterprets_same_sized_elements():
    t = epcomm.as_tensor(DLPackProducer((8,), dtype=(1, 8, 1)), dtype="fp8_e4m3")
    assert t.dtype == epcomm.Dtype.FP8_E4M3


def test_host_memory_is_taken_only_where_asked():
    for device in [(_dlpack.KDL_CPU, 0), (_dlpack.KDL_CUDA_HOST, 0)]:
        producer = DLPackProducer((4,), dtype=(0, 32, 1), device=device)
        t = epcomm.as_tensor(producer, host=True, stream=0x99)
        assert t.dtype == epcomm.Dtype.INT32 and t.device is None
        assert producer.streams == [None]  # host memory has no stream to order
    device = DLPackProducer((4,), dtype=(0, 32, 1))
    with pytest.raises(epcomm.InvalidTensorError, match="not host memory.*pinned"):
        epcomm.as_tensor(device, host=True)
    assert device.exports == 0
    with pytest.raises(TypeError, match="no __dlpack__"):
        epcomm.as_tensor(CudaArrayInterface((4,), "<i4"), host=True)


def test_dlpack_device_is_checked_before_exporting():
    producer = DLPackProducer((2,), device=(_dlpack.KDL_CPU, 0))
    with pytest.raises(epcomm.InvalidTensorError, match="not a CUDA tensor"):
        epcomm.as_tensor(producer)
    assert producer.exports == 0


def test_dlpack_managed_memory_is_not_device_memory():
    with pytest.raises(epcomm.InvalidTensorError, match="not a CUDA tensor.*CUDAManaged"):
        epcomm.as_tensor(DLPackProducer((2,), device=(13, 0)))


def test_dlpack_device_is_checked_after_parsing_too():
    producer = DLPackProducer((2,), device=(_dlpack.KDL_CPU, 0), report_device=False)
    with pytest.raises(epcomm.InvalidTensorError, match="not a CUDA tensor"):
        epcomm.as_tensor(DLPackOnly(producer))
    assert producer.exports == 1 and producer.deleted == 1


def test_consumed_capsules_and_non_capsules_are_refused():
    capsule = DLPackProducer((2,)).__dlpack__()
    _dlpack.consume_capsule(capsule).release()
    with pytest.raises(ValueError, match="already consumed"):
        _dlpack.consume_capsule(capsule)
    with pytest.raises(ValueError, match="DLPack capsule"):
        _dlpack.consume_capsule(object())


# ---- numpy's real DLPack export (a CPU array) -------------------------------------------


def test_numpy_cpu_arrays_are_rejected_with_a_clear_message():
    np = pytest.importorskip("numpy")
    array = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(epcomm.InvalidTensorError) as caught:
        epcomm.as_tensor(array)
    assert "not a CUDA tensor" in str(caught.value) and "CPU" in str(caught.value)


def test_numpy_capsule_parsing():
    np = pytest.importorskip("numpy")
    array = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = array[:, ::2]
    managed = _dlpack.consume_capsule(view.__dlpack__())
    assert not managed.versioned
    assert managed.device_type == _dlpack.KDL_CPU and managed.device_name == "CPU"
    assert (managed.dtype_code, managed.dtype_bits, managed.dtype_lanes) == (_dlpack.KDL_FLOAT, 32, 1)
    assert managed.shape == (4, 3)
    assert managed.strides == (6, 2)  # elements, as DLPack counts them
    assert managed.data == view.ctypes.data
    # The capsule's data really is the array's: read an element through the pointer.
    assert ctypes.c_float.from_address(managed.data + 4 * 2).value == 2.0
    managed.release()
    assert managed.released


@pytest.mark.parametrize(
    "np_dtype, code, bits", [("float16", 2, 16), ("int32", 0, 32), ("int64", 0, 64), ("uint8", 1, 8)]
)
def test_numpy_capsule_dtypes(np_dtype, code, bits):
    np = pytest.importorskip("numpy")
    managed = _dlpack.consume_capsule(np.zeros(3, dtype=np_dtype).__dlpack__())
    assert (managed.dtype_code, managed.dtype_bits) == (code, bits)
    managed.release()


def test_numpy_versioned_capsule_parsing():
    np = pytest.importorskip("numpy")
    array = np.ones((2, 3), dtype=np.int64)
    try:
        capsule = array.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip("this numpy exports only unversioned DLPack capsules")
    managed = _dlpack.consume_capsule(capsule)
    assert managed.versioned and managed.version[0] == 1
    assert managed.shape == (2, 3) and managed.data == array.ctypes.data
    managed.release()


def test_numpy_capsule_through_the_conversion_is_refused_and_given_back():
    np = pytest.importorskip("numpy")
    array = np.zeros((2, 2), dtype=np.float32)
    managed = _dlpack.consume_capsule(array.__dlpack__())
    with pytest.raises(epcomm.InvalidTensorError, match="not a CUDA tensor"):
        from_managed_tensor(managed, owner=array)
    assert managed.released
