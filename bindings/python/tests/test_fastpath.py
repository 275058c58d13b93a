# SPDX-License-Identifier: Apache-2.0
"""The fast path without a GPU or torch: descriptors packed in place match the ctypes
layout, the int-address C calls reach the real library and raise its errors, and importing
the core package (every module but epcomm.torch) loads nothing outside the standard
library."""

import ctypes
import os
import subprocess
import sys

import pytest

import epcomm
from epcomm import _fastpath, _ffi


def test_a_descriptor_is_packed_as_the_ctypes_fields_read_it():
    descriptor = _fastpath.Descriptor()
    descriptor.fill(0x7F0012345600, int(epcomm.Dtype.BF16), (3, 5, 7, 11))
    s = descriptor.struct
    assert (s.data, s.dtype, s.ndim, list(s.shape), list(s.strides)) == (
        0x7F0012345600, int(epcomm.Dtype.BF16), 4, [3, 5, 7, 11], [0, 0, 0, 0]
    )  # fmt: skip
    descriptor.fill(0x1000, int(epcomm.Dtype.INT32), (9,))  # fewer dims: the rest zeroed
    assert (s.data, s.dtype, s.ndim, list(s.shape)) == (0x1000, int(epcomm.Dtype.INT32), 1, [9, 0, 0, 0])
    assert descriptor.address == ctypes.addressof(s)


def test_args_fields_point_at_their_own_descriptors():
    args = _fastpath.Args(_ffi.EpcDispatchArgs, ("x", "out_x"))
    assert args.struct.struct_size == ctypes.sizeof(_ffi.EpcDispatchArgs)
    assert args.struct.abi_version == _ffi.EPC_ABI_VERSION
    for name in ("x", "out_x"):
        pointed = ctypes.cast(getattr(args.struct, name), ctypes.c_void_p).value
        assert pointed == args.tensors[name].address
    assert not args.struct.topk_weights  # fields not named stay NULL


def test_an_optional_field_is_left_null_and_pointed_at_again():
    args = _fastpath.Args(_ffi.EpcDispatchArgs, ("x", "topk_weights"))
    args.present("topk_weights", False)
    assert not args.struct.topk_weights
    assert ctypes.cast(args.struct.x, ctypes.c_void_p).value == args.tensors["x"].address
    args.present("topk_weights", True)
    assert ctypes.cast(args.struct.topk_weights, ctypes.c_void_p).value == args.tensors["topk_weights"].address


def test_a_fast_call_raises_the_library_error():
    call = _fastpath.Function("epc_dispatch")
    with pytest.raises(epcomm.EpcError) as caught:
        call(0, 0, 0)  # NULL handle, NULL args
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT
    assert caught.value.function == "epc_dispatch" and caught.value.message


def test_the_core_package_imports_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import epcomm, epcomm.__main__, epcomm._fastpath; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(m for m in new if m not in sys.stdlib_module_names and m != 'epcomm'))"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(epcomm.__file__)))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_epcomm_torch_is_not_imported_by_the_package():
    code = "import sys, epcomm; print('torch' in sys.modules, 'epcomm.torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(epcomm.__file__)))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]
