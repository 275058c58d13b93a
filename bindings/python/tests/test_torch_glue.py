# SPDX-License-Identifier: Apache-2.0
"""epcomm.torch's failure paths on the CPU, over a stand-in torch (fakes.fake_torch) and a
stand-in for the library call: what a Buffer or a slot created before the failure is closed again,
newest first, and the original error is raised."""

import ctypes
import importlib
import sys
import types

import pytest

import epcomm
from epcomm import _ffi, bootstrap, group as group_module, handle as handle_module
from epcomm.errors import error_for
from fakes import DeadObject, fake_torch


@pytest.fixture
def ept(monkeypatch):
    """epcomm.torch imported over the stand-in torch, forgotten afterwards (where torch is
    installed, test_torch.py gets the real one back)."""
    for name, module in fake_torch().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "epcomm.torch", raising=False)
    monkeypatch.delattr(epcomm, "torch", raising=False)
    module = importlib.import_module("epcomm.torch")
    yield module
    sys.modules.pop("epcomm.torch", None)
    if getattr(epcomm, "torch", None) is module:
        delattr(epcomm, "torch")


def library(memory, fail, calls):
    """A stand-in for the library's `call`: creation writes `memory`'s pointer to the
    out-parameter, every function in `fail` raises its EpcError, every call is recorded."""

    def call(name, *args):
        calls.append(name)
        if name in fail:
            raise fail[name]
        if name.endswith("_create"):
            ctypes.cast(args[-1], ctypes.POINTER(type(memory.pointer)))[0] = memory.pointer

    return call


@pytest.mark.parametrize("destroy", [None, _ffi.EPC_ERR_CUDA])
def test_a_slot_whose_handle_query_fails_closes_its_handle(ept, dead_group, monkeypatch, destroy):
    """A _Slot's handle is made before handle.rows queries it: when the query fails, the
    handle is destroyed (else it leaks and the library refuses to destroy the group), and
    the query's error is raised, also when the destroy fails too."""
    calls = []
    query_failed = error_for(_ffi.EPC_ERR_CUDA, "the query failed", "epc_handle_query")
    fail = {"epc_handle_query": query_failed}
    if destroy is not None:
        fail["epc_handle_destroy"] = error_for(destroy, "the destroy failed", "epc_handle_destroy")
    monkeypatch.setattr(handle_module, "call", library(DeadObject(_ffi.EpcHandle), fail, calls))
    with pytest.raises(epcomm.EpcError) as caught:
        ept._Slot(types.SimpleNamespace(group=dead_group))  # noqa: SLF001
    assert caught.value is query_failed
    assert calls == ["epc_handle_create", "epc_handle_query", "epc_handle_destroy"]
    assert not [h for h in dead_group._handles if not h.closed]  # noqa: SLF001


@pytest.mark.parametrize("destroy", [None, _ffi.EPC_ERR_INVALID_USAGE])
def test_a_buffer_whose_group_query_fails_closes_its_group_and_communicator(ept, monkeypatch, destroy):
    """Buffer() creates a communicator and a group, then queries the group: when the query
    fails, the group and then the communicator are closed, and the query's error is raised,
    also when closing them fails (a refused group keeps its communicator, which then
    refuses to close)."""
    calls = []
    query_failed = error_for(_ffi.EPC_ERR_CUDA, "the query failed", "epc_group_query")
    fail = {"epc_group_query": query_failed}
    if destroy is not None:
        fail["epc_group_destroy"] = error_for(destroy, "the group still has 1 live handle(s)", "epc_group_destroy")
    call = library(DeadObject(_ffi.EpcGroup), fail, calls)
    monkeypatch.setattr(group_module, "call", call)
    monkeypatch.setattr(bootstrap, "call", call)
    comm = epcomm.Comm(0xBEEF000, owned=True)
    monkeypatch.setattr(ept.Buffer, "_communicator", lambda self, pg, adopt: (comm, "a stand-in"))
    with pytest.raises(epcomm.EpcError) as caught:
        ept.Buffer(num_experts=8, hidden=512)
    assert caught.value is query_failed
    if destroy is None:
        assert calls == ["epc_group_create", "epc_group_query", "epc_group_destroy", "epc_comm_destroy"]
        assert comm.closed
    else:
        assert calls == ["epc_group_create", "epc_group_query", "epc_group_destroy"]
        assert not comm.closed  # refused: a group the library holds is still open on it
        for group in comm._groups:  # noqa: SLF001 (nothing real to destroy)
            group._handle = None  # noqa: SLF001
        comm._owned = False  # noqa: SLF001
        comm.close()
