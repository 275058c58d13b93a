#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the seed corpus of each fuzz target into tests/fuzz/corpus/<target>/.

    python3 tests/fuzz/make_seeds.py          # (re)write the seeds
    python3 tests/fuzz/make_seeds.py --check  # exit 1 if a committed seed differs

Each seed is one well-understood case (a default LL or HT group, fp8, several nodes, a bad
topology, an older or newer caller's struct, a tensor of the shape each call takes...)
encoded the way the target decodes its input (fuzz_input.hpp: a selector byte picks a
table value, a small number, or a raw little-endian value). The tables here mirror the ones
in the targets; a mismatch only makes a seed decode to a different case, never a failure.
Inputs a fuzzer found (crashes turned into regressions) live beside these seeds under names
starting with "found-" and are not written by this script.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
SNAPSHOT = Path(__file__).resolve().parents[2] / "capi" / "abi.json"


def _abi() -> dict:
    """The newest entry of capi/abi.json: struct layouts and constants, so the seeds follow
    the header instead of copies of its numbers."""
    versions = json.loads(SNAPSHOT.read_text())["versions"]
    newest = max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    return versions[newest]


ABI = _abi()
STRUCTS = ABI["structs"]
ABI_VERSION = ABI["constants"]["EPC_ABI_VERSION"]  # older and newer ones are seeds too
ANY = -1  # epc::kAnyExtent

# fuzz_planner.cpp
PLANNER_U32 = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    16,
    24,
    32,
    33,
    64,
    127,
    128,
    129,
    132,
    256,
    1023,
    1024,
    1025,
    2048,
    2880,
    4096,
    7168,
    65535,
    65536,
    65537,
    (1 << 20) - 8,
    1 << 20,
    (1 << 20) + 8,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
]
PLANNER_I32 = [0, 1, 2, 3, 4, 8, 16, 72, 256, 65535, 65536, 65537, -1, -(1 << 31), (1 << 31) - 1]
# fuzz_c_api.cpp
CAPI_VERSIONS = [ABI_VERSION, 0, 10000, 10100, 10200, 10299, 19999, 20000, 9999, 0xFFFFFFFF]
CAPI_RANKS = [1, 2, 3, 4, 8, 16, 72, 256, 65536, 65537, 0, -1, -(1 << 31), (1 << 31) - 1]
# fuzz_tensor_check.cpp
TENSOR_EXTENTS = [
    0,
    1,
    2,
    7,
    8,
    16,
    128,
    1024,
    4096,
    7168,
    65536,
    1 << 31,
    1 << 32,
    1 << 40,
    1 << 62,
    (1 << 63) - 1,
    -1,
    -2,
    -(1 << 63),
]
TENSOR_DTYPES = [0, 1, 2, 3, 4, 5, 6, 7, 0xFFFFFFFF]
TENSOR_RANKS = [0, 1, 2, 3, 4, 5, -1, (1 << 31) - 1]
TENSOR_ALIGNMENTS = [1, 2, 4, 8, 16]
TENSOR_ADDRESSES = [0, 0x7F0000000000, 0x7F0000000004, 0x7F0000000010, 1]

BF16, FP16, FP32, FP8, INT32, INT64 = 1, 2, 3, 4, 5, 6
LL, HT = 1, 2


def pick(table: list[int], value: int, fmt: str) -> bytes:
    """The bytes FuzzInput::pick(table) decodes to `value`."""
    n = len(table)
    if value in table:
        return bytes([table.index(value)])
    if 0 <= value < 0xF0 - 2 * n:
        return bytes([2 * n + value])
    return bytes([0xF0]) + struct.pack("<" + fmt, value)


def u8(value: int) -> bytes:
    return bytes([value & 0xFF])


# ---- planner --------------------------------------------------------------------------------


