# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for GPU tensor producers, so that conversions are tested without a GPU.

Nothing here dereferences the (fake) device pointers; the bindings never do either.
"""

import ctypes

from epcomm import _dlpack

FAKE_DEVICE_POINTER = 0x7F00_0000_0000

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


class CudaArrayInterface:
    """An object exposing __cuda_array_interface__ like CuPy or numba do."""

    def __init__(
        self,
        shape,
        typestr="<f2",
        strides=None,
        data=FAKE_DEVICE_POINTER,
        readonly=False,
        version=3,
        stream=None,
        mask=None,
    ):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (data, readonly),
            "strides": strides,
            "version": version,
            "descr": [("", typestr)],
        }
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream
        if mask is not None:
            self.__cuda_array_interface__["mask"] = mask


class DLPackProducer:
    """A DLPack producer whose tensor lives in ctypes memory; counts deleter calls.

    dtype is (code, bits, lanes); strides None exports NULL strides (compact row-major).
    """

    def __init__(
        self,
        shape,
        dtype=(2, 32, 1),
        strides=None,
        device=(_dlpack.KDL_CUDA, 0),
        data=FAKE_DEVICE_POINTER,
        byte_offset=0,
        versioned=False,
        version=(1, 1),
        flags=0,
        report_device=True,
    ):
        self.deleted = 0
        self.exports = 0
        self.streams = []
        self.versioned = versioned
        self.report_device = report_device
        self.device = device
        ndim = len(shape)
        self._shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(ndim, 1))(*strides)
        self._deleter = _dlpack.Deleter(self._delete)
        if versioned:
            self._managed = _dlpack.DLManagedTensorVersioned()
            self._managed.version.major, self._managed.version.minor = version
            self._managed.flags = flags
        else:
            self._managed = _dlpack.DLManagedTensor()
        tensor = self._managed.dl_tensor
        tensor.data = data
        tensor.device.device_type, tensor.device.device_id = device
        tensor.ndim = ndim
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = dtype
        tensor.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if self._strides is not None:
            tensor.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        tensor.byte_offset = byte_offset
        self._managed.deleter = self._deleter

    def _delete(self, address):
        assert address == ctypes.addressof(self._managed)
        self.deleted += 1

    def __dlpack__(self, stream=None):
        self.exports += 1
        self.streams.append(stream)
        name = _dlpack.NAME_VERSIONED if self.versioned else _dlpack.NAME_LEGACY
        return _capsule_new(ctypes.addressof(self._managed), name, None)

    def __getattr__(self, name):
        if name == "__dlpack_device__" and self.report_device:
            return lambda: self.device
        raise AttributeError(name)


class DLPackOnly:
    """Forwards only __dlpack__ (no __dlpack_device__), so the device is known only after
    the capsule is parsed."""

    def __init__(self, producer):
        self._producer = producer

    def __dlpack__(self, stream=None):
        return self._producer.__dlpack__()


DEAD_HANDLE = "handle is not a live EpcHandle"


class DeadObject:
    """Zeroed memory standing in for a C object, kept alive as long as this is: the library
    reads its first word, finds no live magic and refuses it."""

    def __init__(self, c_type):
        self.memory = ctypes.create_string_buffer(64)
        self.pointer = ctypes.cast(self.memory, ctypes.POINTER(c_type))


def expect(caught, function, words, status=None):
    """The EpcError in `caught` came from C function `function` with `words` in its
    message and `status` (default INVALID_ARGUMENT)."""
    import epcomm

    assert caught.value.status == (epcomm.Status.INVALID_ARGUMENT if status is None else status)
    assert caught.value.function == function
    assert words in caught.value.message, caught.value.message


def refused_then_closed(handle, calls):
    """Every (C function, call) in `calls` on a handle over dead memory raises the library's
    refusal; so does close(), after which the handle is closed and unregistered anyway."""
    import pytest

    import epcomm

    for function, make_call in calls:
        with pytest.raises(epcomm.EpcError) as caught:
            make_call()
        expect(caught, function, DEAD_HANDLE)
    with pytest.raises(epcomm.EpcError) as caught:
        handle.close()
    expect(caught, "epc_handle_destroy", DEAD_HANDLE)
    assert handle.closed and not handle.group._handles  # noqa: SLF001


def fake_torch():
    """Stand-ins for the `torch` and `torch.distributed` modules, with just what importing
    epcomm.torch and constructing a Buffer on one NCCL rank read: dtypes as names, no
    tensors, no GPU. Returns {module name: module} for sys.modules."""
    import contextlib
    import types

    torch = types.ModuleType("torch")
    for name in ("bfloat16", "float16", "float32", "int32", "int64", "uint8"):
        setattr(torch, name, name)
    torch.Tensor = type("Tensor", (), {})
    torch._C = types.SimpleNamespace()  # noqa: SLF001
    torch.device = lambda kind, index=None: types.SimpleNamespace(type=kind, index=index)
    torch.cuda = types.SimpleNamespace(current_device=lambda: 0, device=lambda device: contextlib.nullcontext())
    torch.library = types.SimpleNamespace(
        custom_op=lambda name, function, mutates_args: types.SimpleNamespace(register_fake=lambda fake: None)
    )
    torch.autograd = types.SimpleNamespace(Function=object)
    dist = types.ModuleType("torch.distributed")
    dist.is_available = dist.is_initialized = lambda: True
    dist.group = types.SimpleNamespace(WORLD="world")
    dist.get_backend = lambda group: "nccl"
    dist.get_rank = lambda group: 0
    dist.get_world_size = lambda group: 1
    torch.distributed = dist
    return {"torch": torch, "torch.distributed": dist}
