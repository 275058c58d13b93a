# SPDX-License-Identifier: Apache-2.0
"""Configuration, plan query and the CPU-checkable parts of groups and communicators."""

import ctypes
import gc
import warnings

import pytest

import epcomm
from epcomm import _ffi, config as config_module, group as group_module, plan as plan_module


def deepseek_config(**overrides):
    return epcomm.GroupConfig(num_experts=256, hidden=7168, **overrides)


def test_plan_for_four_ranks_256_experts_hidden_7168():
    plan = epcomm.plan_query(deepseek_config(), nranks=4, lsa_size=4, num_nodes=1)
    assert plan.symmetric_bytes == 35233792
    assert len(plan.regions) == 9
    assert plan.regions[1].name == "dispatch_recv[0]"
    assert plan.regions[1].kind == epcomm.RegionKind.DISPATCH_RECV
    assert plan.regions[1].slot == 0
    assert plan.region("dispatch_recv[0]") == plan.regions[1]
    assert plan.mode == epcomm.Mode.LOW_LATENCY and plan.num_slots == 2
    assert plan.max_token_bytes == 2 * 7168 and plan.recv_capacity == 4 * 128
    assert plan.max_pending_steps == 2 and plan.handle_bytes > 0
    # Regions lie inside the window and do not overlap.
    end = 0
    for region in sorted(plan.regions, key=lambda r: r.offset):
        assert region.offset >= end
        end = region.offset + region.size
    assert end <= plan.symmetric_bytes


def test_virtual_nodes_of_two_ranks_plan_a_network_staging_region():
    whole_team = epcomm.plan_query(deepseek_config(), nranks=4, lsa_size=4, num_nodes=1)
    plan = epcomm.plan_query(deepseek_config(virtual_node_size=2), nranks=4, lsa_size=4, num_nodes=1)
    # The library read the field: the two ranks of the other virtual node get a staging
    # mirror, the last region of the window.
    staging = plan.regions[-1]
    assert staging.kind == epcomm.RegionKind.NET_STAGING == _ffi.EPC_REGION_NET_STAGING
    assert staging.name == "net_staging" and staging.slot is None
    assert len(plan.regions) == len(whole_team.regions) + 1
    assert all(r.kind != epcomm.RegionKind.NET_STAGING for r in whole_team.regions)
    assert staging.offset + staging.size <= plan.symmetric_bytes
    assert plan.symmetric_bytes > whole_team.symmetric_bytes
    # Both modes serve GroupFlags.COMBINE_PER_ENTRY across virtual nodes (2.1): each rank
    # stages the entries' rows it sends the other node, so the staging region grows.
    for mode in (epcomm.Mode.LOW_LATENCY, epcomm.Mode.HIGH_THROUGHPUT):
        partials = epcomm.plan_query(deepseek_config(mode=mode, virtual_node_size=2), 4, 4, 1)
        per_entry = epcomm.plan_query(
            deepseek_config(mode=mode, virtual_node_size=2, flags=epcomm.GroupFlags.COMBINE_PER_ENTRY), 4, 4, 1
        )
        assert partials.regions[-1].kind == per_entry.regions[-1].kind == epcomm.RegionKind.NET_STAGING, mode
        assert per_entry.regions[-1].size > partials.regions[-1].size, mode


def test_a_virtual_node_size_that_does_not_divide_the_team_is_refused():
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.plan_query(deepseek_config(virtual_node_size=3), nranks=4, lsa_size=4, num_nodes=1)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert "virtual_node_size" in caught.value.message
    assert caught.value.function == "epc_plan_query"


