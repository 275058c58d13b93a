# SPDX-License-Identifier: Apache-2.0
"""Handles, dispatch, combine and complete without a GPU.

Against the real library: a group or handle whose pointer is zeroed memory (no live magic
word) must come back as EpcError(INVALID_ARGUMENT) with the library's message and the C
function's name. The library checks the group or handle before any struct field, so the
fake device addresses (tests/fakes.py) are never dereferenced. The bindings' own checks
(closed handles, missing, non-contiguous or CPU tensors, a stream nobody named) must refuse
before calling the library; and every keyword must reach its field of the C struct, absent
ones as NULL.
"""

import ctypes
import inspect
import sys
import types

import pytest

import epcomm
from conftest import dead_handle_of
from epcomm import _ffi, _library, handle as handle_module
from fakes import (
    DEAD_HANDLE,
    FAKE_DEVICE_POINTER,
    CudaArrayInterface,
    DLPackProducer,
    expect,
    refused_then_closed,
)

STREAM = 0x5000
ROWS = 256


@pytest.fixture
def dead_handle(dead_group):
    yield from dead_handle_of(epcomm.Handle, dead_group)


def fake(shape, typestr, offset):
    return CudaArrayInterface(shape, typestr, data=FAKE_DEVICE_POINTER + offset * 0x100000)


def ll_dispatch():
    """A 4-token, top-2, 4-local-expert low-latency dispatch (fp16 stands in for the 16-bit
    payload: the library refuses the handle before looking at dtypes)."""
    return dict(
        x=fake((4, 2048), "<f2", 0),
        topk_weights=fake((4, 2), "<f4", 1),
        out_x=fake((4, 256, 2048), "<f2", 2),
        out_expert_counts=fake((4,), "<i4", 8),
    )


def fp8_dispatch():
    t = ll_dispatch()
    t["out_x"] = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER + 2 * 0x100000, "fp8_e4m3", (4, 256, 2048))
    t["out_scales"] = fake((4, 256, 16), "<f4", 6)
    return dict(t, quant=epcomm.Quant.FP8)


def flat_dispatch():
    """Every output of a flat (high-throughput) dispatch."""
    return dict(
        x=fake((4, 2048), "<f2", 0),
        out_x=fake((ROWS, 2048), "<f2", 1),
        topk_weights=fake((4, 2), "<f4", 2),
        out_topk_weights=fake((ROWS, 2), "<f4", 3),
        out_topk_idx=fake((ROWS, 2), "<i4", 4),
        out_expert_counts=fake((4,), "<i4", 5),
        out_num_recv=fake((1,), "<i4", 6),
        acc_expert_counts=fake((4,), "<i8", 7),
    )


def passthrough_dispatch():
    base = FAKE_DEVICE_POINTER + 9 * 0x100000
    return dict(
        x=epcomm.tensor_from_pointer(base, "fp8_e4m3", (4, 2048)),
        x_scales=fake((4, 16), "<f4", 10),
        out_x=epcomm.tensor_from_pointer(base + 0x200000, "fp8_e4m3", (ROWS, 2048)),
        out_scales=fake((ROWS, 16), "<f4", 11),
        quant="passthrough",
    )


def combine(backward=False):
    t = dict(x=fake((ROWS, 2048), "<f2", 1), out=fake((4, 2048), "<f2", 0))
    if backward:
        t.update(topk_weights=fake((ROWS, 2), "<f4", 3), out_topk_weights=fake((4, 2), "<f4", 2))
    return t


def every_call(handle):
    """(C function, call) for every call of a handle, in its variants."""
    return [
        ("epc_handle_update", lambda: handle.update(fake((4, 2), "<i8", 12), stream=STREAM)),
        ("epc_handle_query", lambda: handle.query()),
        ("epc_dispatch", lambda: handle.dispatch(**ll_dispatch(), stream=STREAM)),
        ("epc_dispatch", lambda: handle.dispatch(**ll_dispatch(), send_only=True, stream=0)),
        ("epc_dispatch", lambda: handle.dispatch(**fp8_dispatch(), pow2_scales=True, stream=STREAM)),
        ("epc_dispatch", lambda: handle.dispatch(**flat_dispatch(), stream=STREAM)),
        ("epc_dispatch", lambda: handle.dispatch(**passthrough_dispatch(), stream=STREAM)),
        ("epc_combine", lambda: handle.combine(**combine(), stream=STREAM)),
        ("epc_combine", lambda: handle.combine(**combine(True), weighting="none", send_only=True, stream=STREAM)),
        ("epc_complete", lambda: handle.complete(stream=STREAM)),
    ]


