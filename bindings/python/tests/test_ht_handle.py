# SPDX-License-Identifier: Apache-2.0
"""High-throughput handles, dispatch and combine without a GPU (creation on dead, NULL and
closed groups is tested with the low-latency handles' in test_handle.py).

As in test_handle.py: against the real library, a group or handle whose pointer is zeroed
memory must come back as EpcError(INVALID_ARGUMENT) with the library's message and the C
function's name, before any (fake) tensor is looked at; the binding's own checks (closed
handles, missing tensors, sizing names) refuse before the library; and the arguments reach
the C calls in the header's order, optional tensors as NULL.
"""

import pytest

import epcomm
from conftest import dead_handle_of
from epcomm import _ffi, handle as handle_module
from epcomm.ht_handle import parse_sizing
from fakes import FAKE_DEVICE_POINTER, CudaArrayInterface, refused_then_closed

ROWS = 256


@pytest.fixture
def dead_ht_handle(dead_group):
    yield from dead_handle_of(
        lambda pointer, group: epcomm.HtHandle(pointer, group, ROWS, epcomm.HtSizing.CAPACITY), dead_group
    )


def fake(shape, typestr, offset):
    return CudaArrayInterface(shape, typestr, data=FAKE_DEVICE_POINTER + offset * 0x100000)


def dispatch_tensors():
    """Every tensor of a 4-token, top-2, 4-local-expert bf16 dispatch (fp16 stands in for
    the 16-bit payload: the library refuses the handle before looking at dtypes)."""
    return dict(
        x=fake((4, 2048), "<f2", 0),
        out_x=fake((ROWS, 2048), "<f2", 1),
        topk_weights=fake((4, 2), "<f4", 2),
        out_topk_weights=fake((ROWS, 2), "<f4", 3),
        out_topk_idx=fake((ROWS, 2), "<i4", 4),
        out_expert_counts=fake((4,), "<i4", 5),
        out_num_recv=fake((1,), "<i4", 6),
    )


def fp8_dispatch_tensors():
    base = FAKE_DEVICE_POINTER + 7 * 0x100000
    return dict(
        x=epcomm.tensor_from_pointer(base, "fp8_e4m3", (4, 2048)),
        x_scales=fake((4, 16), "<f4", 8),
        out_x=epcomm.tensor_from_pointer(base + 0x200000, "fp8_e4m3", (ROWS, 2048)),
        out_scales=fake((ROWS, 16), "<f4", 9),
    )


def combine_tensors(backward):
    t = dict(x=fake((ROWS, 2048), "<f2", 1), out=fake((4, 2048), "<f2", 0))
    if backward:
        t.update(topk_weights=fake((ROWS, 2), "<f4", 3), out_topk_weights=fake((4, 2), "<f4", 2))
    return t


def ht_calls(handle):
    """(C function, call) for every HtHandle call once per variant."""
    return [
        ("epc_handle_update", lambda: handle.update(fake((4, 2), "<i8", 10))),
        ("epc_ht_dispatch", lambda: handle.dispatch(fake((4, 2048), "<f2", 0), fake((ROWS, 2048), "<f2", 1))),
        ("epc_ht_dispatch", lambda: handle.dispatch(**dispatch_tensors(), stream=0x5000)),
        ("epc_ht_dispatch", lambda: handle.dispatch(**fp8_dispatch_tensors())),
        ("epc_ht_combine", lambda: handle.combine(**combine_tensors(False))),
        ("epc_ht_combine", lambda: handle.combine(**combine_tensors(True), stream=0x6000)),
    ]


def test_sizing_constants_and_names():
    for name, value in vars(_ffi).items():
        if name.startswith("EPC_HT_SIZING_"):
            assert epcomm.HtSizing[name[len("EPC_HT_SIZING_") :]] == value
    assert parse_sizing("capacity") == epcomm.HtSizing.CAPACITY == _ffi.EPC_HT_SIZING_CAPACITY
    assert parse_sizing(" Exact ") == parse_sizing(epcomm.HtSizing.EXACT) == 0
    assert parse_sizing(7) == 7  # a newer library's sizing passes through
    with pytest.raises(ValueError, match="unknown sizing 'huge'; expected one of exact"):
        parse_sizing("huge")
    with pytest.raises(TypeError, match="not bool"):
        parse_sizing(True)


def test_every_call_on_a_dead_handle_is_refused_by_the_library(dead_ht_handle):
    assert (dead_ht_handle.rows, dead_ht_handle.sizing) == (ROWS, epcomm.HtSizing.CAPACITY)
    refused_then_closed(dead_ht_handle, ht_calls(dead_ht_handle))
    assert repr(dead_ht_handle) == "HtHandle(closed)"