def planner(
    mode=LL,
    experts=256,
    hidden=7168,
    tokens=0,
    topk=0,
    token_bytes=0,
    sms=0,
    timeout=0,
    lsa=8,
    nodes=1,
    flags=None,
    reserved=None,
    alloc=False,
    free=False,
    raw_topology=None,
    rings=None,
    recv_capacity=None,
) -> bytes:
    out = b"".join(pick(PLANNER_U32, v, "I") for v in (mode, experts, hidden, tokens, topk, token_bytes, sms, timeout))
    extras = (
        (flags is not None) * 1
        | (reserved is not None) * 2
        | alloc * 4
        | free * 8
        | (raw_topology is not None) * 16
        | (recv_capacity is not None) * 32
    )
    out += u8(extras)
    if flags is not None:
        out += struct.pack("<I", flags)
    if reserved is not None:
        out += struct.pack("<I", reserved)
    if recv_capacity is not None:
        out += pick(PLANNER_U32, recv_capacity, "I")
    if raw_topology is not None:
        out += b"".join(pick(PLANNER_I32, v, "i") for v in raw_topology)
    else:
        out += u8(lsa - 1) + u8(nodes - 1)
    if rings is not None:
        out += ring_environment(*rings)
    return out


# fuzz_planner.cpp's RingEnvironment: the texts EPCOMM_HT_RING_SLOTS and _CHANNELS take.
RING_TEXTS = ["0", "1", "2", "3", "7", "64", "65", "1024", "1025", "", "x", "-1", "2x"]


def ring_environment(slots: str, channels: str | None = None) -> bytes:
    """The bytes RingEnvironment decodes to EPCOMM_HT_RING_SLOTS=slots (and _CHANNELS=channels
    where given): a byte with bit 0 set, whose bits 1-7 modulo the texts pick the slots and
    whose bit 7 says a channels byte follows."""
    n = len(RING_TEXTS)
    low = 64 if channels is not None else 0
    k = next(k for k in range(low, low + 64) if k % n == RING_TEXTS.index(slots))
    out = u8(1 | (k << 1))
    if channels is not None:
        out += u8(RING_TEXTS.index(channels))
    return out


def fp8_bytes(hidden: int) -> int:
    """EpcGroupConfig.max_token_bytes of the fp8-only window: H + H / 32."""
    return hidden + hidden // 32


