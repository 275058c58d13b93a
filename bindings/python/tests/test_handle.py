# SPDX-License-Identifier: Apache-2.0
"""Handles, dispatch, combine and complete without a GPU (test_ht_handle.py: the
high-throughput calls).

Against the real library: a group or handle whose pointer is zeroed memory (no live magic
word) must come back as EpcError(INVALID_ARGUMENT) with the library's message and the C
function's name. The library checks the group or handle before any tensor, so the fake
device addresses (tests/fakes.py) are never dereferenced. The bindings' own checks (closed
handles, missing, non-contiguous or CPU tensors) must refuse before calling the library.
"""

import ctypes

import pytest

import epcomm
from epcomm import _ffi, handle as handle_module
from conftest import dead_handle_of
from fakes import DEAD_HANDLE, FAKE_DEVICE_POINTER, CudaArrayInterface, DLPackProducer, expect, refused_then_closed


@pytest.fixture
def dead_handle(dead_group):
    yield from dead_handle_of(epcomm.Handle, dead_group)


def tensors():
    """Fake CUDA tensors for a 4-token, top-2, 4-local-expert step (fp16 stands in for the
    16-bit payload: the library refuses the handle before looking at dtypes)."""
    return dict(
        x=CudaArrayInterface((4, 2048), "<f2"),
        topk_weights=CudaArrayInterface((4, 2), "<f4", data=FAKE_DEVICE_POINTER + 0x100000),
        out_x=CudaArrayInterface((4, 256, 2048), "<f2", data=FAKE_DEVICE_POINTER + 0x200000),
        out_counts=CudaArrayInterface((4,), "<i4", data=FAKE_DEVICE_POINTER + 0x800000),
    )


def fp8_tensors():
    """tensors() for ll_dispatch_fp8: out_x as fp8 bytes, plus out_scales [L, R*T, H/128]."""
    t = tensors()
    t["out_x"] = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER + 0x200000, "fp8_e4m3", (4, 256, 2048))
    t["out_scales"] = CudaArrayInterface((4, 256, 16), "<f4", data=FAKE_DEVICE_POINTER + 0x600000)
    return t


# Every way to create a handle, with the C function it calls.
CREATORS = pytest.mark.parametrize(
    "create, function",
    [
        (epcomm.Handle.create, "epc_handle_create"),
        (epcomm.HtHandle.create, "epc_ht_handle_create"),
        (lambda group, idx: epcomm.HtHandle.create(group, idx, sizing="capacity"), "epc_ht_handle_create"),
    ],
    ids=["low-latency", "high-throughput exact", "high-throughput capacity"],
)


@CREATORS
def test_create_on_a_dead_group_carries_the_library_message(dead_group, create, function):
    with pytest.raises(epcomm.EpcError) as caught:
        create(dead_group, CudaArrayInterface((4, 2), "<i8"))
    expect(caught, function, "group is not a live EpcGroup")
    assert not dead_group._handles  # noqa: SLF001 (nothing was registered)


@CREATORS
def test_create_on_a_null_group_pointer(create, function):
    group = epcomm.Group(ctypes.POINTER(_ffi.EpcGroup)(), None, epcomm.GroupConfig().to_struct())
    with pytest.raises(epcomm.EpcError) as caught:
        create(group, CudaArrayInterface((4, 2), "<i8"))
    expect(caught, function, "group is NULL")
    group._handle = None  # noqa: SLF001


@CREATORS
def test_create_on_a_closed_group_is_refused_here(dead_group, create, function):
    dead_group._handle = None  # noqa: SLF001 (what close() leaves)
    with pytest.raises(epcomm.EpcError, match="the group is closed"):
        create(dead_group, CudaArrayInterface((4, 2), "<i8"))


def test_tensors_are_checked_and_named_before_the_library(dead_group):
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx is required"):
        epcomm.Handle.create(dead_group, None)
    strided = CudaArrayInterface((4, 2), "<i8", strides=(32, 8))
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx: .*not contiguous"):
        epcomm.Handle.create(dead_group, strided)
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx: .*at most 4"):
        epcomm.Handle.create(dead_group, CudaArrayInterface((1, 1, 1, 1, 2), "<i8"))


def test_cpu_tensors_are_refused_as_not_cuda(dead_handle):
    numpy = pytest.importorskip("numpy")
    args = tensors()
    args["x"] = numpy.zeros((4, 2048), dtype=numpy.float16)
    with pytest.raises(epcomm.InvalidTensorError, match="x: .*not a CUDA tensor"):
        dead_handle.ll_dispatch(**args)