def test_a_closed_handle_is_refused_without_calling_the_library(dead_ht_handle):
    with pytest.raises(epcomm.EpcError):
        dead_ht_handle.close()
    message = epcomm.last_error()
    for _, make_call in ht_calls(dead_ht_handle):
        with pytest.raises(epcomm.EpcError, match="the handle is closed") as caught:
            make_call()
        assert caught.value.function is None
    assert epcomm.last_error() == message  # no library call cleared it


def test_group_close_refuses_while_an_ht_handle_is_open(dead_group, dead_ht_handle):
    with pytest.raises(epcomm.EpcError, match="1 handle"):
        dead_group.close()
    assert not dead_group.closed


def test_missing_tensors_are_named_before_the_library(dead_ht_handle):
    with pytest.raises(epcomm.InvalidTensorError, match="out_x is required"):
        dead_ht_handle.dispatch(fake((4, 2048), "<f2", 0), None)
    # Backward weights travel in pairs: one without the other is refused here.
    t = combine_tensors(True)
    del t["out_topk_weights"]
    with pytest.raises(epcomm.InvalidTensorError, match="out_topk_weights is required"):
        dead_ht_handle.combine(**t)
    strided = CudaArrayInterface((ROWS, 2), "<i4", strides=(16, 4))
    with pytest.raises(epcomm.InvalidTensorError, match="out_topk_idx: .*not contiguous"):
        dead_ht_handle.dispatch(fake((4, 2048), "<f2", 0), fake((ROWS, 2048), "<f2", 1), out_topk_idx=strided)
    assert not dead_ht_handle._in_flight  # noqa: SLF001 (the borrowed tensors went back)


def test_arguments_reach_the_c_calls_in_order(dead_group, dead_ht_handle, monkeypatch):
    seen = []
    monkeypatch.setattr(handle_module, "call", lambda name, *args: seen.append((name, args)))
    created = epcomm.HtHandle.create(dead_group, fake((4, 2), "<i4", 10), sizing="capacity", stream=0x4000)
    t = dispatch_tensors()
    dead_ht_handle.dispatch(
        t["x"],
        t["out_x"],
        topk_weights=t["topk_weights"],
        out_topk_weights=t["out_topk_weights"],
        out_num_recv=t["out_num_recv"],
        stream=0x5000,
    )
    dead_ht_handle.combine(**combine_tensors(False))
    dead_ht_handle.combine(**combine_tensors(True), stream=0x6000)
    (c_name, c_args), (d_name, d_args), (p_name, p_args), (b_name, b_args) = seen

    def data(arg):
        return None if arg is None else arg._obj.data - FAKE_DEVICE_POINTER  # noqa: SLF001

    assert c_name == "epc_ht_handle_create" and len(c_args) == 6
    assert data(c_args[1]) == 10 * 0x100000 and c_args[2].value == _ffi.EPC_HT_SIZING_CAPACITY
    assert c_args[3].value == 0x4000
    assert created.sizing == epcomm.HtSizing.CAPACITY and created.rows == 0  # nothing written
    created._pointer = None  # noqa: SLF001 (the fake call made no handle)

    assert d_name == "epc_ht_dispatch" and len(d_args) == 12
    assert [data(a) for a in d_args[1:10]] == [
        0,
        None,
        2 * 0x100000,
        0x100000,
        None,
        None,
        3 * 0x100000,
        None,
        6 * 0x100000,
    ]
    assert d_args[10].value == 0 and d_args[11].value == 0x5000

    assert p_name == b_name == "epc_ht_combine" and len(p_args) == len(b_args) == 7
    assert [data(a) for a in p_args[1:5]] == [0x100000, None, 0, None]
    assert p_args[5].value == 0 and p_args[6].value is None  # the legacy default stream
    assert [data(a) for a in b_args[1:5]] == [0x100000, 3 * 0x100000, 0, 2 * 0x100000]
    assert b_args[5].value == _ffi.EPC_FLAG_BACKWARD_WEIGHTS and b_args[6].value == 0x6000
    assert len(dead_ht_handle._in_flight) == 4  # noqa: SLF001 (held until the next call)


def test_a_library_older_than_abi_1_2_is_unsupported(dead_group, dead_ht_handle, monkeypatch):
    library = epcomm.load_library()
    missing = {"epc_ht_handle_create", "epc_ht_dispatch", "epc_ht_combine"}
    monkeypatch.setattr(library, "missing", library.missing | missing)
    for function, make_call in [
        ("epc_ht_handle_create", lambda: epcomm.HtHandle.create(dead_group, fake((4, 2), "<i8", 10))),
        *ht_calls(dead_ht_handle)[1:],
    ]:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        assert caught.value.status == epcomm.Status.UNSUPPORTED
        assert f"{function} is not exported" in caught.value.message
    assert not dead_ht_handle._in_flight  # noqa: SLF001