PLANNER_SEEDS = {
    "ll-default-8-ranks": planner(),
    "ll-4-ranks-explicit": planner(tokens=128, topk=8, token_bytes=2 * 7168, sms=132, timeout=10000, lsa=4),
    "ll-hidden-2880": planner(experts=64, hidden=2880, lsa=4),
    "ll-fp8-hidden-7168": planner(token_bytes=fp8_bytes(7168), lsa=4),
    "ll-fp8-hidden-128": planner(experts=64, hidden=128, token_bytes=fp8_bytes(128), lsa=2),
    "ll-fp8-hidden-1152": planner(experts=64, hidden=1152, token_bytes=fp8_bytes(1152), lsa=4),
    "ll-token-bytes-rounded-to-fp8": planner(token_bytes=2 * 7168 - 1, lsa=4),
    "ll-token-bytes-rounded-to-16-bit": planner(token_bytes=0xFFFFFFFF, lsa=4),
    "ll-1024-tokens-topk-32": planner(tokens=1024, topk=32, lsa=4),
    "ll-2-nodes": planner(lsa=8, nodes=2),
    "ht-default-4-ranks": planner(mode=HT, lsa=4),
    "ht-fp8-8192-tokens": planner(mode=HT, tokens=8192, token_bytes=fp8_bytes(7168), sms=24, lsa=4),
    "ht-65536-tokens-hidden-max": planner(
        mode=HT, experts=65536, hidden=1 << 20, tokens=65536, topk=32, lsa=16, nodes=16
    ),
    "ht-odd-hidden-topk-1": planner(mode=HT, experts=3, hidden=8, topk=1, lsa=3),
    "bad-experts-not-divisible": planner(experts=256, lsa=3),
    "bad-hidden-0": planner(hidden=0),
    "bad-hidden-not-multiple-of-8": planner(hidden=129),
    "bad-ll-tokens-1025": planner(tokens=1025),
    "bad-token-bytes-below-fp8": planner(token_bytes=fp8_bytes(7168) - 1),
    "bad-token-bytes-fp8-hidden-2880": planner(hidden=2880, token_bytes=fp8_bytes(2880)),
    "bad-mode-3": planner(mode=3),
    "ll-flags-combine-per-entry": planner(flags=1),
    "ll-flags-combine-per-entry-2-nodes": planner(flags=1, lsa=4, nodes=2),
    "ht-flags-combine-per-entry": planner(mode=HT, flags=1, lsa=4),
    "ht-flags-combine-per-entry-2-nodes": planner(mode=HT, flags=1, lsa=4, nodes=2),
    "bad-flags-unknown": planner(flags=2),
    "bad-reserved": planner(reserved=7),
    "bad-alloc-without-free": planner(alloc=True),
    "alloc-and-free": planner(alloc=True, free=True),
    "bad-topology-lsa-3-of-4": planner(raw_topology=(4, 3, 1)),
    "bad-topology-negative": planner(raw_topology=(-1, -1, -1)),
    "bad-topology-too-many-ranks": planner(experts=65536, raw_topology=(65537, 65537, 1)),
    "topology-65536-ranks": planner(experts=65536, hidden=8, raw_topology=(65536, 256, 256)),
    "ht-rings-3-slots-2-channels": planner(mode=HT, lsa=4, rings=("3", "2")),
    "ht-rings-default-channels": planner(mode=HT, lsa=8, rings=("2",)),
    "ht-rings-64-slots-1024-channels": planner(mode=HT, experts=32, hidden=2048, lsa=32, rings=("64", "1024")),
    "ll-rings-ignored": planner(lsa=4, rings=("2", "2")),
    "bad-ht-rings-slots-text": planner(mode=HT, lsa=4, rings=("x",)),
    "bad-ht-rings-channels-1025": planner(mode=HT, lsa=4, rings=("1", "1025")),
    "unsupported-ht-rings-2-nodes": planner(mode=HT, lsa=4, nodes=2, rings=("1",)),
    "unsupported-ht-rings-node-of-64": planner(mode=HT, experts=64, hidden=2048, lsa=64, rings=("1",)),
    "ht-recv-capacity-1024-one-node": planner(mode=HT, lsa=4, recv_capacity=1024),
    "ht-recv-capacity-4096-2-nodes": planner(mode=HT, lsa=4, nodes=2, recv_capacity=4096),
    "ht-recv-capacity-1-16-nodes": planner(mode=HT, experts=64, hidden=2048, lsa=2, nodes=16, recv_capacity=1),
    "unsupported-ll-recv-capacity-128": planner(lsa=4, recv_capacity=128),
    "bad-ht-recv-capacity-above-r-times-t": planner(mode=HT, lsa=4, recv_capacity=65537),
}


# ---- C API ---------------------------------------------------------------------------------

# fuzz_c_api.cpp's kVersions: this version, 0, 1.x, 2.x, 3.0, junk.
CAPI_VERSIONS = [ABI_VERSION, 0, 10000, 10300, 19999, 20000, 20001, 20100, 29999, 30000, 9999, 0xFFFFFFFF]
CAPI_RANKS = [1, 2, 3, 4, 8, 16, 72, 256, 65536, 65537, 0, -1, -(1 << 31), (1 << 31) - 1]
INT_FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def struct_image(name: str, size: int | None = None, tail: bytes = b"", **fields: int) -> bytes:
    """The bytes of a caller's struct `name` (layout from capi/abi.json) of `size` bytes
    (default: the whole struct): struct_size = size, abi_version = this ABI, the given
    integer fields, zeros elsewhere, then `tail` past the struct."""
    layout = STRUCTS[name]
    size = layout["size"] if size is None else size
    image = bytearray(layout["size"])
    values = {"struct_size": size, "abi_version": ABI_VERSION, **fields}
    for field, value in values.items():
        f = layout["fields"][field]
        struct.pack_into("<" + INT_FORMATS[f["size"]], image, f["offset"], value)
    image += tail
    block = max(8, size)
    return (bytes(image) + bytes(block))[:block]