def test_every_call_on_a_dead_handle_is_refused_by_the_library(dead_handle):
    t = tensors()
    calls = [
        ("epc_handle_update", lambda: dead_handle.update(CudaArrayInterface((4, 2), "<i8"))),
        ("epc_ll_dispatch", lambda: dead_handle.ll_dispatch(**t)),
        ("epc_ll_dispatch", lambda: dead_handle.ll_dispatch(**t, send_only=True, stream=0x5000)),
        ("epc_ll_dispatch_fp8", lambda: dead_handle.ll_dispatch_fp8(**fp8_tensors())),
        (
            "epc_ll_dispatch_fp8",
            lambda: dead_handle.ll_dispatch_fp8(**fp8_tensors(), send_only=True, pow2_scales=True, stream=0x5000),
        ),
        ("epc_ll_combine", lambda: dead_handle.ll_combine(t["out_x"], t["x"])),
        ("epc_ll_combine", lambda: dead_handle.ll_combine(t["out_x"], t["x"], send_only=True)),
        ("epc_complete", lambda: dead_handle.complete()),
    ]
    # close() reports the refusal too, and the handle is gone either way.
    refused_then_closed(dead_handle, calls)
    dead_handle.close()  # idempotent


def test_a_closed_handle_is_refused_without_calling_the_library(dead_handle):
    with pytest.raises(epcomm.EpcError):
        dead_handle.close()
    # The thread's message is the library's from that close; any library call would clear it.
    message = epcomm.last_error()
    assert DEAD_HANDLE in message
    t = tensors()
    for make_call in [
        lambda: dead_handle.ll_dispatch(**t),
        lambda: dead_handle.complete(),
        lambda: dead_handle.ll_dispatch_fp8(**fp8_tensors(), pow2_scales=True),
        lambda: dead_handle.ll_combine(t["out_x"], t["x"]),
        lambda: dead_handle.update(CudaArrayInterface((4, 2), "<i8")),
    ]:
        with pytest.raises(epcomm.EpcError, match="the handle is closed") as caught:
            make_call()
        assert caught.value.function is None
    assert epcomm.last_error() == message
    assert repr(dead_handle) == "Handle(closed)"


def test_group_close_refuses_while_a_handle_is_open(dead_group, dead_handle):
    with pytest.raises(epcomm.EpcError, match="1 handle"):
        dead_group.close()
    assert not dead_group.closed
    with pytest.raises(epcomm.EpcError):
        dead_handle.close()  # refused by the library (a dead handle), forgotten here
    with pytest.raises(epcomm.EpcError) as caught:
        dead_group.close()  # now the library sees it, and refuses the dead group
    expect(caught, "epc_group_destroy", "group is not a live EpcGroup")
    assert dead_group.closed


def test_dlpack_producers_are_told_the_stream_and_released(dead_handle):
    producers = [
        DLPackProducer((4, 2048), dtype=(4, 16, 1)),
        DLPackProducer((4, 2), dtype=(2, 32, 1)),
        DLPackProducer((4, 256, 2048), dtype=(4, 16, 1)),
        DLPackProducer((4,), dtype=(0, 32, 1)),
    ]
    for stream, told in [(0x5000, 0x5000), (None, 1)]:
        with pytest.raises(epcomm.EpcError):
            dead_handle.ll_dispatch(*producers, stream=stream)
        assert [p.streams[-1] for p in producers] == [told] * 4
    # The call failed, so nothing is kept: every exported tensor went back to its producer.
    assert [(p.exports, p.deleted) for p in producers] == [(2, 2)] * 4


def test_arguments_reach_the_c_call_in_order(dead_handle, monkeypatch):
    seen = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: seen.append((name, args)))
    t = tensors()
    dead_handle.ll_dispatch(**t, send_only=True, stream=0x5000)
    dead_handle.ll_combine(t["out_x"], t["x"], stream=0x6000)
    dead_handle.complete(stream=0x7000)
    (d_name, d_args), (c_name, c_args), (k_name, k_args) = seen
    data = [ref._obj.data for ref in d_args[1:5]]  # noqa: SLF001 (ctypes byref's target)
    assert d_name == "epc_ll_dispatch" and data == [
        FAKE_DEVICE_POINTER,
        FAKE_DEVICE_POINTER + 0x100000,
        FAKE_DEVICE_POINTER + 0x200000,
        FAKE_DEVICE_POINTER + 0x800000,
    ]
    assert d_args[5].value == _ffi.EPC_FLAG_SEND_ONLY and d_args[6].value == 0x5000
    assert c_name == "epc_ll_combine" and c_args[3].value == 0 and c_args[4].value == 0x6000
    assert [ref._obj.data for ref in c_args[1:3]] == [
        FAKE_DEVICE_POINTER + 0x200000,  # noqa: SLF001
        FAKE_DEVICE_POINTER,
    ]
    assert k_name == "epc_complete" and k_args[1].value == 0x7000
    # The last call's tensors are held until the next call or close.
    assert len(dead_handle._in_flight) == 2  # noqa: SLF001


