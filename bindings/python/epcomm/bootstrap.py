# SPDX-License-Identifier: Apache-2.0
"""Bootstrap: unique ids and NCCL communicators, for programs without an NCCL binding.

One process creates a UniqueId and shares its bytes (hex() is convenient for environment
variables and command lines); every rank then calls Comm.init with it, from one thread per
rank (with timeout_ms, a rank that never joins makes the others raise TIMEOUT instead of
waiting for good). A communicator that already exists elsewhere (an ncclComm_t from
another library) is wrapped with Comm.adopt and stays that library's to destroy.
"""

import ctypes
import threading
import warnings
import weakref
from typing import Any, List, Optional

from . import _ffi
from ._handles import address
from ._library import call
from .config import unsigned
from .errors import EpcError, InvalidUsageError, Status


class UniqueId:
    """The EPC_UNIQUE_ID_BYTES bytes that let `nranks` processes find each other.

    Immutable, hashable, picklable. `bytes(uid)` / `uid.hex()` serialize it;
    `UniqueId.from_bytes` / `UniqueId.from_hex` read it back on another process.
    """

    SIZE = _ffi.EPC_UNIQUE_ID_BYTES
    __slots__ = ("_bytes",)

    def __init__(self, data: bytes):
        data = bytes(data)
        if len(data) != self.SIZE:
            raise ValueError(f"a UniqueId is {self.SIZE} bytes, got {len(data)}")
        self._bytes = data

    @classmethod
    def create(cls) -> "UniqueId":
        """A new id (epc_unique_id_create). Local, blocking, thread-safe. Create it on one
        process only and share it with every rank."""
        out = _ffi.EpcUniqueId()
        call("epc_unique_id_create", ctypes.byref(out))
        return cls(bytes(out.bytes))

    @classmethod
    def from_bytes(cls, data: bytes) -> "UniqueId":
        return cls(data)

    @classmethod
    def from_hex(cls, text: str) -> "UniqueId":
        try:
            data = bytes.fromhex(text.strip())
        except ValueError as error:
            raise ValueError(f"a UniqueId in hex is {2 * cls.SIZE} hex digits: {error}") from None
        return cls(data)

    def hex(self) -> str:
        return self._bytes.hex()

    def __bytes__(self) -> bytes:
        return self._bytes

    def to_struct(self) -> "_ffi.EpcUniqueId":
        out = _ffi.EpcUniqueId()
        ctypes.memmove(out.bytes, self._bytes, self.SIZE)
        return out

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UniqueId) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __reduce__(self) -> Any:
        return (UniqueId, (self._bytes,))

    def __repr__(self) -> str:
        return f"UniqueId({self._bytes[:8].hex()}...)"