def config_bytes(size=None, tail=b"", experts=256, hidden=7168, **fields) -> bytes:
    return struct_image("EpcGroupConfig", size, tail, num_experts=experts, hidden=hidden, **fields)


def offset_of(name: str, field: str) -> int:
    return STRUCTS[name]["fields"][field]["offset"]


CONFIG_SIZE = STRUCTS["EpcGroupConfig"]["size"]
PLAN_SIZE = STRUCTS["EpcPlan"]["size"]
API_SIZE = STRUCTS["EpcApi"]["size"]
TENSOR_SIZE = STRUCTS["EpcTensor"]["size"]


def struct_size(how: int, extra: bytes = b"") -> bytes:
    """struct_size_for(): how % 6 selects known / older / newer / tiny / field boundary / raw."""
    return u8(how) + extra


def older(known: int, size: int) -> bytes:
    """struct_size_for() decoding to `size` < known (case 1: known - byte % known)."""
    assert 0 < known - size < 256
    return struct_size(1, u8(known - size))


def boundary(known: int, size: int) -> bytes:
    """struct_size_for() decoding to `size` (case 4: 8 + 4 * (byte % (known / 4 + 8)))."""
    n = (size - 8) // 4
    assert size % 4 == 0 and 0 <= n < min(256, known // 4 + 8)
    return struct_size(4, u8(n))


def newer(extra: int) -> bytes:
    """struct_size_for() decoding to known + extra (case 2), extra < 64."""
    assert 0 <= extra < 64
    return struct_size(2, u8(extra))


def plan_query(
    config: bytes,
    nranks=8,
    lsa=None,
    nodes=None,
    config_size=b"\x00",
    plan_size=b"\x00",
    config_version=None,
    plan_version=None,
    null_config=False,
    null_plan=False,
) -> bytes:
    shape = (
        (config_version is not None) * 1
        | (lsa is not None) * 2
        | (nodes is not None) * 4
        | (plan_version is not None) * 8
        | null_config * 16
        | null_plan * 32
    )
    out = u8(0) + u8(shape) + config_size + config
    if config_version is not None:
        out += pick(CAPI_VERSIONS, config_version, "I")
    out += pick(CAPI_RANKS, nranks, "i")
    if lsa is not None:
        out += pick(CAPI_RANKS, lsa, "i")
    if nodes is not None:
        out += pick(CAPI_RANKS, nodes, "i")
    out += plan_size
    if plan_version is not None:
        out += pick(CAPI_VERSIONS, plan_version, "I")
    return out


def get_api(size=b"\x00", major=None, header_version=ABI_VERSION, null=False) -> bytes:
    shape = (major is not None) * 1 | null * 2
    out = u8(1) + u8(shape)
    if major is not None:
        out += struct.pack("<I", major)
    return out + size + struct.pack("<I", header_version)


def last_error(mode: int, value: bytes = b"", null_buf=False, null_length=False) -> bytes:
    return u8(2) + u8(mode | null_buf * 4 | null_length * 8) + value


def get_version(shape=0) -> bytes:
    return u8(3) + u8(shape)


def status_string(status: int) -> bytes:
    return u8(4) + struct.pack("<i", status)


# The objects of the group and handle calls (DeadObject): NULL, zeros, the group's or the
# handle's magic word followed by zeros, or 64 input bytes.
NULL_OBJECT, ZEROED, GROUP_MAGIC, HANDLE_MAGIC = u8(0), u8(1), u8(2), u8(3)


def object_bytes(words: bytes) -> bytes:
    return u8(4) + (words + bytes(64))[:64]


def tensor_bytes(dtype=BF16, shape=(), data=0) -> bytes:
    """An EpcTensor image (its data pointer is replaced by NULL in the target)."""
    image = bytearray(TENSOR_SIZE)
    layout = STRUCTS["EpcTensor"]["fields"]
    struct.pack_into("<Q", image, layout["data"]["offset"], data)
    struct.pack_into("<I", image, layout["dtype"]["offset"], dtype)
    struct.pack_into("<i", image, layout["ndim"]["offset"], len(shape))
    for i, extent in enumerate(shape):
        struct.pack_into("<q", image, layout["shape"]["offset"] + 8 * i, extent)
    return bytes(image)


def arg_struct(
    name: str,
    pointers: list[str],
    tensors: dict[str, bytes] | None = None,
    size: bytes = b"\x00",
    image: bytes | None = None,
    version=None,
    null=False,
) -> bytes:
    """ArgStruct: struct_size_for, a shape byte, the struct's bytes, [its version], then per
    pointer field an EpcTensor image and whether the field points at it."""
    tensors = tensors or {}
    out = size + u8((version is not None) * 1 | null * 2)
    out += image if image is not None else struct_image(name)
    if version is not None:
        out += pick(CAPI_VERSIONS, version, "I")
    for field in pointers:
        out += tensors.get(field, bytes(TENSOR_SIZE)) + u8(field in tensors)
    return out


ROUTING_POINTERS = ["topk_idx", "num_tokens"]
DISPATCH_POINTERS = [
    "x",
    "x_scales",
    "x_global_scale",
    "topk_weights",
    "out_x",
    "out_scales",
    "out_topk_idx",
    "out_topk_weights",
    "out_expert_counts",
    "out_expert_offsets",
    "out_rank_counts",
    "out_num_recv",
    "out_expert_counts_host",
    "acc_expert_counts",
]
COMBINE_POINTERS = ["x", "topk_weights", "home_topk_weights", "out", "out_topk_weights"]


def routing(**kwargs) -> bytes:
    return arg_struct("EpcRouting", ROUTING_POINTERS, **kwargs)


def handle_create(group=NULL_OBJECT, config=None, route=None, null_out=False) -> bytes:
    config = config if config is not None else arg_struct("EpcHandleConfig", [])
    route = route if route is not None else routing(null=True)
    return u8(5) + group + config + route + u8(null_out)


def handle_update(handle=NULL_OBJECT, route=None) -> bytes:
    return u8(6) + handle + (route if route is not None else routing())


def handle_query(handle=NULL_OBJECT, size=b"\x00", version=None, null_info=False) -> bytes:
    out = u8(7) + handle + size + u8(version is not None)
    if version is not None:
        out += pick(CAPI_VERSIONS, version, "I")
    return out + u8(null_info)


def dispatch(handle=NULL_OBJECT, **kwargs) -> bytes:
    return u8(8) + handle + arg_struct("EpcDispatchArgs", DISPATCH_POINTERS, **kwargs)


def combine(handle=NULL_OBJECT, **kwargs) -> bytes:
    return u8(9) + handle + arg_struct("EpcCombineArgs", COMBINE_POINTERS, **kwargs)


def complete(handle=NULL_OBJECT, flags=None) -> bytes:
    out = u8(10) + handle + u8(flags is not None)
    return out + (struct.pack("<I", flags) if flags is not None else b"")


H = 7168
TOPK = tensor_bytes(INT32, (128, 8))
X = tensor_bytes(BF16, (128, H))
OUT_X = tensor_bytes(BF16, (4, 8 * 128, H))
WEIGHTS = tensor_bytes(FP32, (128, 8))
SHORT_CONFIG = offset_of("EpcGroupConfig", "max_token_bytes")  # a caller before 2.0's fields

CAPI_SEEDS = {
    "plan-ll-default": plan_query(config_bytes()),
    "plan-ht-4-ranks": plan_query(config_bytes(mode=HT, max_tokens_per_rank=4096), nranks=4),
    "plan-fp8-window": plan_query(config_bytes(max_token_bytes=fp8_bytes(H)), nranks=4),
    "plan-fp8-window-rounded": plan_query(config_bytes(max_token_bytes=2 * H - 1), nranks=4),
    "plan-16-bit-window-rounded": plan_query(config_bytes(max_token_bytes=2 * H + 1), nranks=4),
    "plan-bad-max-token-bytes": plan_query(config_bytes(max_token_bytes=fp8_bytes(H) - 1), nranks=4),
    "plan-bad-fp8-window-hidden-2880": plan_query(config_bytes(hidden=2880, max_token_bytes=fp8_bytes(2880))),
    "plan-recv-capacity-r-times-t": plan_query(config_bytes(recv_capacity=8 * 128)),
    "plan-recv-capacity-fewer": plan_query(config_bytes(recv_capacity=8 * 128 - 1)),
    "plan-recv-capacity-more": plan_query(config_bytes(recv_capacity=8 * 128 + 1)),
    "plan-ht-recv-capacity": plan_query(config_bytes(mode=HT, recv_capacity=4 * 4096), nranks=4),
    "plan-overflow-drop": plan_query(config_bytes(overflow=1)),
    "plan-overflow-bad": plan_query(config_bytes(overflow=2)),
    "plan-pending-steps-1": plan_query(config_bytes(max_pending_steps=1)),
    "plan-pending-steps-2": plan_query(config_bytes(max_pending_steps=2)),
    "plan-flags-combine-per-entry": plan_query(config_bytes(flags=1)),
    "plan-ht-flags-combine-per-entry": plan_query(config_bytes(mode=HT, flags=1), nranks=4),
    "plan-flags-unknown": plan_query(config_bytes(flags=2)),
    "plan-2-nodes": plan_query(config_bytes(), nranks=16, lsa=8, nodes=2),
    "plan-older-config": plan_query(config_bytes(size=SHORT_CONFIG), config_size=older(CONFIG_SIZE, SHORT_CONFIG)),
    "plan-newer-config-zero-tail": plan_query(config_bytes(size=CONFIG_SIZE + 24), config_size=newer(24)),
    "plan-newer-config-nonzero-tail": plan_query(
        config_bytes(size=CONFIG_SIZE + 8, tail=b"\x01" + bytes(7)), config_size=newer(8)
    ),
    "plan-config-size-4": plan_query(config_bytes(size=4), config_size=struct_size(3, u8(4))),
    "plan-config-version-0": plan_query(config_bytes(), config_version=0),
    "plan-config-version-1.3": plan_query(config_bytes(), config_version=10300),
    "plan-config-version-2.1": plan_query(config_bytes(), config_version=20100),
    "plan-config-version-3.0": plan_query(config_bytes(), config_version=30000),
    "plan-short-plan-40-bytes": plan_query(config_bytes(), plan_size=struct_size(4, u8(8))),
    "plan-short-plan-before-recv-capacity": plan_query(
        config_bytes(), plan_size=boundary(PLAN_SIZE, offset_of("EpcPlan", "recv_capacity"))
    ),
    "plan-long-plan": plan_query(config_bytes(), plan_size=newer(63)),
    "plan-plan-size-0": plan_query(config_bytes(), plan_size=struct_size(3, u8(0))),
    "plan-plan-version-bad": plan_query(config_bytes(), plan_version=0xFFFFFFFF),
    "plan-null-config": plan_query(config_bytes(), null_config=True),
    "plan-null-plan": plan_query(config_bytes(), null_plan=True),
    "plan-bad-hidden-then-last-error": plan_query(config_bytes(hidden=12)) + last_error(0),
    "plan-bad-topology-then-short-buffer": (
        plan_query(config_bytes(), nranks=4, lsa=3, nodes=1) + last_error(1, u8(5))
    ),
    "plan-ok-then-last-error": plan_query(config_bytes()) + last_error(2, struct.pack("<H", 100)),
    "api-full": get_api(),
    "api-three-entries": get_api(size=older(API_SIZE, offset_of("EpcApi", "unique_id_create"))),
    "api-without-complete": get_api(size=older(API_SIZE, offset_of("EpcApi", "complete"))),
    "api-newer-caller": get_api(size=newer(40)),
    "api-size-4": get_api(size=struct_size(3, u8(4))),
    "api-half-pointer": get_api(size=struct_size(4, u8(1))),
    "api-major-1": get_api(major=1),
    "api-major-3": get_api(major=3),
    "api-null": get_api(null=True),
    "api-bad-major-then-last-error": get_api(major=0) + last_error(0),
    "last-error-null-with-size": plan_query(config_bytes(hidden=0)) + last_error(1, u8(3), null_buf=True),
    "last-error-zero-size-no-length": last_error(3, null_length=True),
    "version-all": get_version(0),
    "version-none": get_version(7),
    "status-strings": b"".join(status_string(s) for s in (0, 7, 10, 11, 12, 13, -1, 1 << 30)),
    "handle-create-null-group": handle_create(route=routing(tensors={"topk_idx": TOPK})),
    "handle-create-dead-group": handle_create(group=ZEROED),
    "handle-create-group-magic-only": handle_create(group=GROUP_MAGIC, null_out=True),
    "handle-create-handle-as-group": handle_create(
        group=HANDLE_MAGIC,
        config=arg_struct("EpcHandleConfig", [], image=struct_image("EpcHandleConfig", layout=4, sizing=1)),
    ),
    "handle-create-newer-config-nonzero-tail": handle_create(
        group=ZEROED,
        config=arg_struct(
            "EpcHandleConfig",
            [],
            size=newer(8),
            image=struct_image("EpcHandleConfig", STRUCTS["EpcHandleConfig"]["size"] + 8, b"\x01"),
        ),
    ),
    "handle-update-null": handle_update(route=routing(tensors={"topk_idx": TOPK})),
    "handle-update-input-bytes": handle_update(handle=object_bytes(b"EPCHandl"), route=routing(null=True)),
    "handle-update-routing-num-tokens": handle_update(
        handle=HANDLE_MAGIC, route=routing(tensors={"topk_idx": TOPK, "num_tokens": tensor_bytes(INT32, (1,))})
    ),
    "handle-query-null": handle_query(),
    "handle-query-dead-short-info": handle_query(
        handle=ZEROED, size=older(STRUCTS["EpcHandleInfo"]["size"], offset_of("EpcHandleInfo", "capacity"))
    ),
    "handle-query-group-as-handle-null-info": handle_query(handle=GROUP_MAGIC, null_info=True),
    "dispatch-null-handle": dispatch(tensors={"x": X, "out_x": OUT_X, "topk_weights": WEIGHTS}),
    "dispatch-dead-handle-fp8": dispatch(
        handle=ZEROED,
        image=struct_image("EpcDispatchArgs", quant=1, scale_block=128, flags=2),
        tensors={"x": X, "out_x": tensor_bytes(FP8, (4, 8 * 128, H)), "out_scales": tensor_bytes(FP32, (4, 1024, 56))},
    ),
    "dispatch-version-1.3-null-args": dispatch(handle=HANDLE_MAGIC, version=10300, null=True),
    "combine-null-handle": combine(tensors={"x": OUT_X, "out": tensor_bytes(FP32, (128, H))}),
    "combine-dead-handle-home-weights": combine(
        handle=ZEROED,
        image=struct_image("EpcCombineArgs", weighting=3),
        tensors={"x": OUT_X, "out": X, "home_topk_weights": WEIGHTS},
    ),
    "complete-null": complete(),
    "complete-dead-flags": complete(handle=HANDLE_MAGIC, flags=1),
    "calls-on-a-dead-handle-then-last-error": (
        handle_create(group=ZEROED) + dispatch(handle=ZEROED) + complete(handle=ZEROED) + last_error(0)
    ),
}


# ---- tensor check --------------------------------------------------------------------------


def tensor(
    rule_shape,
    dtypes=(INT64,),
    alignment=16,
    dtype_index=0,
    shape=None,
    strides=None,
    row_major=False,
    address=0x7F0000000010,
    ndim=None,
    dtype=None,
) -> bytes:
    """A rule (extents, ANY for the one free extent, accepted dtypes, alignment) and a
    descriptor: the rule's extents with `shape` filling the free one (or all four extents
    when shape is a 4-tuple), explicit or row-major strides, a data address."""
    dims = len(rule_shape)
    free = rule_shape.index(ANY) if ANY in rule_shape else 7
    out = u8(dims - 1) + u8(free)
    for i, extent in enumerate(rule_shape):
        if i != free:
            out += pick(TENSOR_EXTENTS, extent, "q")
    out += u8(len(dtypes) - 1) + b"".join(u8(d - 1) for d in dtypes)
    out += pick(TENSOR_ALIGNMENTS, alignment, "I")
    all_four = isinstance(shape, tuple)
    how = (dtype is not None) * 1 | (ndim is not None) * 2 | all_four * 4 | (strides is not None) * 8 | row_major * 16
    out += u8(how)
    out += pick(TENSOR_DTYPES, dtype, "I") if dtype is not None else u8(dtype_index)
    if ndim is not None:
        out += pick(TENSOR_RANKS, ndim, "i")
    if all_four:
        out += b"".join(pick(TENSOR_EXTENTS, v, "q") for v in shape)
    elif free != 7:
        out += pick(TENSOR_EXTENTS, shape if shape is not None else 16, "q")
    if strides is not None:
        out += b"".join(pick(TENSOR_EXTENTS, v, "q") for v in strides)
    return out + pick(TENSOR_ADDRESSES, address, "Q")


TENSOR_SEEDS = {
    "topk-idx-int64": tensor([ANY, 8], dtypes=(INT64, INT32), alignment=4, shape=128),
    "topk-idx-int32-row-major": tensor(
        [ANY, 8], dtypes=(INT64, INT32), alignment=4, dtype_index=1, shape=16, row_major=True
    ),
    "topk-idx-empty-null-data": tensor([ANY, 8], dtypes=(INT64, INT32), alignment=4, shape=0, address=0),
    "topk-idx-huge-batch": tensor([ANY, 8], dtypes=(INT64, INT32), alignment=4, shape=1 << 62),
    "topk-idx-huge-batch-row-major": tensor(
        [ANY, 8], dtypes=(INT64, INT32), alignment=4, shape=1 << 62, row_major=True
    ),
    "topk-idx-max-batch": tensor([ANY, 8], dtypes=(INT64, INT32), alignment=4, shape=(1 << 63) - 1),
    "x-bf16": tensor([128, 7168], dtypes=(BF16,)),
    "x-wrong-dtype": tensor([128, 7168], dtypes=(BF16,), dtype=FP32),
    "x-misaligned": tensor([128, 7168], dtypes=(BF16,), address=0x7F0000000004),
    "x-null-data": tensor([128, 7168], dtypes=(BF16,), address=0),
    "x-strided": tensor([128, 7168], dtypes=(BF16,), strides=(8192, 1, 0, 0)),
    "x-wrong-ndim": tensor([128, 7168], dtypes=(BF16,), ndim=3),
    "x-negative-ndim": tensor([128, 7168], dtypes=(BF16,), ndim=-1),
    "x-dims-past-ndim": tensor([128, 7168], dtypes=(BF16,), shape=(128, 7168, 1, 0)),
    "out-x-3d": tensor([4, 256, 7168], dtypes=(BF16, FP16), row_major=True),
    "out-x-3d-huge-empty": tensor([0, 1 << 62, 1 << 62], dtypes=(BF16,), row_major=True),
    "out-scales-fp32": tensor([4, 256, 56], dtypes=(FP32,), alignment=4),
    "counts-1d": tensor([64], dtypes=(INT32,), alignment=4),
    "num-recv-4d-unknown-dtype": tensor([1, 1, 1, 1], dtypes=(INT32,), dtype=0xFFFFFFFF),
}

TARGETS = {"planner": PLANNER_SEEDS, "c-api": CAPI_SEEDS, "tensor-check": TENSOR_SEEDS}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for target, seeds in TARGETS.items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            path = folder / name
            if args.check:
                if not path.is_file() or path.read_bytes() != data:
                    stale.append(str(path))
            else:
                path.write_bytes(data)
        for path in folder.iterdir():
            if path.name not in seeds and not path.name.startswith("found-"):
                stale.append(f"{path} (not written by this script)")
    if stale:
        print("seeds differ from make_seeds.py:\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
