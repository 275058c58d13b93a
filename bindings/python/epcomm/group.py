# SPDX-License-Identifier: Apache-2.0
"""Group: a communicator, its symmetric window and its NCCL device communicator."""

import ctypes
import dataclasses
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, List, Optional, Union

from . import _ffi
from ._handles import address, stream_address
from ._library import call
from .bootstrap import Comm
from .config import GroupConfig
from .enums import GroupFlags, Mode, Overflow, known_or_int
from .errors import EpcError, InvalidUsageError, Status

# Objects the C library may still reference after their Group object was collected without
# close(): the leaked group keeps pointers to the config's allocator callbacks.
_leaked: List[Any] = []


@dataclass(frozen=True)
class GroupInfo:
    """A group's topology, configuration after defaults and memory held (EpcGroupInfo)."""

    rank: int
    nranks: int
    lsa_rank: int  # rank in this rank's NVLink (LSA) team
    lsa_size: int
    node: int  # this rank's node: its LSA team, or its virtual node when
    # GroupConfig.virtual_node_size is set
    num_nodes: int  # nodes as epcomm uses them (ranks / node size)
    cuda_device: int
    mode: Union[Mode, int]
    num_experts: int
    local_experts: int  # num_experts / nranks
    hidden: int
    max_tokens_per_rank: int
    max_topk: int
    max_token_bytes: int  # after rounding: 2 * hidden, or hidden + hidden / 32 (fp8 only)
    recv_capacity: int
    overflow: Union[Overflow, int]
    max_pending_steps: int
    num_sms: int
    timeout_ms: int
    flags: Union[GroupFlags, int]
    virtual_node_size: int
    symmetric_bytes: int  # device memory in the registered window
    workspace_bytes: int  # other device memory held


def unexposed_struct_fields() -> List[str]:
    """EpcGroupInfo fields GroupInfo does not carry (besides the struct header): empty
    unless the header grew and this module was not updated."""
    exposed = {f.name for f in dataclasses.fields(GroupInfo)}
    return [
        name
        for name in (f[0] for f in _ffi.EpcGroupInfo._fields_)
        if name not in exposed and name not in ("struct_size", "abi_version") and not name.startswith("reserved")
    ]


def info_from_struct(struct: "_ffi.EpcGroupInfo") -> GroupInfo:
    values = {f.name: getattr(struct, f.name) for f in dataclasses.fields(GroupInfo)}
    values["mode"] = known_or_int(Mode, values["mode"])
    values["overflow"] = known_or_int(Overflow, values["overflow"])
    values["flags"] = GroupFlags(values["flags"])
    return GroupInfo(**values)