# Every way to create a handle.
CREATORS = pytest.mark.parametrize(
    "create",
    [
        lambda group: epcomm.Handle.create(group, stream=STREAM),
        lambda group: epcomm.Handle.create(group, routing=fake((4, 2), "<i8", 12), stream=STREAM),
        lambda group: epcomm.Handle.create(
            group, layout="flat", sizing=epcomm.Sizing.EXACT, routing=epcomm.Routing(fake((4, 2), "<i4", 12)), stream=0
        ),
    ],
    ids=["without routing", "with routing", "flat exact"],
)


@CREATORS
def test_create_on_a_dead_group_carries_the_library_message(dead_group, create):
    with pytest.raises(epcomm.EpcError) as caught:
        create(dead_group)
    expect(caught, "epc_handle_create", "group is not a live EpcGroup")
    assert not dead_group._handles  # noqa: SLF001 (nothing was registered)


@CREATORS
def test_create_on_a_null_group_pointer(create):
    group = epcomm.Group(ctypes.POINTER(_ffi.EpcGroup)(), None, epcomm.GroupConfig().to_struct())
    with pytest.raises(epcomm.EpcError) as caught:
        create(group)
    expect(caught, "epc_handle_create", "group is NULL")
    group._handle = None  # noqa: SLF001


@CREATORS
def test_create_on_a_closed_group_is_refused_here(dead_group, create):
    dead_group._handle = None  # noqa: SLF001 (what close() leaves)
    with pytest.raises(epcomm.EpcError, match="the group is closed"):
        create(dead_group)


def test_every_call_on_a_dead_handle_is_refused_by_the_library(dead_handle):
    # close() reports the refusal too, and the handle is gone either way.
    refused_then_closed(dead_handle, every_call(dead_handle))
    dead_handle.close()  # idempotent
    assert repr(dead_handle) == "Handle(closed)"


def test_a_closed_handle_is_refused_without_calling_the_library(dead_handle):
    with pytest.raises(epcomm.EpcError):
        dead_handle.close()
    # The thread's message is the library's from that close; any library call would clear it.
    message = epcomm.last_error()
    assert DEAD_HANDLE in message
    for _, make_call in every_call(dead_handle) + [("", lambda: dead_handle.rows)]:
        with pytest.raises(epcomm.EpcError, match="the handle is closed") as caught:
            make_call()
        assert caught.value.function is None
    assert epcomm.last_error() == message


def test_group_close_refuses_while_a_handle_is_open(dead_group, dead_handle):
    with pytest.raises(epcomm.InvalidUsageError, match="1 handle") as refused:
        dead_group.close()
    assert refused.value.status == epcomm.Status.INVALID_USAGE  # the library's status for it
    assert not dead_group.closed
    with pytest.raises(epcomm.EpcError):
        dead_handle.close()  # refused by the library (a dead handle), forgotten here
    with pytest.raises(epcomm.EpcError) as caught:
        dead_group.close()  # now the library sees it, and refuses the dead group
    expect(caught, "epc_group_destroy", "group is not a live EpcGroup")
    assert dead_group.closed


def test_group_close_refused_by_the_library_keeps_the_group_open(dead_group, monkeypatch):
    """A Handle collected without close() is leaked: the group no longer sees it, but the
    library still holds its handle and refuses epc_group_destroy (INVALID_USAGE, since 2.2),
    releasing nothing. The group must stay open (and its communicator refuse to close), not
    be forgotten while the library keeps it alive."""
    import gc
    import warnings

    from epcomm import group as group_module
    from epcomm.errors import error_for

    comm = epcomm.Comm(0xBEEF000, owned=True)
    dead_group._comm = comm  # noqa: SLF001
    comm._register(dead_group)  # noqa: SLF001
    handle = epcomm.Handle(ctypes.cast(ctypes.create_string_buffer(64), ctypes.POINTER(_ffi.EpcHandle)), dead_group)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del handle
        gc.collect()
    assert not list(dead_group._handles)  # noqa: SLF001
    refusal = (
        "epc_group_destroy: the group still has 1 live handle(s): handle 1 (0x1000); epc_handle_destroy them first"
    )
    destroyed = []

    def library_call(name, *args):
        destroyed.append(name)
        raise error_for(_ffi.EPC_ERR_INVALID_USAGE, refusal, name)

    monkeypatch.setattr(group_module, "call", library_call)
    with pytest.raises(epcomm.InvalidUsageError) as caught:
        dead_group.close()
    expect(caught, "epc_group_destroy", "1 live handle(s)", epcomm.Status.INVALID_USAGE)
    assert destroyed == ["epc_group_destroy"]
    assert not dead_group.closed and dead_group._config is not None  # noqa: SLF001
    with pytest.raises(epcomm.EpcError, match="still open"):
        comm.close()
    with pytest.raises(epcomm.InvalidUsageError):
        dead_group.close()  # still there to be retried, and refused again
    assert destroyed == ["epc_group_destroy"] * 2
    comm._owned = False  # noqa: SLF001 (nothing real to destroy)
    dead_group._handle = None  # noqa: SLF001
    comm.close()