class Comm:
    """An NCCL communicator (ncclComm_t) that groups are built on.

    Comm.init creates one that this object owns: close() destroys it, which is collective
    (every rank closes its Comm) and blocking, and is refused while a Group built on it is
    still open (the header requires groups to be destroyed first), also a Group collected
    without close() and so leaked, which the library still holds. Comm.adopt wraps an
    existing ncclComm_t without owning it: close() then only forgets it.

    Garbage collection never destroys a communicator, since that is collective work a
    finalizer must not start on its own: an owned Comm collected while open is leaked,
    with a ResourceWarning. Use close() or a `with` block. Not thread-safe: use one Comm
    per rank thread, as NCCL expects.
    """

    def __init__(self, handle: int, owned: bool):
        self._handle: Optional[int] = handle
        self._owned = owned
        self._groups: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._leaked_groups: List[Any] = []  # EpcGroup* of groups collected while open
        self._lock = threading.Lock()

    @classmethod
    def init(cls, unique_id: UniqueId, nranks: int, rank: int, device: int = -1, *, timeout_ms: int = 0) -> "Comm":
        """Create rank `rank` of an `nranks`-rank communicator (epc_comm_init).

        Makes CUDA device `device` current on the calling thread (a negative value keeps
        the current device). Collective over all ranks, blocking: call it from one thread
        per rank, with the same `unique_id` everywhere.

        timeout_ms=0 (the default) waits without a bound for every rank to join. Otherwise
        (epc_comm_init_config, ABI 2.3) a rank that has not joined after timeout_ms (it
        died, or was given another id) makes it raise EpcError(TIMEOUT) naming this rank,
        and what NCCL made of the communicator is aborted (there is nothing to close). The
        communicator is then in NCCL's non-blocking mode, so that Group.create bounds its
        NCCL steps by the group's timeout_ms too (NCCL calls of your own on it return
        ncclInProgress: see NCCL's docs), and close() waits at most timeout_ms for NCCL to
        finalize it, then aborts it. A library older than 2.3 lacks the function:
        EpcError(UNSUPPORTED)."""
        if not isinstance(unique_id, UniqueId):
            raise TypeError(f"unique_id must be a UniqueId, not {type(unique_id).__name__}")
        id_struct = unique_id.to_struct()
        out = ctypes.c_void_p()
        args = (ctypes.byref(id_struct), int(nranks), int(rank), int(device))
        if unsigned("timeout_ms", timeout_ms):
            config = _ffi.EpcCommConfig(
                struct_size=ctypes.sizeof(_ffi.EpcCommConfig), abi_version=_ffi.EPC_ABI_VERSION, timeout_ms=timeout_ms
            )
            call("epc_comm_init_config", *args, ctypes.byref(config), ctypes.byref(out))
        else:
            call("epc_comm_init", *args, ctypes.byref(out))
        return cls(out.value or 0, owned=True)

    @classmethod
    def adopt(cls, comm: Any) -> "Comm":
        """Wrap an existing ncclComm_t (an int address or a ctypes pointer) without taking
        ownership: it must outlive every group built on it, and its creator destroys it."""
        handle = address(comm, "comm")
        if handle is None:
            raise ValueError("Comm.adopt needs a non-NULL ncclComm_t")
        return cls(handle, owned=False)

    @property
    def handle(self) -> int:
        """The ncclComm_t as an int address. Raises EpcError if closed."""
        if self._handle is None:
            raise EpcError(Status.INVALID_ARGUMENT, "the communicator is closed")
        return self._handle

    @property
    def owned(self) -> bool:
        return self._owned

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _register(self, group: Any) -> None:
        self._groups.add(group)

    def _unregister(self, group: Any) -> None:
        self._groups.discard(group)

    def _leak(self, group_handle: Any) -> None:
        """A Group's finalizer: its C group stays alive, built on this communicator. Takes no
        lock (a finalizer may run inside close())."""
        self._leaked_groups.append(group_handle)

    def close(self) -> None:
        """Destroy an owned communicator (epc_comm_destroy: collective, blocking, at most
        the timeout_ms it was created with, after which it is aborted); forget an adopted
        one. Idempotent. Raises InvalidUsageError if groups built on it are still open,
        including groups collected without close(): the library still holds those, so the
        communicator can no longer be closed."""
        with self._lock:
            if self._handle is None:
                return
            open_groups = [g for g in self._groups if not g.closed]
            leaked = len(self._leaked_groups)
            if open_groups or leaked:
                raise InvalidUsageError(
                    Status.INVALID_USAGE,
                    f"{len(open_groups) + leaked} group(s) built on this communicator are still open"
                    + (f" ({leaked} collected without close() and leaked)" if leaked else "")
                    + ": close them before the communicator",
                )
            handle, self._handle = self._handle, None
        if self._owned:
            call("epc_comm_destroy", ctypes.c_void_p(handle))

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._owned and self._handle is not None:
                warnings.warn(
                    f"epcomm.Comm {self._handle:#x} was garbage-collected while open and is "
                    "leaked: destroying it is collective, so call close() on every rank",
                    ResourceWarning,
                    stacklevel=2,
                )
        except Exception:  # noqa: BLE001 (a finalizer must never raise)
            pass

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"{self._handle:#x}"
        return f"Comm({state}, {'owned' if self._owned else 'adopted'})"
