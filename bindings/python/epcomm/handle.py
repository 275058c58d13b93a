# SPDX-License-Identifier: Apache-2.0
"""Handle: the routing of one batch on a low-latency group, and the calls that use it
(ll_dispatch, ll_dispatch_fp8, ll_combine, complete, update). HandleBase is what it shares
with HtHandle (ht_handle.py): the C handle, the group's lock, the tensors in flight, close."""

import ctypes
import warnings
from typing import Any, Collection, List, Optional, Sequence, Tuple

from . import _ffi
from ._handles import stream_address
from ._library import call
from .errors import EpcError, InvalidTensorError, Status
from .tensor import EpcTensor, as_tensor

# Open handles the garbage collector found: kept (never destroyed: see Handle) so that the
# C objects and the tensors of their last step stay valid.
_leaked: List[Any] = []

# What a DLPack producer is told when the call runs on the legacy default stream.
_DLPACK_LEGACY_DEFAULT_STREAM = 1


def _borrow(
    function: str, tensors: Sequence[Tuple[str, Any]], stream: Optional[int], optional: Collection[str] = ()
) -> List[Optional[EpcTensor]]:
    """Convert every (name, object) to a contiguous EpcTensor (the library takes only
    contiguous tensors; saying so here names the Python object), releasing the ones already
    converted if one fails. A None object is an error unless its name is in `optional`,
    where it stays None (NULL for the library). DLPack producers are told the stream the
    call runs on, so they order their pending work before it."""
    dlpack_stream = stream or _DLPACK_LEGACY_DEFAULT_STREAM
    borrowed: List[Optional[EpcTensor]] = []
    try:
        for name, obj in tensors:
            if obj is None:
                if name in optional:
                    borrowed.append(None)
                    continue
                raise InvalidTensorError(f"{name} is required (got None)", function=function)
            try:
                borrowed.append(as_tensor(obj, stream=dlpack_stream, contiguous=True))
            except InvalidTensorError as error:
                raise InvalidTensorError(f"{name}: {error.message}", function=function) from None
    except BaseException:
        _release(borrowed)
        raise
    return borrowed


def _release(tensors: Sequence[Optional[EpcTensor]]) -> None:
    for tensor in tensors:
        if tensor is not None:
            tensor.release()