def test_tensors_are_checked_and_named_before_the_library(dead_group, dead_handle):
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx is required"):
        dead_handle.update(None, stream=STREAM)
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx is required"):
        epcomm.Handle.create(dead_group, routing=epcomm.Routing(None), stream=STREAM)
    strided = CudaArrayInterface((4, 2), "<i8", strides=(32, 8))
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx: .*not contiguous"):
        epcomm.Handle.create(dead_group, routing=strided, stream=STREAM)
    with pytest.raises(epcomm.InvalidTensorError, match="topk_idx: .*at most 4"):
        dead_handle.update(CudaArrayInterface((1, 1, 1, 1, 2), "<i8"), stream=STREAM)
    t = ll_dispatch()
    with pytest.raises(epcomm.InvalidTensorError, match="out_x is required"):
        dead_handle.dispatch(**dict(t, out_x=None), stream=STREAM)
    with pytest.raises(epcomm.InvalidTensorError, match="x is required"):
        dead_handle.dispatch(**dict(t, x=None), stream=STREAM)
    with pytest.raises(epcomm.InvalidTensorError, match="out is required"):
        dead_handle.combine(t["out_x"], out=None, stream=STREAM)
    strided = CudaArrayInterface((ROWS, 2), "<i4", strides=(16, 4))
    with pytest.raises(epcomm.InvalidTensorError, match="out_topk_idx: .*not contiguous"):
        dead_handle.dispatch(**dict(flat_dispatch(), out_topk_idx=strided), stream=STREAM)
    assert not dead_handle._in_flight  # noqa: SLF001 (the borrowed tensors went back)
    assert list(dead_group._handles) == [dead_handle]  # noqa: SLF001 (nothing was created)


def test_out_scales_may_be_strided(dead_handle):
    """out_scales alone may have strides (column-major scales for a grouped GEMM): the
    binding passes them on, and the library is what answers (here: the dead handle)."""
    from epcomm.handle import _borrow, _release

    column_major = CudaArrayInterface((2, 6, 3), "<f4", strides=(4 * 8 * 3, 4, 4 * 8))
    borrowed = _borrow("epc_dispatch", [("out_scales", column_major)], STREAM)
    try:
        (entry,) = borrowed
        assert entry.name == "out_scales" and entry.tensor.strides == (24, 1, 8)
        assert not entry.tensor.is_contiguous
    finally:
        _release(borrowed)
    with pytest.raises(epcomm.InvalidTensorError, match="out_x: .*not contiguous"):
        _borrow("epc_dispatch", [("out_x", column_major)], STREAM)


def test_dispatch_takes_its_outputs_by_keyword(dead_handle):
    t = ll_dispatch()
    with pytest.raises(TypeError):
        dead_handle.dispatch(t["x"], t["out_x"], stream=STREAM)  # out_x is keyword-only
    with pytest.raises(TypeError):
        dead_handle.combine(t["out_x"], t["x"], stream=STREAM)  # so is out
    with pytest.raises(TypeError, match="out_counts"):
        dead_handle.dispatch(t["x"], out_x=t["out_x"], out_counts=t["out_expert_counts"], stream=STREAM)


def test_cpu_tensors_are_refused_as_not_cuda(dead_handle):
    numpy = pytest.importorskip("numpy")
    t = ll_dispatch()
    t["x"] = numpy.zeros((4, 2048), dtype=numpy.float16)
    with pytest.raises(epcomm.InvalidTensorError, match="x: .*not a CUDA tensor"):
        dead_handle.dispatch(**t, stream=STREAM)


