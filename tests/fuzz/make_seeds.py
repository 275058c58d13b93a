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
import struct
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"

ABI_VERSION = 10200  # EPC_ABI_VERSION of ABI 1.2.0; older and newer ones are seeds too
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
    dtype=0,
    sms=0,
    timeout=0,
    lsa=8,
    nodes=1,
    flags=None,
    reserved=None,
    alloc=False,
    free=False,
    raw_topology=None,
) -> bytes:
    out = b"".join(pick(PLANNER_U32, v, "I") for v in (mode, experts, hidden, tokens, topk, dtype, sms, timeout))
    extras = (
        (flags is not None) * 1 | (reserved is not None) * 2 | alloc * 4 | free * 8 | (raw_topology is not None) * 16
    )
    out += u8(extras)
    if flags is not None:
        out += struct.pack("<I", flags)
    if reserved is not None:
        out += struct.pack("<I", reserved)
    if raw_topology is not None:
        out += b"".join(pick(PLANNER_I32, v, "i") for v in raw_topology)
    else:
        out += u8(lsa - 1) + u8(nodes - 1)
    return out


PLANNER_SEEDS = {
    "ll-default-8-ranks": planner(),
    "ll-4-ranks-explicit": planner(tokens=128, topk=8, dtype=BF16, sms=132, timeout=10000, lsa=4),
    "ll-fp16-hidden-2880": planner(experts=64, hidden=2880, dtype=FP16, lsa=4),
    "ll-fp8-hidden-7168": planner(dtype=FP8, lsa=4),
    "ll-fp8-hidden-128": planner(experts=64, hidden=128, dtype=FP8, lsa=2),
    "ll-fp8-hidden-1152": planner(experts=64, hidden=1152, dtype=FP8, lsa=4),
    "ll-1024-tokens-topk-32": planner(tokens=1024, topk=32, lsa=4),
    "ll-2-nodes": planner(lsa=8, nodes=2),
    "ht-default-4-ranks": planner(mode=HT, lsa=4),
    "ht-fp8-8192-tokens": planner(mode=HT, tokens=8192, dtype=FP8, sms=24, lsa=4),
    "ht-65536-tokens-hidden-max": planner(
        mode=HT, experts=65536, hidden=1 << 20, tokens=65536, topk=32, lsa=16, nodes=16
    ),
    "ht-odd-hidden-topk-1": planner(mode=HT, experts=3, hidden=8, topk=1, lsa=3),
    "bad-experts-not-divisible": planner(experts=256, lsa=3),
    "bad-hidden-0": planner(hidden=0),
    "bad-hidden-not-multiple-of-8": planner(hidden=129),
    "bad-ll-tokens-1025": planner(tokens=1025),
    "bad-dtype-fp32": planner(dtype=FP32),
    "bad-mode-3": planner(mode=3),
    "bad-flags": planner(flags=1),
    "bad-reserved": planner(reserved=7),
    "bad-alloc-without-free": planner(alloc=True),
    "alloc-and-free": planner(alloc=True, free=True),
    "bad-topology-lsa-3-of-4": planner(raw_topology=(4, 3, 1)),
    "bad-topology-negative": planner(raw_topology=(-1, -1, -1)),
    "bad-topology-too-many-ranks": planner(experts=65536, raw_topology=(65537, 65537, 1)),
    "topology-65536-ranks": planner(experts=65536, hidden=8, raw_topology=(65536, 256, 256)),
}


# ---- C API ---------------------------------------------------------------------------------

CONFIG_SIZE = 72  # sizeof(EpcGroupConfig)
PLAN_SIZE = 16 + 8 + 8 + 4 * 10 + 16 * 56  # sizeof(EpcPlan)
API_SIZE = 8 + 21 * 8  # sizeof(EpcApi) in ABI 1.2


def config_bytes(
    size=CONFIG_SIZE,
    version=ABI_VERSION,
    mode=0,
    experts=256,
    hidden=7168,
    tokens=0,
    topk=0,
    dtype=0,
    sms=0,
    timeout=0,
    flags=0,
    reserved=0,
    tail=b"",
) -> bytes:
    fields = (
        struct.pack("<12I", size, version, mode, experts, hidden, tokens, topk, dtype, sms, timeout, flags, reserved)
        + bytes(24)
        + tail
    )
    block = max(8, size)
    return (fields + bytes(block))[:block]


def struct_size(how: int, extra: bytes = b"") -> bytes:
    """struct_size_for(): how % 6 selects known / older / newer / tiny / field boundary / raw."""
    return u8(how) + extra


def plan_query(
    config: bytes,
    nranks=8,
    lsa=None,
    nodes=None,
    config_size=b"\x00",
    plan_size=b"\x00",
    keep_header=True,
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
    assert keep_header
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


CAPI_SEEDS = {
    "plan-ll-default": plan_query(config_bytes()),
    "plan-ht-4-ranks": plan_query(config_bytes(mode=HT, tokens=4096), nranks=4),
    "plan-fp8": plan_query(config_bytes(dtype=FP8), nranks=4),
    "plan-2-nodes": plan_query(config_bytes(), nranks=16, lsa=8, nodes=2),
    "plan-older-config-48-bytes": plan_query(config_bytes(size=48), config_size=struct_size(1, u8(24))),
    "plan-newer-config-zero-tail": plan_query(config_bytes(size=96), config_size=struct_size(2, u8(24))),
    "plan-newer-config-nonzero-tail": plan_query(
        config_bytes(size=80, tail=b"\x01" + bytes(7)), config_size=struct_size(2, u8(8))
    ),
    "plan-config-size-4": plan_query(config_bytes(size=4), config_size=struct_size(3, u8(4))),
    "plan-config-version-0": plan_query(config_bytes(), config_version=0),
    "plan-config-version-2.0": plan_query(config_bytes(), config_version=20000),
    "plan-config-version-1.0": plan_query(config_bytes(), config_version=10000),
    "plan-short-plan-40-bytes": plan_query(config_bytes(), plan_size=struct_size(4, u8(8))),
    "plan-short-plan-768-bytes": plan_query(config_bytes(), plan_size=struct_size(1, u8(200))),
    "plan-long-plan": plan_query(config_bytes(), plan_size=struct_size(2, u8(63))),
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
    "api-abi-1.0-size": get_api(size=struct_size(1, u8(API_SIZE - (8 + 17 * 8)))),
    "api-abi-1.1-size": get_api(size=struct_size(1, u8(API_SIZE - (8 + 18 * 8)))),
    "api-newer-caller": get_api(size=struct_size(2, u8(40))),
    "api-size-4": get_api(size=struct_size(3, u8(4))),
    "api-half-pointer": get_api(size=struct_size(4, u8(1))),
    "api-major-2": get_api(major=2),
    "api-null": get_api(null=True),
    "api-bad-major-then-last-error": get_api(major=0) + last_error(0),
    "last-error-null-with-size": plan_query(config_bytes(hidden=0)) + last_error(1, u8(3), null_buf=True),
    "last-error-zero-size-no-length": last_error(3, null_length=True),
    "version-all": get_version(0),
    "version-none": get_version(7),
    "status-strings": b"".join(status_string(s) for s in (0, 7, 10, 11, -1, 1 << 30)),
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