def test_raw_pointers_enter_through_tensor_from_pointer(dead_handle, monkeypatch):
    seen = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: seen.append((name, args)))
    base = FAKE_DEVICE_POINTER
    expert_out = epcomm.tensor_from_pointer(base, "bf16", (4, 256, 2048))
    out = epcomm.tensor_from_pointer(base + 0x400000, "bf16", (4, 2048))
    dead_handle.ll_combine(expert_out, out)
    ((name, args),) = seen
    assert name == "epc_ll_combine"
    described = [ref._obj for ref in args[1:3]]  # noqa: SLF001 (ctypes byref's target)
    assert [(d.data, d.dtype, d.ndim, list(d.shape)) for d in described] == [
        (base, _ffi.EPC_DTYPE_BF16, 3, [4, 256, 2048, 0]),
        (base + 0x400000, _ffi.EPC_DTYPE_BF16, 2, [4, 2048, 0, 0]),
    ]
    # A bare int is not a tensor: it has no shape.
    with pytest.raises(TypeError, match="tensor_from_pointer"):
        dead_handle.ll_combine(base, out)


def test_ll_dispatch_fp8_arguments_reach_the_c_call_in_order(dead_handle, monkeypatch):
    seen = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: seen.append((name, args)))
    # Fresh tensors per call: an EpcTensor is released once the handle's next call ends.
    dead_handle.ll_dispatch_fp8(**fp8_tensors(), stream=0x5000)
    dead_handle.ll_dispatch_fp8(**fp8_tensors(), send_only=True, pow2_scales=True)
    dead_handle.ll_dispatch_fp8(**fp8_tensors(), pow2_scales=True, stream=0x6000)
    (name, args), (_, send_only_args), (_, pow2_args) = seen
    assert name == "epc_ll_dispatch_fp8" and len(args) == 8
    described = [ref._obj for ref in args[1:6]]  # noqa: SLF001 (ctypes byref's target)
    assert [d.data for d in described] == [
        FAKE_DEVICE_POINTER,
        FAKE_DEVICE_POINTER + 0x100000,
        FAKE_DEVICE_POINTER + 0x200000,
        FAKE_DEVICE_POINTER + 0x600000,
        FAKE_DEVICE_POINTER + 0x800000,
    ]
    assert [d.dtype for d in described] == [
        _ffi.EPC_DTYPE_FP16,
        _ffi.EPC_DTYPE_FP32,
        _ffi.EPC_DTYPE_FP8_E4M3,
        _ffi.EPC_DTYPE_FP32,
        _ffi.EPC_DTYPE_INT32,
    ]
    assert list(described[3].shape) == [4, 256, 16, 0]
    assert args[6].value == 0 and args[7].value == 0x5000
    assert send_only_args[6].value == _ffi.EPC_FLAG_SEND_ONLY | _ffi.EPC_FLAG_FP8_POW2_SCALES
    assert send_only_args[7].value is None  # None: the legacy default stream
    assert pow2_args[6].value == _ffi.EPC_FLAG_FP8_POW2_SCALES and pow2_args[7].value == 0x6000
    # The last call's five tensors are held until the next call or close.
    assert len(dead_handle._in_flight) == 5  # noqa: SLF001


def test_ll_dispatch_fp8_names_a_missing_out_scales_before_the_library(dead_handle):
    t = fp8_tensors()
    t["out_scales"] = None
    with pytest.raises(epcomm.InvalidTensorError, match="out_scales is required"):
        dead_handle.ll_dispatch_fp8(**t)


def test_ll_dispatch_fp8_on_a_library_older_than_abi_1_1_is_unsupported(dead_handle, monkeypatch):
    library = epcomm.load_library()
    monkeypatch.setattr(library, "missing", library.missing | {"epc_ll_dispatch_fp8"})
    with pytest.raises(epcomm.EpcError) as caught:
        dead_handle.ll_dispatch_fp8(**fp8_tensors())
    assert caught.value.status == epcomm.Status.UNSUPPORTED
    assert "epc_ll_dispatch_fp8 is not exported" in caught.value.message
    assert not dead_handle._in_flight  # noqa: SLF001 (the borrowed tensors went back)