def test_host_counts_take_host_memory_only(dead_handle, monkeypatch):
    numpy = pytest.importorskip("numpy")
    device = DLPackProducer((4,), dtype=(0, 32, 1))
    with pytest.raises(epcomm.InvalidTensorError, match="out_expert_counts_host: .*not host memory"):
        dead_handle.dispatch(**ll_dispatch(), out_expert_counts_host=device, stream=STREAM)
    assert (device.exports, device.deleted) == (0, 0)  # refused on __dlpack_device__
    # Host memory passes the binding (the library checks that it is pinned).
    seen = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: seen.append(args[1]._obj))  # noqa: SLF001
    host = numpy.zeros(4, dtype=numpy.int32)
    dead_handle.dispatch(**ll_dispatch(), out_expert_counts_host=host, stream=STREAM)
    (args,) = seen
    described = args.out_expert_counts_host.contents
    assert described.data == host.ctypes.data and described.dtype == _ffi.EPC_DTYPE_INT32
    assert list(described.shape) == [4, 0, 0, 0]
    with pytest.raises(epcomm.InvalidTensorError, match="out_expert_counts: .*not a CUDA tensor"):
        dead_handle.dispatch(**dict(ll_dispatch(), out_expert_counts=host), stream=STREAM)


def test_dlpack_producers_are_told_the_stream_and_released(dead_handle):
    producers = dict(
        x=DLPackProducer((4, 2048), dtype=(4, 16, 1)),
        topk_weights=DLPackProducer((4, 2), dtype=(2, 32, 1)),
        out_x=DLPackProducer((4, 256, 2048), dtype=(4, 16, 1)),
        out_expert_counts=DLPackProducer((4,), dtype=(0, 32, 1)),
    )
    for stream, told in [(STREAM, STREAM), (0, 1)]:
        with pytest.raises(epcomm.EpcError):
            dead_handle.dispatch(**producers, stream=stream)
        assert [p.streams[-1] for p in producers.values()] == [told] * 4
    # The call failed, so nothing is kept: every exported tensor went back to its producer.
    assert [(p.exports, p.deleted) for p in producers.values()] == [(2, 2)] * 4


def data(pointer):
    """The fake address offset (in 0x100000 units) a struct field points at, None for NULL."""
    return (pointer.contents.data - FAKE_DEVICE_POINTER) // 0x100000 if pointer else None


@pytest.fixture
def seen(monkeypatch):
    calls = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: calls.append((name, args)))
    return calls


def test_create_fills_the_handle_config_and_routing(dead_group, seen):
    created = [
        epcomm.Handle.create(dead_group),  # no routing, no stream: nothing is queued
        epcomm.Handle.create(
            dead_group,
            layout="flat",
            sizing="exact",
            capacity=1 << 40,
            expert_alignment=128,
            flags=epcomm.HandleFlags.GLOBAL_EXPERT_IDS,
            routing=fake((4, 2), "<i8", 12),
            stream=STREAM,
        ),
        epcomm.Handle.create(
            dead_group, routing=epcomm.Routing(fake((4, 2), "<i4", 12), num_tokens=fake((1,), "<i4", 13)), stream=0
        ),
    ]
    (n0, a0), (n1, a1), (n2, a2) = seen
    assert n0 == n1 == n2 == "epc_handle_create" and all(len(a) == 5 for a in (a0, a1, a2))
    default, config, _ = (a[1]._obj for a in (a0, a1, a2))  # noqa: SLF001
    assert default.struct_size == ctypes.sizeof(_ffi.EpcHandleConfig)
    assert default.abi_version == _ffi.EPC_ABI_VERSION
    assert [getattr(default, f) for f, _ in _ffi.EpcHandleConfig._fields_[2:]] == [0] * 5
    assert (config.layout, config.sizing, config.capacity, config.expert_alignment, config.flags) == (
        _ffi.EPC_LAYOUT_FLAT,
        _ffi.EPC_SIZING_EXACT,
        1 << 40,
        128,
        _ffi.EPC_HANDLE_GLOBAL_EXPERT_IDS,
    )
    assert a0[2] is None and a0[3].value is None  # no routing: NULL, and a NULL stream
    routing = a1[2]._obj  # noqa: SLF001
    assert routing.struct_size == ctypes.sizeof(_ffi.EpcRouting)
    assert (data(routing.topk_idx), data(routing.num_tokens)) == (12, None)
    assert routing.topk_idx.contents.dtype == _ffi.EPC_DTYPE_INT64 and a1[3].value == STREAM
    routing = a2[2]._obj  # noqa: SLF001
    assert (data(routing.topk_idx), data(routing.num_tokens)) == (12, 13) and a2[3].value is None
    for handle in created:
        assert handle in dead_group._handles  # noqa: SLF001
        handle._pointer = None  # noqa: SLF001 (the fake call made no handle)
    with pytest.raises(ValueError, match="capacity is -1"):
        epcomm.Handle.create(dead_group, capacity=-1)
    with pytest.raises(ValueError, match="unknown Layout 'packed'"):
        epcomm.Handle.create(dead_group, layout="packed")
    assert len(seen) == 3