class HandleBase:
    """What Handle and HtHandle share: an EpcHandle* of either mode, the group it was
    created on (whose lock every call takes), the tensors of the latest call, close().
    Not created directly: use Handle.create or HtHandle.create."""

    def __init__(self, pointer: "ctypes._Pointer", group: Any):
        self._pointer: Optional[ctypes._Pointer] = pointer
        self._group = group
        self._in_flight: List[Optional[EpcTensor]] = []
        group._register_handle(self)  # noqa: SLF001

    @staticmethod
    def _create(
        function: str,
        group: Any,
        topk_idx: Any,
        stream: Any,
        before_stream: Sequence[Any] = (),
        after_out: Sequence[Any] = (),
    ) -> "ctypes._Pointer":
        """Call `function(group, topk_idx, *before_stream, stream, &handle, *after_out)`
        under the group's lock and return the new handle; the routing tensor is released
        afterwards (the library copied it on the stream, as the header says)."""
        stream = stream_address(stream)
        (idx,) = _borrow(function, [("topk_idx", topk_idx)], stream)
        out = ctypes.POINTER(_ffi.EpcHandle)()
        try:
            with group._calls:  # noqa: SLF001
                call(
                    function,
                    group._live(),
                    idx.byref(),
                    *before_stream,  # noqa: SLF001
                    ctypes.c_void_p(stream),
                    ctypes.byref(out),
                    *after_out,
                )
        finally:
            idx.release()
        return out

    @property
    def closed(self) -> bool:
        return self._pointer is None

    @property
    def handle(self) -> int:
        """The EpcHandle* as an int address (for other C code)."""
        return ctypes.cast(self._live(), ctypes.c_void_p).value

    @property
    def group(self) -> Any:
        return self._group

    def _live(self) -> "ctypes._Pointer":
        pointer = self._pointer
        if pointer is None:
            raise EpcError(Status.INVALID_ARGUMENT, "the handle is closed")
        return pointer

    def _run(
        self, function: str, tensors: Sequence[Tuple[str, Any]], stream: Any, *args: Any, optional: Collection[str] = ()
    ) -> None:
        """Check the handle, borrow the tensors (those named in `optional` may be None),
        call `function(handle, *tensors, *args, stream)` under the group's lock, and keep
        the tensors until the next call."""
        self._live()
        stream = stream_address(stream)
        borrowed = _borrow(function, tensors, stream, optional)
        try:
            with self._group._calls:  # noqa: SLF001
                call(
                    function,
                    self._live(),
                    *(None if t is None else t.byref() for t in borrowed),
                    *args,
                    ctypes.c_void_p(stream),
                )
        except BaseException:
            _release(borrowed)
            raise
        self._hold(borrowed)

    def _hold(self, tensors: List[Optional[EpcTensor]]) -> None:
        previous, self._in_flight = self._in_flight, tensors
        _release(previous)

    def close(self) -> None:
        """Free the handle's device memory once the work queued on it has finished
        (epc_handle_destroy). Local; blocking; idempotent. The handle is gone afterwards
        even when the library reports an error, which is then raised."""
        with self._group._calls:  # noqa: SLF001
            pointer, self._pointer = self._pointer, None
            if pointer is None:
                return
            try:
                call("epc_handle_destroy", pointer)
            finally:
                self._hold([])
                self._group._unregister_handle(self)  # noqa: SLF001

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        try:
            if self._pointer is not None:
                _leaked.append((self._pointer, self._in_flight))
                warnings.warn(
                    f"epcomm.{type(self).__name__} was garbage-collected while open "
                    "and is leaked: call close() (before closing its group)",
                    ResourceWarning,
                    stacklevel=2,
                )
        except Exception:  # noqa: BLE001 (a finalizer must never raise)
            pass

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(closed)" if self._pointer is None else f"{name}({self.handle:#x})"


class Handle(HandleBase):
    """One batch's routing on a low-latency group (EpcHandle*), and the device state a step
    needs.

    Create it with Handle.create(group, topk_idx); close it (or leave its `with` block)
    before closing the group, which refuses to close while a handle is open. close() is
    local and waits for the GPU work queued on the handle.

    Tensors are anything as_tensor() accepts (torch or CuPy via DLPack, objects with
    __cuda_array_interface__, EpcTensor from tensor_from_pointer), contiguous, on the
    group's device. The library reads and writes them in stream order, after the call
    returns: keep them alive until the stream has passed the call. The handle keeps the
    tensors of its latest call referenced until its next call or close(), which covers a
    send-only step until complete().

    Threads: calls on a handle, on the other handles of its group and the group's barrier
    take one lock of the group (the library keeps per-group step state). That makes them
    safe, not meaningful: dispatch and combine are collective, so every rank must queue the
    same steps in the same order; drive one group from one thread.

    Garbage collection never destroys a handle (it could run after its group was closed):
    an open Handle that is collected is leaked, with a ResourceWarning.
    """

    @classmethod
    def create(cls, group: Any, topk_idx: Any, stream: Any = None) -> "Handle":
        """A handle on `group` for the routing `topk_idx` (epc_handle_create): [B, K] int64
        or int32 expert ids, -1 masking an entry; B <= max_tokens_per_rank, K <= max_topk.
        The routing is copied on `stream` (None: the legacy default stream; an int
        cudaStream_t or a stream object), so `topk_idx` may be reused once that stream has
        passed this point. Allocates device memory. A high-throughput group refuses it (its
        handles are HtHandles). Local; stream-ordered; not graph-capturable."""
        return cls(cls._create("epc_handle_create", group, topk_idx, stream), group)

    def update(self, topk_idx: Any, stream: Any = None) -> None:
        """Replace the routing with `topk_idx` for the next step (epc_handle_update): same
        rules as create(); B may change, K may not. Call it after the previous step's
        combine. No allocation, no host synchronisation (graph-capturable). Local;
        stream-ordered."""
        self._run("epc_handle_update", [("topk_idx", topk_idx)], stream)

    def ll_dispatch(
        self, x: Any, topk_weights: Any, out_x: Any, out_counts: Any, *, send_only: bool = False, stream: Any = None
    ) -> None:
        """Send this rank's tokens to the ranks hosting their experts and receive this
        rank's share, expert-major (epc_ll_dispatch).

        x [B, H] in the group's 16-bit dtype; topk_weights [B, K] float32; out_x
        [L, R*T, H], x's dtype: the rows each local expert received, ordered by (source
        rank, source token, top-k slot); out_counts [L] int32: rows per local expert.
        With send_only=True only the send is queued, and complete() must follow on the same
        stream, before any other dispatch or combine of the group, to write the outputs.
        Collective over the group's ranks; stream-ordered; graph-capturable."""
        flags = _ffi.EPC_FLAG_SEND_ONLY if send_only else 0
        self._run(
            "epc_ll_dispatch",
            [("x", x), ("topk_weights", topk_weights), ("out_x", out_x), ("out_counts", out_counts)],
            stream,
            _ffi.EpcFlags(flags),
        )

    def ll_dispatch_fp8(
        self,
        x: Any,
        topk_weights: Any,
        out_x: Any,
        out_scales: Any,
        out_counts: Any,
        *,
        send_only: bool = False,
        pow2_scales: bool = False,
        stream: Any = None,
    ) -> None:
        """ll_dispatch with the payload cast to FP8 in the send kernel
        (epc_ll_dispatch_fp8, ABI 1.1): each token row travels as e4m3 bytes with one
        float32 scale per 128 channels, scale = max(amax, 1e-4) / 448 (with
        pow2_scales=True, EPC_FLAG_FP8_POW2_SCALES, rounded up to a power of two),
        e4m3 = saturate(x / scale).

        x [B, H] bfloat16 or float16, H % 128 == 0; topk_weights [B, K] float32; out_x
        [L, R*T, H] fp8_e4m3: the rows each local expert received, in ll_dispatch's order;
        out_scales [L, R*T, H/128] float32: each received row's scales; out_counts [L]
        int32: rows per local expert. Works on groups of any dtype (on an fp8_e4m3 group it
        is the only dispatch); ll_combine takes bfloat16 expert outputs as usual. send_only,
        collectiveness and streams as ll_dispatch. A library older than ABI 1.1 lacks the
        function: EpcError(UNSUPPORTED), nothing is called."""
        flags = (_ffi.EPC_FLAG_SEND_ONLY if send_only else 0) | (_ffi.EPC_FLAG_FP8_POW2_SCALES if pow2_scales else 0)
        self._run(
            "epc_ll_dispatch_fp8",
            [
                ("x", x),
                ("topk_weights", topk_weights),
                ("out_x", out_x),
                ("out_scales", out_scales),
                ("out_counts", out_counts),
            ],
            stream,
            _ffi.EpcFlags(flags),
        )

    def ll_combine(self, expert_out: Any, out: Any, *, send_only: bool = False, stream: Any = None) -> None:
        """Return the expert outputs to their tokens' ranks and reduce them
        (epc_ll_combine).

        expert_out [L, R*T, H] bfloat16, in the layout this handle's dispatch produced;
        out [B, H] bfloat16: per token, the sum over the ranks hosting its unmasked entries
        (ascending) of that rank's partial (its entries' weighted sum in top-k order, in
        float32, sent as bfloat16), in float32, rounded to bfloat16; fully masked tokens
        get zeros. expert_out must not overlap out. send_only and the rest as ll_dispatch."""
        flags = _ffi.EPC_FLAG_SEND_ONLY if send_only else 0
        self._run("epc_ll_combine", [("expert_out", expert_out), ("out", out)], stream, _ffi.EpcFlags(flags))

    def complete(self, stream: Any = None) -> None:
        """Finish the step whose ll_dispatch or ll_combine ran with send_only=True
        (epc_complete): wait, on the device, for every peer's data and write that call's
        outputs. Collective; stream-ordered; graph-capturable."""
        self._live()
        with self._group._calls:  # noqa: SLF001
            call("epc_complete", self._live(), ctypes.c_void_p(stream_address(stream)))