class Group:
    """An epcomm group (EpcGroup*): create it on every rank, close it on every rank.

    Lifetime: close() (or leaving a `with` block, also when it raises) destroys the group,
    which is collective: every rank must close its group. Garbage collection never does:
    a Group collected while open is leaked (its device memory stays allocated until the
    process ends, and its Comm refuses to close) and a ResourceWarning says so, because a
    finalizer that started collective work could hang or corrupt the other ranks, at a
    moment chosen by the garbage collector. So __del__ never raises and never calls the
    library.

    Thread-safety follows the header: info() and async_error() may be called from any
    thread; barrier() and close() must not run concurrently with other calls on the same
    group. barrier() and the calls of the group's Handles take one lock of the group, since
    the library keeps per-group step state they update; async_error() does not wait for it.
    Different groups may be used from different threads (one thread per rank is the usual
    layout).

    close() refuses while a Handle created on the group is open: close the handles first.
    """

    def __init__(self, handle: "ctypes._Pointer[Any]", comm: Optional[Comm], config: "_ffi.EpcGroupConfig"):
        self._handle: "Optional[ctypes._Pointer[Any]]" = handle
        self._comm = comm
        self._config: Optional[_ffi.EpcGroupConfig] = config  # keeps allocator callbacks alive
        self._lock = threading.Lock()  # close() taking the handle away; info()'s, async_error()'s call
        self._calls = threading.Lock()  # barrier and handle calls (see the class doc)
        self._handles: "weakref.WeakSet[Any]" = weakref.WeakSet()
        if comm is not None:
            comm._register(self)  # noqa: SLF001

    @classmethod
    def create(cls, comm: Union[Comm, int, None], config: GroupConfig) -> "Group":
        """Create a group on `comm` (epc_group_create): a Comm, or an ncclComm_t as an int
        address (which must outlive the group). Allocates and registers the symmetric
        window the plan describes and proves every NVLink peer reachable. Uses the CUDA
        device current on the calling thread, which must be the communicator's (Comm.init
        made it current). Collective over every rank of `comm`; blocking; not thread-safe
        with other calls on the same communicator."""
        comm_object = comm if isinstance(comm, Comm) else None
        comm_handle = comm_object.handle if comm_object is not None else address(comm, "comm")
        struct = config.to_struct() if isinstance(config, GroupConfig) else config
        if not isinstance(struct, _ffi.EpcGroupConfig):
            raise TypeError(f"config must be a GroupConfig, not {type(config).__name__}")
        out = ctypes.POINTER(_ffi.EpcGroup)()
        call("epc_group_create", ctypes.c_void_p(comm_handle), ctypes.byref(struct), ctypes.byref(out))
        return cls(out, comm_object, struct)

    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def handle(self) -> int:
        """The EpcGroup* as an int address (for passing to other C code)."""
        return ctypes.cast(self._live(), ctypes.c_void_p).value or 0

    def _live(self) -> "ctypes._Pointer[Any]":
        handle = self._handle
        if handle is None:
            raise EpcError(Status.INVALID_ARGUMENT, "the group is closed")
        return handle

    def info(self) -> GroupInfo:
        """Topology, configuration after defaults and bytes held (epc_group_query).
        Local, non-blocking, thread-safe: like async_error() it does not wait for the
        group's other calls, and close() waits for it (never destroying the group under
        it)."""
        out = _ffi.EpcGroupInfo()
        out.struct_size = ctypes.sizeof(out)
        out.abi_version = _ffi.EPC_ABI_VERSION
        with self._lock:
            call("epc_group_query", self._live(), ctypes.byref(out))
        return info_from_struct(out)

    def barrier(self, stream: Any = None) -> None:
        """Run the group's barrier on `stream` and wait for it (epc_group_barrier).

        `stream`: None (the legacy default stream), an int cudaStream_t, or a stream object
        (torch.cuda.Stream, CuPy, numba, or anything with __cuda_stream__). Collective over
        every rank of the group; blocking; not graph-capturable. A peer that does not arrive within
        the group's timeout raises EpcError(TIMEOUT) naming it, and the group stays failed.
        """
        stream = stream_address(stream)
        with self._calls:
            call("epc_group_barrier", self._live(), ctypes.c_void_p(stream))

    def async_error(self) -> None:
        """Raise the group's asynchronous error, if it has one (epc_group_async_error),
        without waiting for anything; return None on a healthy group.

        A kernel that gives up records its failure in the group, and every later call on
        the group or its handles raises it. This raises the same EpcError, same status and
        word for word the same message, without such a call: TIMEOUT when a kernel gave up
        waiting for a peer ("<phase>: rank R waited N ms for rank P, which did not arrive
        ..."), INVALID_ARGUMENT when the routing check found an expert id outside
        [-1, num_experts) ("routing check: rank R was given an expert id outside ...").
        It reads the group's error record, which kernels write in mapped host memory, with
        no stream or device synchronisation: a failure of work still queued shows once its
        kernel has recorded it, and None says nothing about work the GPU has not finished.

        Local; non-blocking; not stream-ordered; may be called during CUDA graph capture
        (it launches nothing). Thread-safe, also while another thread is inside barrier() or
        a handle's call, which it does not wait for (only for close())."""
        with self._lock:
            call("epc_group_async_error", self._live())

    def _register_handle(self, handle: Any) -> None:
        self._handles.add(handle)

    def _unregister_handle(self, handle: Any) -> None:
        self._handles.discard(handle)

    def close(self) -> None:
        """Destroy the group (epc_group_destroy): collective (every rank must close its
        group), blocking (waits for the group's work). Idempotent. Raises InvalidUsageError,
        and changes nothing, while a Handle created on the group is open, and so does the
        library while it still holds a handle of the group, e.g. one collected without
        close() and so leaked. Otherwise the group is
        released even when destruction reports an error, which is then raised."""
        with self._lock:
            open_handles = [h for h in self._handles if not h.closed]
            if self._handle is not None and open_handles:
                raise InvalidUsageError(
                    Status.INVALID_USAGE,
                    f"{len(open_handles)} handle(s) created on this group are still open: close them before the group",
                )
            handle, self._handle = self._handle, None
        if handle is None:
            return
        released = True
        try:
            call("epc_group_destroy", handle)
        except EpcError as error:
            if error.status == Status.INVALID_USAGE:
                # Refused before anything was released: the group goes on working.
                released = False
                with self._lock:
                    self._handle = handle
            raise
        finally:
            if released:
                if self._comm is not None:
                    self._comm._unregister(self)  # noqa: SLF001
                self._config = None

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._handle is not None:
                _leaked.append((self._handle, self._config))
                if self._comm is not None:
                    self._comm._leak(self._handle)  # noqa: SLF001
                warnings.warn(
                    "epcomm.Group was garbage-collected while open and is leaked: "
                    "destroying a group is collective, so call close() on every rank",
                    ResourceWarning,
                    stacklevel=2,
                )
        except Exception:  # noqa: BLE001 (a finalizer must never raise)
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "Group(closed)"
        return f"Group({self.handle:#x})"