def test_dispatch_fills_every_field_by_name(dead_handle, seen):
    dead_handle.dispatch(**flat_dispatch(), stream=STREAM)
    dead_handle.dispatch(**fp8_dispatch(), send_only=True, pow2_scales=True, send_sms=4, max_step_tokens=8, stream=0)
    dead_handle.dispatch(**passthrough_dispatch(), scale_block=128, scale_layout=0, stream=STREAM)
    (n0, a0), (n1, a1), (n2, a2) = seen
    assert n0 == n1 == n2 == "epc_dispatch" and all(len(a) == 3 for a in (a0, a1, a2))
    flat, fp8, passthrough = (a[1]._obj for a in (a0, a1, a2))  # noqa: SLF001
    assert flat.struct_size == ctypes.sizeof(_ffi.EpcDispatchArgs) and flat.abi_version == _ffi.EPC_ABI_VERSION
    fields = handle_module.tensor_fields(_ffi.EpcDispatchArgs)
    assert {f: data(getattr(flat, f)) for f in fields} == {
        "x": 0,
        "x_scales": None,
        "x_global_scale": None,
        "topk_weights": 2,
        "out_x": 1,
        "out_scales": None,
        "out_topk_idx": 4,
        "out_topk_weights": 3,
        "out_expert_counts": 5,
        "out_expert_offsets": None,
        "out_rank_counts": None,
        "out_num_recv": 6,
        "out_expert_counts_host": None,
        "acc_expert_counts": 7,
    }
    assert (flat.flags, flat.quant, flat.scale_block, flat.scale_layout, flat.send_sms) == (0, 0, 0, 0, 0)
    assert (fp8.send_sms, fp8.reserved0) == (4, 0)  # ABI 2.1
    assert (flat.max_step_tokens, fp8.max_step_tokens, fp8.reserved1) == (0, 8, 0)  # ABI 2.2
    assert flat.acc_expert_counts.contents.dtype == _ffi.EPC_DTYPE_INT64 and a0[2].value == STREAM
    assert fp8.flags == _ffi.EPC_STEP_SEND_ONLY | _ffi.EPC_DISPATCH_POW2_SCALES
    assert fp8.quant == _ffi.EPC_QUANT_FP8 and a1[2].value is None  # stream=0: the legacy default
    assert (data(fp8.out_x), data(fp8.out_scales), data(fp8.out_expert_counts)) == (2, 6, 8)
    assert fp8.out_x.contents.dtype == _ffi.EPC_DTYPE_FP8_E4M3 and list(fp8.out_scales.contents.shape) == [
        4,
        256,
        16,
        0,
    ]
    assert (passthrough.quant, passthrough.scale_block) == (_ffi.EPC_QUANT_PASSTHROUGH, 128)
    assert (data(passthrough.x_scales), data(passthrough.out_scales)) == (10, 11)
    # The last call's tensors (and the struct pointing at them) are held until the next call.
    assert len(dead_handle._in_flight) == 4  # noqa: SLF001
    assert dead_handle._in_flight_struct is passthrough  # noqa: SLF001


def test_combine_and_complete_fill_their_fields(dead_handle, seen):
    dead_handle.combine(**combine(), stream=STREAM)
    dead_handle.combine(**combine(True), weighting=epcomm.Weighting.NONE, send_only=True, send_sms=1, stream=0x6000)
    dead_handle.complete(stream=0x7000)
    (n0, a0), (n1, a1), (n2, a2) = seen
    assert n0 == n1 == "epc_combine" and n2 == "epc_complete"
    plain, backward = a0[1]._obj, a1[1]._obj  # noqa: SLF001
    fields = handle_module.tensor_fields(_ffi.EpcCombineArgs)
    assert {f: data(getattr(plain, f)) for f in fields} == {
        "x": 1,
        "topk_weights": None,
        "home_topk_weights": None,
        "out": 0,
        "out_topk_weights": None,
    }
    assert (plain.flags, plain.weighting, a0[2].value) == (0, 0, STREAM)
    assert {f: data(getattr(backward, f)) for f in fields} == {
        "x": 1,
        "topk_weights": 3,
        "home_topk_weights": None,
        "out": 0,
        "out_topk_weights": 2,
    }
    assert (backward.flags, backward.weighting) == (_ffi.EPC_STEP_SEND_ONLY, _ffi.EPC_WEIGHTING_NONE)
    assert (plain.send_sms, backward.send_sms, backward.reserved0) == (0, 1, 0)  # ABI 2.1
    assert len(a2) == 3 and a2[1].value == 0 and a2[2].value == 0x7000  # flags 0, the stream
    assert len(dead_handle._in_flight) == 4  # noqa: SLF001 (complete keeps the send-only tensors)