def test_an_fp8_only_window_is_planned_from_max_token_bytes():
    h = 7168
    wide = epcomm.plan_query(deepseek_config(), 4)
    fp8 = epcomm.plan_query(deepseek_config(max_token_bytes=h + h // 32), 4)
    assert fp8.max_token_bytes == h + h // 32 and fp8.symmetric_bytes < wide.symmetric_bytes
    # Values between the two sizes are rounded down to one of them.
    assert epcomm.plan_query(deepseek_config(max_token_bytes=2 * h - 1), 4).max_token_bytes == h + h // 32
    assert epcomm.plan_query(deepseek_config(max_token_bytes=3 * h), 4).max_token_bytes == 2 * h
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.plan_query(deepseek_config(max_token_bytes=h), 4)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert "max_token_bytes" in caught.value.message


def test_what_2_0_does_not_serve_is_unsupported_and_names_the_field():
    for overrides, field in [
        (dict(recv_capacity=4 * 128 - 1), "recv_capacity"),
        (dict(max_pending_steps=4), "max_pending_steps"),
    ]:
        with pytest.raises(epcomm.EpcError) as caught:
            epcomm.plan_query(deepseek_config(**overrides), 4)
        assert caught.value.status == epcomm.Status.UNSUPPORTED, overrides
        assert field in caught.value.message, caught.value.message
    plan = epcomm.plan_query(deepseek_config(recv_capacity=4 * 128, overflow="drop", max_pending_steps=1), 4)
    assert plan.recv_capacity == 4 * 128
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.plan_query(deepseek_config(recv_capacity=4 * 128 + 1), 4)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT and "recv_capacity" in caught.value.message


def test_lsa_size_defaults_to_every_rank():
    assert epcomm.plan_query(deepseek_config(), 4) == epcomm.plan_query(deepseek_config(), 4, 4, 1)


def test_num_nodes_defaults_to_one_per_nvlink_domain():
    # The library requires lsa_size * num_nodes == nranks; a default of one node refused
    # every lsa_size below nranks.
    assert epcomm.plan_query(deepseek_config(), 8, lsa_size=4) == epcomm.plan_query(deepseek_config(), 8, 4, 2)
    assert epcomm.plan_query(deepseek_config(), 8, lsa_size=4).regions[-1].name == "net_staging"
    with pytest.raises(epcomm.EpcError, match="lsa_size"):
        epcomm.plan_query(deepseek_config(), 8, lsa_size=3)  # the library's refusal


def test_regions_not_per_slot_have_no_slot():
    plan = epcomm.plan_query(deepseek_config(), 4)
    control = [r for r in plan.regions if r.kind == epcomm.RegionKind.CONTROL]
    assert control and all(r.slot is None for r in control)


def test_high_throughput_mode_plans_one_slot():
    plan = epcomm.plan_query(deepseek_config(mode=epcomm.Mode.HIGH_THROUGHPUT), 4)
    assert plan.mode == epcomm.Mode.HIGH_THROUGHPUT and plan.num_slots == 1


def test_hidden_zero_is_an_invalid_argument_naming_hidden():
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.plan_query(epcomm.GroupConfig(num_experts=256, hidden=0), 4)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert "hidden" in caught.value.message


def test_group_create_without_a_communicator():
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.Group.create(None, deepseek_config())
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert "comm is NULL" in caught.value.message
    assert caught.value.function == "epc_group_create"


def test_group_create_validates_the_config_before_the_communicator():
    with pytest.raises(epcomm.EpcError, match="hidden"):
        epcomm.Group.create(None, epcomm.GroupConfig(num_experts=256))


def test_config_struct_header_and_zero_defaults():
    struct = epcomm.GroupConfig().to_struct()
    assert struct.struct_size == ctypes.sizeof(_ffi.EpcGroupConfig)
    assert struct.abi_version == _ffi.EPC_ABI_VERSION
    for name, _ in _ffi.EpcGroupConfig._fields_[2:]:
        value = getattr(struct, name)
        assert not value, name  # 0 or NULL: the library's defaults


def test_config_fields_reach_the_struct():
    struct = epcomm.GroupConfig(
        num_experts=64,
        hidden=2048,
        mode=epcomm.Mode.HIGH_THROUGHPUT,
        max_tokens_per_rank=512,
        max_topk=6,
        max_token_bytes=2048 + 64,
        recv_capacity=1 << 40,
        overflow="drop",
        max_pending_steps=1,
        num_sms=20,
        timeout_ms=5000,
        flags=epcomm.GroupFlags.COMBINE_PER_ENTRY,
        virtual_node_size=2,
    ).to_struct()
    assert (
        struct.num_experts,
        struct.hidden,
        struct.mode,
        struct.max_tokens_per_rank,
        struct.max_topk,
        struct.max_token_bytes,
        struct.recv_capacity,
        struct.overflow,
        struct.max_pending_steps,
        struct.num_sms,
        struct.timeout_ms,
        struct.flags,
        struct.virtual_node_size,
    ) == (
        64,
        2048,
        _ffi.EPC_MODE_HIGH_THROUGHPUT,
        512,
        6,
        2112,
        1 << 40,
        _ffi.EPC_OVERFLOW_DROP,
        1,
        20,
        5000,
        _ffi.EPC_GROUP_COMBINE_PER_ENTRY,
        2,
    )
    assert epcomm.GroupConfig(mode="high_throughput").to_struct().mode == _ffi.EPC_MODE_HIGH_THROUGHPUT
    with pytest.raises(ValueError, match="unknown Overflow 'wrap'"):
        epcomm.GroupConfig(overflow="wrap").to_struct()


@pytest.mark.parametrize(
    "field, value, bits", [("hidden", -1, 32), ("num_experts", 1 << 32, 32), ("recv_capacity", 1 << 64, 64)]
)
def test_config_values_that_do_not_fit_are_refused_not_truncated(field, value, bits):
    with pytest.raises(ValueError, match=f"GroupConfig.{field} .*uint{bits}"):
        epcomm.GroupConfig(**{field: value}).to_struct()


def test_config_needs_both_allocator_functions():
    with pytest.raises(ValueError, match="both alloc_fn and free_fn"):
        epcomm.GroupConfig(alloc_fn=lambda ctx, n: 0).to_struct()


def test_python_allocator_callbacks_are_wrapped_safely():
    calls = []

    def alloc(ctx, nbytes):
        calls.append(("alloc", ctx, nbytes))
        raise MemoryError("no memory in this test")

    struct = epcomm.GroupConfig(alloc_fn=alloc, free_fn=lambda ctx, p: calls.append(p), alloc_ctx=0x1234).to_struct()
    out = ctypes.c_void_p(0)
    hook_calls = []
    import sys

    saved, sys.unraisablehook = sys.unraisablehook, hook_calls.append
    try:
        status = struct.alloc_fn(struct.alloc_ctx, 4096, ctypes.byref(out))
    finally:
        sys.unraisablehook = saved
    assert status != 0 and out.value is None  # a raising allocator reports a failure
    assert calls == [("alloc", 0x1234, 4096)]
    assert isinstance(hook_calls[0].exc_value, MemoryError)


def test_dtype_spellings():
    for spelling in ("bf16", "bfloat16", "BF16", "torch.bfloat16", epcomm.Dtype.BF16, 1):
        assert epcomm.parse_dtype(spelling) == epcomm.Dtype.BF16
    assert epcomm.parse_dtype("float8_e4m3fn") == epcomm.Dtype.FP8_E4M3
    with pytest.raises(ValueError, match="unknown dtype"):
        epcomm.parse_dtype("float64")


def test_python_types_carry_every_struct_field():
    # A field added to the header must be added to the dataclasses too.
    assert config_module.unexposed_struct_fields() == []
    assert plan_module.unexposed_struct_fields() == []
    assert group_module.unexposed_struct_fields() == []


def test_unique_id_round_trips_through_bytes_and_hex():
    uid = epcomm.UniqueId.create()
    assert len(bytes(uid)) == _ffi.EPC_UNIQUE_ID_BYTES
    assert epcomm.UniqueId.from_hex(uid.hex()) == uid
    assert epcomm.UniqueId.from_bytes(bytes(uid)) == uid
    assert hash(epcomm.UniqueId.from_hex(uid.hex())) == hash(uid)
    assert bytes(uid.to_struct().bytes) == bytes(uid)
    assert epcomm.UniqueId.create() != uid
    import pickle

    assert pickle.loads(pickle.dumps(uid)) == uid


def test_unique_id_rejects_wrong_sizes():
    with pytest.raises(ValueError, match="128 bytes"):
        epcomm.UniqueId(b"short")
    with pytest.raises(ValueError, match="hex digits"):
        epcomm.UniqueId.from_hex("zz")


def test_comm_init_checks_its_arguments():
    with pytest.raises(TypeError, match="UniqueId"):
        epcomm.Comm.init(b"\0" * 128, 2, 0)
    uid = epcomm.UniqueId(b"\0" * 128)
    # The library checks the rank before any GPU work, with a timeout (2.3) or without.
    for timeout_ms, function in ((0, "epc_comm_init"), (1000, "epc_comm_init_config")):
        with pytest.raises(epcomm.EpcError, match="rank is 5") as caught:
            epcomm.Comm.init(uid, 2, 5, timeout_ms=timeout_ms)
        assert (caught.value.status, caught.value.function) == (epcomm.Status.INVALID_ARGUMENT, function)
    with pytest.raises(ValueError, match="timeout_ms is -1"):
        epcomm.Comm.init(uid, 1, 0, timeout_ms=-1)
    with pytest.raises(TypeError, match="timeout_ms must be an int"):
        epcomm.Comm.init(uid, 1, 0, timeout_ms=1.5)
    with pytest.raises(TypeError):
        epcomm.Comm.init(uid, 1, 0, 0, 1000)  # timeout_ms is keyword-only


def test_comm_init_with_a_timeout_on_a_2_2_library_is_unsupported(monkeypatch):
    library = epcomm.load_library()
    monkeypatch.setattr(library, "missing", library.missing | {"epc_comm_init_config"})
    uid = epcomm.UniqueId(b"\0" * 128)
    with pytest.raises(epcomm.EpcError, match="epc_comm_init_config is not exported") as caught:
        epcomm.Comm.init(uid, 2, 5, timeout_ms=1000)
    assert caught.value.status == epcomm.Status.UNSUPPORTED
    with pytest.raises(epcomm.EpcError, match="rank is 5"):  # without a timeout: epc_comm_init
        epcomm.Comm.init(uid, 2, 5)


def test_adopted_communicators_are_not_destroyed():
    comm = epcomm.Comm.adopt(0xDEAD0000)
    assert comm.handle == 0xDEAD0000 and not comm.owned
    comm.close()  # forgets it: a real destroy of this fake handle would crash
    assert comm.closed
    with pytest.raises(epcomm.EpcError, match="closed"):
        comm.handle
    with pytest.raises(ValueError):
        epcomm.Comm.adopt(0)


def _fake_group():
    """A Group around a zeroed buffer: if the bindings ever passed it to the library, the
    library would report "not a live EpcGroup" (it checks a magic word), not crash."""
    storage = ctypes.create_string_buffer(256)
    handle = ctypes.cast(storage, ctypes.POINTER(_ffi.EpcGroup))
    group = epcomm.Group(handle, None, epcomm.GroupConfig().to_struct())
    group._test_storage = storage
    return group


def test_collecting_an_open_group_warns_and_calls_nothing():
    with pytest.raises(epcomm.EpcError):
        epcomm.plan_query(epcomm.GroupConfig(num_experts=256), 4)
    message = epcomm.last_error()
    group = _fake_group()
    leaked_before = len(group_module._leaked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del group
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and "close()" in str(w.message) for w in caught)
    assert len(group_module._leaked) == leaked_before + 1
    # Any library call would have cleared the thread's last error: none was made.
    assert epcomm.last_error() == message


def test_group_finalizer_never_raises_even_when_warnings_are_errors():
    group = _fake_group()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group.__del__()  # must swallow the ResourceWarning-as-error


def test_closed_groups_refuse_calls_and_close_is_idempotent():
    group = _fake_group()
    with pytest.raises(epcomm.EpcError) as caught:
        group.close()  # the library refuses the fake handle, and the handle is released
    assert "not a live EpcGroup" in caught.value.message
    assert group.closed
    group.close()
    with pytest.raises(epcomm.EpcError, match="closed"):
        group.info()
    with pytest.raises(epcomm.EpcError, match="closed"):
        group.barrier()


def test_async_error_of_a_dead_group_carries_the_library_message(dead_group):
    with pytest.raises(epcomm.EpcError) as caught:
        dead_group.async_error()
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert caught.value.function == "epc_group_async_error"
    assert "group is not a live EpcGroup" in caught.value.message


def test_async_error_of_a_null_group_pointer():
    group = epcomm.Group(ctypes.POINTER(_ffi.EpcGroup)(), None, epcomm.GroupConfig().to_struct())
    with pytest.raises(epcomm.EpcError) as caught:
        group.async_error()
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert "group is NULL" in caught.value.message
    group._handle = None


def test_async_error_of_a_closed_group_is_refused_here(dead_group):
    dead_group._handle = None  # what close() leaves
    with pytest.raises(epcomm.EpcError, match="the group is closed") as caught:
        dead_group.async_error()
    assert caught.value.function is None


@pytest.mark.parametrize("method", ["info", "async_error"])
def test_close_never_destroys_the_group_under_a_query_on_another_thread(dead_group, monkeypatch, method):
    """info() and async_error() run on any thread; close() on another must wait for a query
    in flight before epc_group_destroy frees what it reads."""
    import threading

    in_query, release, calls = threading.Event(), threading.Event(), []

    def library_call(name, *args):
        calls.append(name)
        if name != "epc_group_destroy":
            in_query.set()
            assert release.wait(10)

    monkeypatch.setattr(group_module, "call", library_call)
    monkeypatch.setattr(group_module, "info_from_struct", lambda struct: None)
    query = threading.Thread(target=getattr(dead_group, method))
    query.start()
    assert in_query.wait(10)
    closing = threading.Thread(target=dead_group.close)
    closing.start()
    closing.join(0.5)
    assert calls[-1] != "epc_group_destroy", f"close() destroyed the group under {method}()"
    release.set()
    query.join(10)
    closing.join(10)
    assert calls[-1] == "epc_group_destroy" and dead_group.closed


def test_async_error_does_not_wait_for_the_groups_other_calls(dead_group):
    import threading

    outcome = []

    def query():
        try:
            dead_group.async_error()
        except epcomm.EpcError as error:
            outcome.append(error)

    with dead_group._calls:  # as a barrier or a handle's call in progress holds it
        thread = threading.Thread(target=query)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), "async_error waited for the lock of the group's calls"
    assert "not a live EpcGroup" in outcome[0].message


def test_async_error_needs_a_library_of_abi_1_3(dead_group, monkeypatch):
    from epcomm import _library

    library = _library.library()
    monkeypatch.setattr(library, "missing", library.missing | {"epc_group_async_error"})
    with pytest.raises(epcomm.EpcError) as caught:
        dead_group.async_error()
    assert caught.value.status == epcomm.Status.UNSUPPORTED
    assert "epc_group_async_error is not exported" in caught.value.message


def test_an_owned_comm_refuses_to_close_under_an_open_group():
    comm = epcomm.Comm(0xBEEF000, owned=True)
    group = _fake_group()
    group._comm = comm
    comm._register(group)
    with pytest.raises(epcomm.InvalidUsageError, match="still open") as refused:
        comm.close()
    assert refused.value.status == epcomm.Status.INVALID_USAGE  # a call out of order
    group._handle = None  # pretend it was closed, then forget the fake communicator
    comm._owned = False
    comm.close()
    assert comm.closed


def test_a_comm_refuses_to_close_under_a_group_collected_while_open(monkeypatch):
    """A Group collected while open is leaked, its EpcGroup* still alive in the library (as
    when the library refused to destroy it): the communicator must not be destroyed under
    it, though no Group object is left to see."""
    from epcomm import bootstrap

    destroyed = []
    monkeypatch.setattr(bootstrap, "call", lambda name, *args: destroyed.append(name))
    comm = epcomm.Comm(0xBEEF000, owned=True)
    group = _fake_group()
    group._comm = comm
    comm._register(group)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del group
        gc.collect()
    with pytest.raises(epcomm.InvalidUsageError, match="1 group.*1 collected without close") as refused:
        comm.close()
    assert refused.value.status == epcomm.Status.INVALID_USAGE
    assert not comm.closed and destroyed == []
    comm._leaked_groups.clear()  # forget the fake group: nothing real holds the communicator
    comm.close()
    assert comm.closed and destroyed == ["epc_comm_destroy"]


def test_stream_arguments():
    from epcomm._handles import stream_address

    class TorchLike:
        cuda_stream = 0x1000

    class CudaStreamProtocol:
        def __cuda_stream__(self):
            return (0, 0x2000)

    assert stream_address(None) is None and stream_address(0) is None
    assert stream_address(0x3000) == 0x3000
    assert stream_address(TorchLike()) == 0x1000
    assert stream_address(CudaStreamProtocol()) == 0x2000
    assert stream_address(ctypes.c_void_p(0x4000)) == 0x4000
    with pytest.raises(TypeError, match="cudaStream_t"):
        stream_address("default")


def test_high_throughput_recv_capacity_shrinks_the_dispatch_window(monkeypatch):
    # Served since 2.1 on HT groups: recv_capacity compact dispatch slots, on one node and
    # across (here virtual) nodes alike, with whole steps (by default a window across nodes
    # holds a part of a step: EPCOMM_HT_PART_TOKENS, docs/design.md).
    monkeypatch.setenv("EPCOMM_HT_PART_TOKENS", "0")

    def dispatch_recv(plan):
        return next(r.size for r in plan.regions if r.name == "dispatch_recv")

    for nodes in ({}, dict(virtual_node_size=2)):
        full = epcomm.plan_query(deepseek_config(mode="high_throughput", **nodes), 4)
        quarter = epcomm.plan_query(
            deepseek_config(mode="high_throughput", recv_capacity=4096, overflow="drop", **nodes), 4
        )
        assert (full.recv_capacity, quarter.recv_capacity) == (4 * 4096, 4096), nodes
        assert dispatch_recv(full) == 4 * 4096 * full.message_bytes
        assert dispatch_recv(quarter) == 4096 * quarter.message_bytes
        assert full.symmetric_bytes - quarter.symmetric_bytes == dispatch_recv(full) - dispatch_recv(quarter)
