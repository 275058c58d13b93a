# SPDX-License-Identifier: Apache-2.0
"""Reading DLPack capsules with ctypes: no compiled extension needed.

A producer's `__dlpack__()` returns a PyCapsule named "dltensor" (or "dltensor_versioned",
DLPack >= 1.0) that points to a DLManagedTensor. Consuming it means: take the pointer,
rename the capsule to "used_dltensor" (so the capsule's destructor no longer frees the
tensor: the ownership moved to us) and call the tensor's `deleter` once we are done with
the memory. ManagedTensor does exactly that and nothing else; tensor.py decides what is
acceptable.
"""

import ctypes
import threading
from typing import Any, Optional, Tuple

# DLDeviceType values (dlpack.h).
DEVICE_NAMES = {
    1: "CPU",
    2: "CUDA",
    3: "CUDAHost",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCM",
    11: "ROCMHost",
    12: "ExtDev",
    13: "CUDAManaged",
    14: "OneAPI",
    15: "WebGPU",
    16: "Hexagon",
    17: "MAIA",
    18: "Trn",
}
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3

# DLDataTypeCode values (dlpack.h).
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_FLOAT8_E4M3FN = 0, 1, 2, 4, 10
KDL_FLOAT8_E5M2, KDL_FLOAT8_E8M0FNU = 12, 14

# DLManagedTensorVersioned.flags bits.
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1

SUPPORTED_MAJOR = 1  # DLPACK_MAJOR_VERSION this reader understands for versioned capsules


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# The deleter takes the managed tensor's own address; declared with void* so that one
# prototype serves both struct flavours.
Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# The capsule API, through private prototypes (setting argtypes on ctypes.pythonapi's shared
# function objects would change them for every other user in the process).
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

# PyCapsule_SetName stores the pointer, not a copy: these bytes objects live as long as the
# module, so the names they hold stay valid.
NAME_LEGACY = b"dltensor"
NAME_VERSIONED = b"dltensor_versioned"
NAME_USED_LEGACY = b"used_dltensor"
NAME_USED_VERSIONED = b"used_dltensor_versioned"


class ManagedTensor:
    """A DLPack tensor taken over from a capsule: its fields, and the duty to call its
    deleter exactly once (release(), or garbage collection). Thread-safe release."""

    def __init__(self, address: int, versioned: bool):
        self.address = address
        self.versioned = versioned
        self._lock = threading.Lock()
        self._released = False
        struct_type = DLManagedTensorVersioned if versioned else DLManagedTensor
        managed = struct_type.from_address(address)
        self._deleter = managed.deleter
        self.version: Optional[Tuple[int, int]] = None
        self.flags = 0
        if versioned:
            self.version = (int(managed.version.major), int(managed.version.minor))
            if self.version[0] != SUPPORTED_MAJOR:
                # Past the version field the layout may differ: read nothing more.
                self.release()
                raise ValueError(
                    f"DLPack {self.version[0]}.{self.version[1]} capsule: this "
                    f"reader understands DLPack {SUPPORTED_MAJOR}.x only"
                )
            self.flags = int(managed.flags)
        tensor = managed.dl_tensor
        self.device_type = int(tensor.device.device_type)
        self.device_id = int(tensor.device.device_id)
        self.ndim = int(tensor.ndim)
        self.dtype_code = int(tensor.dtype.code)
        self.dtype_bits = int(tensor.dtype.bits)
        self.dtype_lanes = int(tensor.dtype.lanes)
        self.data = (tensor.data or 0) + int(tensor.byte_offset)
        self.shape = tuple(int(tensor.shape[i]) for i in range(self.ndim)) if self.ndim else ()
        # NULL strides: compact row-major (DLPack's rule).
        self.strides: Optional[Tuple[int, ...]] = (
            tuple(int(tensor.strides[i]) for i in range(self.ndim)) if tensor.strides else None
        )

    @property
    def device_name(self) -> str:
        return DEVICE_NAMES.get(self.device_type, f"device type {self.device_type}")

    @property
    def read_only(self) -> bool:
        return bool(self.flags & FLAG_READ_ONLY)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Call the producer's deleter (once). Local; never raises twice."""
        with self._lock:
            if self._released:
                return
            self._released = True
        if self._deleter:
            self._deleter(self.address)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 (a finalizer must never raise)
            pass


def consume_capsule(capsule: Any) -> ManagedTensor:
    """Take over the tensor of an unused DLPack capsule ("dltensor" or
    "dltensor_versioned"), renaming the capsule "used_..." so its producer's destructor
    leaves the tensor to us. Raises ValueError for anything else (a consumed capsule, a
    non-capsule, a DLPack major this reader does not know)."""
    if _capsule_is_valid(capsule, NAME_LEGACY):
        name, used, versioned = NAME_LEGACY, NAME_USED_LEGACY, False
    elif _capsule_is_valid(capsule, NAME_VERSIONED):
        name, used, versioned = NAME_VERSIONED, NAME_USED_VERSIONED, True
    elif _capsule_is_valid(capsule, NAME_USED_LEGACY) or _capsule_is_valid(capsule, NAME_USED_VERSIONED):
        raise ValueError("this DLPack capsule was already consumed; call __dlpack__() again")
    else:
        raise ValueError(f"expected a DLPack capsule named 'dltensor', got a {type(capsule).__name__}")
    address = _capsule_get_pointer(capsule, name)
    _capsule_set_name(capsule, used)
    return ManagedTensor(address, versioned)