def test_combine_passes_weights_at_home(dead_handle, seen):
    dead_handle.combine(**combine(), weighting="home", home_topk_weights=fake((4, 2), "<f4", 5), stream=STREAM)
    dead_handle.combine(
        **combine(), weighting=epcomm.Weighting.HOME, home_topk_weights=fake((4, 2), "<f4", 6), stream=0x6000
    )
    (n0, a0), (n1, a1) = seen
    assert n0 == n1 == "epc_combine"
    for args, home in ((a0[1]._obj, 5), (a1[1]._obj, 6)):  # noqa: SLF001
        assert args.weighting == _ffi.EPC_WEIGHTING_HOME
        assert data(args.home_topk_weights) == home
        assert (data(args.x), data(args.out), data(args.topk_weights)) == (1, 0, None)


def test_every_struct_field_is_a_keyword():
    # A field added to the header must be added to the methods too.
    dispatch = inspect.signature(epcomm.Handle.dispatch).parameters
    combine_ = inspect.signature(epcomm.Handle.combine).parameters
    create = inspect.signature(epcomm.Handle.create).parameters
    scalar = {"struct_size", "abi_version", "flags", "reserved0", "reserved1"}  # reserved: 0, no keyword
    assert {n for n, _ in _ffi.EpcDispatchArgs._fields_} - scalar <= set(dispatch)
    assert {n for n, _ in _ffi.EpcCombineArgs._fields_} - scalar <= set(combine_)
    assert {n for n, _ in _ffi.EpcHandleConfig._fields_} - {"struct_size", "abi_version"} <= set(create)
    assert {n for n, _ in _ffi.EpcRouting._fields_} - {"struct_size", "abi_version"} <= set(
        inspect.signature(epcomm.Handle.update).parameters
    )
    assert handle_module.unexposed_info_fields() == []
    # Every tensor is keyword-only but the first.
    for parameters in (dispatch, combine_):
        kinds = [p.kind for n, p in parameters.items() if n not in ("self", "x")]
        assert set(kinds) == {inspect.Parameter.KEYWORD_ONLY}


def test_enum_names_and_codes():
    for prefix, enum_type in [
        ("EPC_LAYOUT_", epcomm.Layout),
        ("EPC_SIZING_", epcomm.Sizing),
        ("EPC_QUANT_", epcomm.Quant),
        ("EPC_SCALES_", epcomm.ScaleLayout),
        ("EPC_WEIGHTING_", epcomm.Weighting),
        ("EPC_OVERFLOW_", epcomm.Overflow),
        ("EPC_PENDING_", epcomm.Pending),
        ("EPC_HANDLE_", epcomm.HandleFlags),
        ("EPC_GROUP_", epcomm.GroupFlags),
    ]:
        constants = {n[len(prefix) :]: v for n, v in vars(_ffi).items() if n.startswith(prefix)}
        assert constants and {m.name: m.value for m in enum_type} == constants, prefix
    from epcomm.enums import parse_enum

    assert parse_enum(epcomm.Quant, " Fp8 ", "quant") == _ffi.EPC_QUANT_FP8
    assert parse_enum(epcomm.Sizing, "exact", "sizing") == 1 and parse_enum(epcomm.Sizing, 0, "sizing") == 0
    assert parse_enum(epcomm.Layout, 9, "layout") == 9  # a newer library's code passes through
    with pytest.raises(ValueError, match="quant: unknown Quant 'int4'; expected one of none, fp8"):
        parse_enum(epcomm.Quant, "int4", "quant")
    with pytest.raises(TypeError, match="weighting must be a Weighting"):
        parse_enum(epcomm.Weighting, True, "weighting")


# ---- the stream a call runs on when the caller names none ---------------------------------


class FakeTorchTensor:
    """Stands for a torch.Tensor of the fake torch module below: a DLPack producer with a
    .device."""

    def __init__(self, producer, device_type="cuda", index=0):
        self._producer = producer
        self.device = types.SimpleNamespace(type=device_type, index=index)

    def __dlpack__(self, stream=None):
        return self._producer.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._producer.device


@pytest.fixture
def fake_torch(monkeypatch):
    """A module called torch whose current stream of device i is 0x1000 + i."""
    asked = []

    def current_stream(device):
        asked.append(device.index)
        return types.SimpleNamespace(cuda_stream=0x1000 + device.index)

    module = types.ModuleType("torch")
    module.Tensor = FakeTorchTensor
    module.cuda = types.SimpleNamespace(current_stream=current_stream)
    module.asked = asked
    monkeypatch.setitem(sys.modules, "torch", module)
    return module


@pytest.fixture
def fake_cupy(monkeypatch):
    class NdArray:
        def __init__(self, shape, typestr, offset, device_id):
            self.__cuda_array_interface__ = fake(shape, typestr, offset).__cuda_array_interface__
            self.device = types.SimpleNamespace(id=device_id)

    module = types.ModuleType("cupy")
    module.ndarray = NdArray
    module.cuda = types.SimpleNamespace(
        get_current_stream=lambda device_id: types.SimpleNamespace(ptr=0x2000 + device_id)
    )
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module


def test_no_stream_and_no_framework_tensors_is_refused(dead_handle, dead_group, seen):
    for make_call in [
        lambda: dead_handle.dispatch(**ll_dispatch()),
        lambda: dead_handle.combine(**combine()),
        lambda: dead_handle.update(fake((4, 2), "<i8", 12)),
        lambda: dead_handle.complete(),
        lambda: epcomm.Handle.create(dead_group, routing=fake((4, 2), "<i8", 12)),
    ]:
        with pytest.raises(epcomm.StreamRequiredError, match="stream=0 is the legacy default stream") as caught:
            make_call()
        assert caught.value.status == epcomm.Status.INVALID_ARGUMENT and isinstance(caught.value, ValueError)
    assert seen == []  # nothing reached the library


def test_torch_tensors_run_on_the_current_torch_stream(dead_handle, fake_torch, seen):
    x = FakeTorchTensor(DLPackProducer((4, 2048), dtype=(4, 16, 1)), index=3)
    out_x = FakeTorchTensor(DLPackProducer((4, 256, 2048), dtype=(4, 16, 1)), index=3)
    weights = fake((4, 2), "<f4", 1)
    dead_handle.dispatch(x, out_x=out_x, topk_weights=weights, send_only=True)
    assert seen[-1][1][2].value == 0x1003 and fake_torch.asked == [3]
    assert x._producer.streams == [0x1003]  # noqa: SLF001 (DLPack is told the same stream)
    dead_handle.complete()  # the stream of the pending call's tensors
    assert seen[-1][0] == "epc_complete" and seen[-1][1][2].value == 0x1003
    dead_handle.dispatch(x, out_x=out_x, topk_weights=weights, stream=0x9000)  # explicit wins
    assert seen[-1][1][2].value == 0x9000 and fake_torch.asked == [3, 3]
    # A torch tensor in host memory says nothing; the first CUDA one decides.
    host = FakeTorchTensor(DLPackProducer((4, 2), dtype=(0, 64, 1), device=(1, 0)), device_type="cpu")
    cuda_idx = FakeTorchTensor(DLPackProducer((4, 2), dtype=(0, 64, 1)), index=1)
    with pytest.raises(epcomm.StreamRequiredError):
        dead_handle.update(host)
    dead_handle.update(cuda_idx)
    assert seen[-1][0] == "epc_handle_update" and seen[-1][1][2].value == 0x1001


def test_torch_default_stream_zero_is_passed_as_null(dead_handle, fake_torch, seen, monkeypatch):
    monkeypatch.setattr(fake_torch.cuda, "current_stream", lambda device: types.SimpleNamespace(cuda_stream=0))
    x = FakeTorchTensor(DLPackProducer((4, 2048), dtype=(4, 16, 1)))
    dead_handle.combine(x, out=FakeTorchTensor(DLPackProducer((4, 2048), dtype=(4, 16, 1))))
    assert seen[-1][1][2].value is None  # torch's current stream is its legacy default stream


def test_cupy_arrays_run_on_the_current_cupy_stream(dead_handle, fake_cupy, seen):
    x = fake_cupy.ndarray((4, 2048), "<f2", 0, 2)
    dead_handle.combine(fake((ROWS, 2048), "<f2", 1), out=x)  # the first CuPy array decides
    assert seen[-1][1][2].value == 0x2002


def test_error_classes_follow_the_status(dead_handle, monkeypatch):
    library = _library.library()
    for status, cls in [
        (_ffi.EPC_ERR_CAPACITY, epcomm.CapacityError),
        (_ffi.EPC_ERR_INVALID_USAGE, epcomm.InvalidUsageError),
        (_ffi.EPC_ERR_UNSUPPORTED, epcomm.EpcError),
    ]:
        monkeypatch.setattr(library, "function", lambda name, status=status: lambda *args: status)
        with pytest.raises(epcomm.EpcError) as caught:
            dead_handle.complete(stream=STREAM)
        assert type(caught.value) is cls and caught.value.status == status
        assert caught.value.function == "epc_complete"
    import pickle

    error = pickle.loads(pickle.dumps(epcomm.InvalidUsageError(message="nothing is pending", function="epc_complete")))
    assert type(error) is epcomm.InvalidUsageError and error.status == epcomm.Status.INVALID_USAGE
    assert error.message == "nothing is pending"


def test_a_callers_epc_tensor_is_reused_across_steps_and_never_released(dead_handle, seen):
    """Issue 25, part 4: a binding releases only what it created. One EpcTensor per static
    buffer (one DLPack-backed, one from a raw pointer) is passed to 10 dispatch/combine
    steps; each step's producer tensors go back to their producer at the next step."""
    static_out = epcomm.as_tensor(DLPackProducer((4, 256, 2048), dtype=(4, 16, 1)))
    owner = static_out._owner[0]  # noqa: SLF001 (the producer, to count its deleter calls)
    static_counts = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER + 8 * 0x100000, "int32", (4,))
    step_inputs = []
    for step in range(10):
        x = DLPackProducer((4, 2048), dtype=(4, 16, 1))
        step_inputs.append(x)
        dead_handle.dispatch(x, out_x=static_out, out_expert_counts=static_counts, stream=STREAM)
        dead_handle.combine(static_out, out=fake((4, 2048), "<f2", 3), stream=STREAM)
        assert not static_out.released and not static_counts.released, f"step {step}"
        assert owner.deleted == 0, f"step {step}: the caller's DLPack tensor was deleted"
        assert [p.deleted for p in step_inputs] == [1] * (step + 1), f"step {step}"
    dispatches = [args[1]._obj for name, args in seen if name == "epc_dispatch"]  # noqa: SLF001
    assert len(dispatches) == 10
    assert all(d.out_x.contents.data == static_out.data for d in dispatches)
    assert all(d.out_expert_counts.contents.data == static_counts.data for d in dispatches)
    released = epcomm.tensor_from_pointer(FAKE_DEVICE_POINTER, "int32", (4,))
    released.release()
    with pytest.raises(epcomm.InvalidTensorError, match="out_expert_counts: the EpcTensor was released"):
        dead_handle.dispatch(step_inputs[0], out_x=static_out, out_expert_counts=released, stream=STREAM)
    dead_handle.close()
    assert not static_out.released and owner.deleted == 0  # close() leaves it to the caller too
    static_out.release()
    assert owner.deleted == 1


def test_a_created_handle_keeps_its_routing_until_its_next_call(dead_group, monkeypatch):
    """epc_handle_create copies the routing on the stream, which may run after the call
    returns: the new handle keeps the routing's tensors (the binding's DLPack imports) until
    its next call, as update() does, instead of releasing them at once."""
    from fakes import DeadObject

    memory = DeadObject(_ffi.EpcHandle)

    def created(name, *args):
        ctypes.cast(args[-1], ctypes.POINTER(ctypes.POINTER(_ffi.EpcHandle)))[0] = memory.pointer

    monkeypatch.setattr(handle_module, "call", created)
    routing = DLPackProducer((4, 2), dtype=(0, 64, 1))
    handle = epcomm.Handle.create(dead_group, routing=routing, stream=STREAM)
    assert routing.exports == 1 and routing.deleted == 0  # held, not released
    held = handle._in_flight  # noqa: SLF001
    assert [entry.name for entry in held] == ["topk_idx"]
    assert handle._in_flight_objects[0] is routing  # noqa: SLF001
    # The next call replaces what is held and releases the routing's import.
    monkeypatch.setattr(handle_module, "call", lambda name, *args: None)
    handle.update(DLPackProducer((4, 2), dtype=(0, 64, 1)), stream=STREAM)
    assert routing.deleted == 1
    handle._pointer = None  # noqa: SLF001 (nothing real to destroy)
    # A refused create releases at once.
    refused = DLPackProducer((4, 2), dtype=(0, 64, 1))
    monkeypatch.setattr(handle_module, "call", lambda name, *args: (_ for _ in ()).throw(epcomm.EpcError(2, "no")))
    with pytest.raises(epcomm.EpcError):
        epcomm.Handle.create(dead_group, routing=refused, stream=STREAM)
    assert (refused.exports, refused.deleted) == (1, 1)
