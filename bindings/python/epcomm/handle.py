# SPDX-License-Identifier: Apache-2.0
"""Handle: one batch's routing on a group of either mode and its receive layout, and the
steps that use it: dispatch, combine, complete (ABI 2.0: epc_handle_create, epc_dispatch,
epc_combine, epc_complete and friends).

Every keyword argument of create(), dispatch() and combine() is one field of the C struct
the call fills (EpcHandleConfig, EpcDispatchArgs, EpcCombineArgs) under the same name; a
tensor keyword left out (None) is a NULL field, which the library reads as "absent". The
library decides what a mode and layout serve (see the header's status rule): the binding
checks only what it needs to build the structs.
"""

import ctypes
import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _ffi
from ._handles import resolve_stream, stream_address
from ._library import call
from .config import field_bits, unsigned
from .enums import HandleFlags, Layout, Mode, Pending, Quant, ScaleLayout, Sizing, Weighting, known_or_int, parse_enum
from .errors import EpcError, InvalidTensorError, Status
from .tensor import EpcTensor, as_tensor

# Open handles the garbage collector found: kept (never destroyed: see Handle) so that the
# C objects and the tensors of their last step stay valid.
_leaked: List[Any] = []

# What a DLPack producer is told when the call runs on the legacy default stream.
_DLPACK_LEGACY_DEFAULT_STREAM = 1

# The one field whose memory is pinned host memory, not device memory.
HOST_FIELDS = frozenset({"out_expert_counts_host"})
# Fields the library takes with any strides (the others must be contiguous): the scales a
# grouped GEMM reads column-major, rows padded for TMA.
STRIDED_FIELDS = frozenset({"out_scales"})


def tensor_fields(struct_type: Any) -> List[str]:
    """The `const EpcTensor*` fields of an args struct, in header order."""
    return [name for name, c_type in struct_type._fields_ if c_type is ctypes.POINTER(_ffi.EpcTensor)]


@dataclass(frozen=True)
class Routing:
    """A routing (EpcRouting): topk_idx [B, K] int32 or int64 expert ids on the group's
    device, -1 masking an entry (B <= max_tokens_per_rank, K <= max_topk); num_tokens [1]
    int32 on the device: only its first n rows take part (UNSUPPORTED in 2.0 to 2.2)."""

    topk_idx: Any
    num_tokens: Any = None


@dataclass(frozen=True)
class HandleInfo:
    """A handle after defaults (EpcHandleInfo), from Handle.query()."""

    mode: Union[Mode, int]  # the group's
    layout: Union[Layout, int]
    sizing: Union[Sizing, int]
    expert_alignment: int
    num_tokens: int  # B of the current routing (0 before the first)
    topk: int  # K of the current routing (0 before the first)
    pending: Union[Pending, int]  # the send-only call awaiting complete()
    flags: HandleFlags
    capacity: int  # C
    rows: int  # first dimension of [rows, ...] tensors; EXACT: rows received (0 unrouted)
    overflow_status: Status  # Status.OK, or Status.CAPACITY when the last dispatch overflowed
    overflow_rank: int  # the rank whose receive overflowed, -1 for none
    overflow_rows: int  # rows that did not fit (Overflow.DROP: dropped)
    id: int = 0  # ABI 2.1: the handle's number in its group (1, 2, ... in creation order); messages name it


def unexposed_info_fields() -> List[str]:
    """EpcHandleInfo fields HandleInfo does not carry (besides the struct header): empty
    unless the header grew and this module was not updated."""
    exposed = {f.name for f in dataclasses.fields(HandleInfo)}
    return [
        n
        for n in (f[0] for f in _ffi.EpcHandleInfo._fields_)
        if n not in exposed and n not in ("struct_size", "abi_version")
    ]


def _info_from_struct(s: "_ffi.EpcHandleInfo") -> HandleInfo:
    values = {f.name: getattr(s, f.name) for f in dataclasses.fields(HandleInfo)}
    values.update(
        mode=known_or_int(Mode, s.mode),
        layout=known_or_int(Layout, s.layout),
        sizing=known_or_int(Sizing, s.sizing),
        pending=known_or_int(Pending, s.pending),
        flags=HandleFlags(s.flags),
        overflow_status=Status(s.overflow_status),
    )
    return HandleInfo(**values)


def _init(struct_type: Any) -> Any:
    """A zeroed struct with struct_size and abi_version set (what EPC_*_INIT does in C)."""
    out = struct_type()
    out.struct_size = ctypes.sizeof(out)
    out.abi_version = _ffi.EPC_ABI_VERSION
    return out


class Borrowed(NamedTuple):
    """A struct field's tensor for one call: `tensor` is what the library reads; `owned` is
    True when the binding created it (from a DLPack or __cuda_array_interface__ producer)
    and so must release it, False when the caller passed an EpcTensor, which stays the
    caller's: a binding releases only what it created."""

    name: str
    tensor: EpcTensor
    owned: bool


def _borrow(
    function: str, fields: Sequence[Tuple[str, Any]], stream: Optional[int], required: Sequence[str] = ()
) -> List[Borrowed]:
    """Convert every (field, object) whose object is not None to an EpcTensor, contiguous
    outside STRIDED_FIELDS (the library takes only contiguous tensors there; saying so here
    names the field), releasing
    the ones already converted if one fails. A field in `required` may not be None.
    DLPack producers of device memory are told the stream the call runs on, so they order
    their pending work before it. An EpcTensor passed in is used as is (checked, never
    released here)."""
    dlpack_stream = stream or _DLPACK_LEGACY_DEFAULT_STREAM
    borrowed: List[Borrowed] = []
    try:
        for name, obj in fields:
            if obj is None:
                if name in required:
                    raise InvalidTensorError(f"{name} is required (got None)", function=function)
                continue
            host = name in HOST_FIELDS
            try:
                strided = name in STRIDED_FIELDS
                if isinstance(obj, EpcTensor):
                    borrowed.append(Borrowed(name, _check_given(obj, strided), False))
                else:
                    tensor = as_tensor(obj, stream=dlpack_stream, contiguous=not strided, host=host)
                    borrowed.append(Borrowed(name, tensor, True))
            except InvalidTensorError as error:
                raise InvalidTensorError(f"{name}: {error.message}", function=function) from None
    except BaseException:
        _release(borrowed)
        raise
    return borrowed


def _check_given(tensor: EpcTensor, strided: bool = False) -> EpcTensor:
    """A caller's EpcTensor: not released, contiguous unless `strided` (the library takes
    only those)."""
    if tensor.released:
        raise InvalidTensorError("the EpcTensor was released; its memory may be gone")
    if not strided and not tensor.is_contiguous:
        raise InvalidTensorError(
            f"the EpcTensor is not contiguous (shape {tensor.shape}, element strides "
            f"{tensor.strides}); describe contiguous memory"
        )
    return tensor


def _release(tensors: Sequence[Borrowed]) -> None:
    """Release the tensors the binding created; the caller's EpcTensors stay untouched."""
    for entry in tensors:
        if entry.owned:
            entry.tensor.release()


def _point(struct: Any, borrowed: Sequence[Borrowed]) -> None:
    """Set each borrowed tensor's field of `struct` to its descriptor (the struct keeps a
    reference to it)."""
    for entry in borrowed:
        setattr(struct, entry.name, ctypes.pointer(entry.tensor.descriptor))


class Handle:
    """One batch's routing on a group (EpcHandle*) and its receive layout; the mode is the
    group's. Steps: dispatch(), then combine(); either may be split into a send_only=True
    call and complete().

    Create it with Handle.create(group, ...); close it (or leave its `with` block) before
    closing the group, which refuses to close while a handle is open. close() is local and
    waits for the GPU work queued on the handle.

    Tensors are anything as_tensor() accepts (torch or CuPy via DLPack, objects with
    __cuda_array_interface__, EpcTensor from tensor_from_pointer), contiguous, on the
    group's device (out_expert_counts_host: pinned host memory). The library reads and
    writes them in stream order, after the call returns: keep them alive until the stream
    has passed the call. The handle keeps the tensors of its latest call referenced until
    its next call other than complete(), or close(), which covers a send-only step.

    Streams: every stream-ordered call takes `stream=`: an int cudaStream_t, a stream
    object (torch.cuda.Stream, CuPy, numba, anything with __cuda_stream__), or 0 for the
    legacy default stream. stream=None (the default) means the current torch stream of the
    tensors' device when they are torch tensors, else CuPy's current stream when they are
    CuPy arrays, else StreamRequiredError: the legacy default stream is never chosen
    silently.

    Threads: calls on a handle, on the other handles of its group and the group's barrier
    take one lock of the group (the library keeps per-group step state). That makes them
    safe, not meaningful: dispatch and combine are collective, so every rank must queue the
    same steps in the same order; drive one group from one thread.

    Garbage collection never destroys a handle (it could run after its group was closed):
    an open Handle that is collected is leaked, with a ResourceWarning.
    """

    def __init__(self, pointer: "ctypes._Pointer[Any]", group: Any):
        self._pointer: "Optional[ctypes._Pointer[Any]]" = pointer
        self._group = group
        self._in_flight: List[Borrowed] = []
        self._in_flight_struct: Any = None
        self._in_flight_objects: Tuple[Any, ...] = ()
        group._register_handle(self)  # noqa: SLF001

    # -- creation and routing ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        group: Any,
        *,
        layout: Union[Layout, int, str] = 0,
        sizing: Union[Sizing, int, str] = 0,
        capacity: int = 0,
        expert_alignment: int = 0,
        flags: Union[HandleFlags, int] = 0,
        routing: Any = None,
        stream: Any = None,
    ) -> "Handle":
        """A handle on `group` (epc_handle_create). The keywords are EpcHandleConfig's
        fields, 0 meaning the default:

        layout: Layout (or a name): DEFAULT is EXPERT_PADDED on low-latency groups (out_x
          [L, C, H]), FLAT on high-throughput ones (out_x [rows, H]); 2.0 serves those two,
          2.1 also EXPERT_PACKED on high-throughput groups and RANK_MAJOR (out_x [R, T, H])
          and FLAT (out_x [R * T, H]) on low-latency ones.
        sizing: Sizing.CAPACITY (0: rows = capacity, no host synchronisation, so update()
          and every step are graph-capturable) or Sizing.EXACT (FLAT: rows = what this rank
          receives; create with routing and update() then wait once for the counts).
        capacity: C (0: the default, recv_capacity; 2.1 serves any FLAT capacity up to
          it, 2.0 only the default); expert_alignment:
          EXPERT_PACKED only; flags: HandleFlags (GLOBAL_EXPERT_IDS: out_topk_idx holds
          rank * L + local id).

        routing: None (no routing yet: the call is local and only allocates, so every handle
        can be created before graph capture and routed inside it with update()), a topk_idx
        tensor, or a Routing. With routing on a high-throughput group the call is collective
        (the layout is exchanged). `stream` orders the routing copy (stream=None: the
        current torch or CuPy stream of topk_idx; without routing nothing is queued and
        None passes NULL). Allocates device memory; not graph-capturable."""
        config = _init(_ffi.EpcHandleConfig)
        config.layout = parse_enum(Layout, layout, "layout")
        config.sizing = parse_enum(Sizing, sizing, "sizing")
        config.capacity = unsigned("capacity", capacity, field_bits(_ffi.EpcHandleConfig, "capacity"))
        config.expert_alignment = unsigned("expert_alignment", expert_alignment)
        config.flags = unsigned("flags", flags)
        if routing is not None and not isinstance(routing, Routing):
            routing = Routing(routing)
        if routing is None:
            address = stream_address(stream)
            borrowed: List[Borrowed] = []
            routing_struct = None
        else:
            address = resolve_stream(stream, (routing.topk_idx, routing.num_tokens), "epc_handle_create")
            borrowed = _borrow(
                "epc_handle_create",
                [("topk_idx", routing.topk_idx), ("num_tokens", routing.num_tokens)],
                address,
                required=("topk_idx",),
            )
            routing_struct = _init(_ffi.EpcRouting)
            _point(routing_struct, borrowed)
        out = ctypes.POINTER(_ffi.EpcHandle)()
        try:
            with group._calls:  # noqa: SLF001
                call(
                    "epc_handle_create",
                    group._live(),  # noqa: SLF001
                    ctypes.byref(config),
                    None if routing_struct is None else ctypes.byref(routing_struct),
                    ctypes.c_void_p(address),
                    ctypes.byref(out),
                )
        except BaseException:
            _release(borrowed)
            raise
        handle = cls(out, group)
        # The library copies the routing on the stream, which may run after this returns:
        # the handle keeps the routing's tensors until its next call, as update() does.
        objects = () if routing is None else (routing.topk_idx, routing.num_tokens)
        handle._hold(borrowed, routing_struct, objects)  # noqa: SLF001
        return handle

    def update(self, topk_idx: Any, *, num_tokens: Any = None, stream: Any = None) -> None:
        """Replace the routing for the next step (epc_handle_update): topk_idx and
        num_tokens as Routing's. B may change, K may not after the first routing. No step
        may be pending on the handle (InvalidUsageError). Local on low-latency groups,
        collective on high-throughput ones (the layout is exchanged); stream-ordered
        (blocking with Sizing.EXACT, whose rows may then change); graph-capturable with
        Sizing.CAPACITY."""
        self._live()
        address = resolve_stream(stream, (topk_idx, num_tokens), "epc_handle_update")
        borrowed = _borrow(
            "epc_handle_update", [("topk_idx", topk_idx), ("num_tokens", num_tokens)], address, required=("topk_idx",)
        )
        routing = _init(_ffi.EpcRouting)
        _point(routing, borrowed)
        self._call("epc_handle_update", borrowed, routing, (topk_idx, num_tokens), ctypes.byref(routing), address)

    def query(self) -> HandleInfo:
        """Layout, capacity and rows after defaults, what is pending, and the last
        dispatch's overflow (epc_handle_query). Local; host-only."""
        out = _init(_ffi.EpcHandleInfo)
        with self._group._calls:  # noqa: SLF001
            call("epc_handle_query", self._live(), ctypes.byref(out))
        return _info_from_struct(out)

    @property
    def rows(self) -> int:
        """query().rows: the first dimension of every [rows, ...] tensor (FLAT); with
        Sizing.EXACT the rows this rank receives for the current routing."""
        return self.query().rows

    # -- steps ------------------------------------------------------------------------------

    def dispatch(
        self,
        x: Any,
        *,
        out_x: Any,
        quant: Union[Quant, int, str] = 0,
        scale_block: int = 0,
        scale_layout: Union[ScaleLayout, int, str] = 0,
        x_scales: Any = None,
        x_global_scale: Any = None,
        topk_weights: Any = None,
        out_scales: Any = None,
        out_topk_idx: Any = None,
        out_topk_weights: Any = None,
        out_expert_counts: Any = None,
        out_expert_offsets: Any = None,
        out_rank_counts: Any = None,
        out_num_recv: Any = None,
        out_expert_counts_host: Any = None,
        acc_expert_counts: Any = None,
        send_only: bool = False,
        pow2_scales: bool = False,
        send_sms: int = 0,
        max_step_tokens: int = 0,
        stream: Any = None,
    ) -> None:
        """Send each of this rank's tokens to every rank hosting one of its unmasked
        entries and receive this rank's rows in the handle's layout (epc_dispatch).
        Collective over the group; stream-ordered; graph-capturable.

        x [B, H] (required), out_x (required): the received rows, [L, C, H] on
        EXPERT_PADDED (each local expert's rows ordered by source rank, source token, top-k
        slot), [rows, H] on FLAT (ordered by source rank, source token).
        quant: Quant.NONE (x bf16/fp16 travels as it is), FP8 (cast in the send kernel to
          fp8_e4m3 out_x with float32 out_scales [.., H/128]: scale = max(amax of the
          block, 1e-4) / 448, rounded up to a power of two with pow2_scales=True), or
          PASSTHROUGH (fp8_e4m3 x with x_scales [B, H/128] float32, copied byte for byte
          into out_x and out_scales; since 2.1 in both modes also fp4_e2m1x2 x [B, H/2], any
          scale count and dtype, on low-latency groups in every layout with out_scales of
          any non-overlapping strides, and NVFP4's x_global_scale [1] float32 with e2m1 x,
          checked and not sent). With FP8 on low-latency groups out_scales may also be
          Dtype.E8M0 (one exponent byte per scale) or E8M0X4 (four per int32 word, [.., ceil(
          H/512)]), which round every scale up to a power of two, and may have any strides
          that do not overlap (column-major over rows, e.g. a transposed view, as grouped
          GEMMs read scales). scale_block: channels per scale (0: 128);
          scale_layout: ScaleLayout (0: STRIDED).
        topk_weights [B, K] float32: required by out_topk_weights, and by the expert
          layouts' default combine (Weighting.SENDER weights the rows with them; without
          them combine with Weighting.HOME and home_topk_weights).
        out_topk_idx [rows, K] int32 and out_topk_weights [rows, K] float32 (FLAT): the
          entry's local (or global) expert id and weight where the expert is on this
          rank, else -1 and 0. out_expert_counts [L] int32: rows per local expert (FLAT:
          received (token, entry) pairs). out_num_recv [1] int32: rows that arrived (FLAT).
          out_expert_counts_host [L] int32 in pinned host memory: a copy of the counts,
          readable once the stream has passed the step. acc_expert_counts [L] int64: the
          counts are added to it (the caller zeroes it). out_expert_offsets (EXPERT_PACKED)
          and out_rank_counts (RANK_MAJOR) belong to other layouts.
        send_only=True queues only the sending half; complete() writes the outputs.
        send_sms (ABI 2.1): the SMs the sending launch may occupy (0: the group's num_sms;
          at most num_sms and the GPU's SM count): the send half's grid with send_only,
          else the whole step's. Outputs do not depend on it; a 2.0 library refuses a
          non-zero value (EpcError(ABI_MISMATCH)).
        max_step_tokens (ABI 2.2): the most tokens any rank of the group dispatches in this
          step (every rank's B at most this), the same on every rank; 0: max_tokens_per_rank.
          A bound of few tokens lets a low-latency group of one node move the step as line
          records; outputs do not depend on it. Above max_tokens_per_rank or below this
          rank's B: EpcError(INVALID_ARGUMENT); ranks that pass different values:
          EpcError(TIMEOUT) saying so, and the group fails. A 2.1 library refuses a non-zero value
          (EpcError(ABI_MISMATCH)).
        A field meaningless for the mode or layout raises EpcError(INVALID_ARGUMENT), one
        not served yet EpcError(UNSUPPORTED), a step out of order InvalidUsageError."""
        args = _init(_ffi.EpcDispatchArgs)
        args.flags = (_ffi.EPC_STEP_SEND_ONLY if send_only else 0) | (
            _ffi.EPC_DISPATCH_POW2_SCALES if pow2_scales else 0
        )
        args.quant = parse_enum(Quant, quant, "quant")
        args.scale_block = unsigned("scale_block", scale_block)
        args.scale_layout = parse_enum(ScaleLayout, scale_layout, "scale_layout")
        args.send_sms = unsigned("send_sms", send_sms)
        args.max_step_tokens = unsigned("max_step_tokens", max_step_tokens)
        tensors = dict(
            x=x,
            x_scales=x_scales,
            x_global_scale=x_global_scale,
            topk_weights=topk_weights,
            out_x=out_x,
            out_scales=out_scales,
            out_topk_idx=out_topk_idx,
            out_topk_weights=out_topk_weights,
            out_expert_counts=out_expert_counts,
            out_expert_offsets=out_expert_offsets,
            out_rank_counts=out_rank_counts,
            out_num_recv=out_num_recv,
            out_expert_counts_host=out_expert_counts_host,
            acc_expert_counts=acc_expert_counts,
        )
        self._step("epc_dispatch", args, tensors, ("x", "out_x"), stream)

    def combine(
        self,
        x: Any,
        *,
        out: Any,
        weighting: Union[Weighting, int, str] = 0,
        topk_weights: Any = None,
        home_topk_weights: Any = None,
        out_topk_weights: Any = None,
        send_only: bool = False,
        send_sms: int = 0,
        stream: Any = None,
    ) -> None:
        """Return the expert outputs to their tokens' ranks and reduce them there
        (epc_combine). Collective over the group; stream-ordered; graph-capturable.

        x (required): the expert outputs in dispatch out_x's shape, bfloat16. out [B, H]
        (required): bfloat16, float16 or float32; per token, the float32 sum over the ranks
        that received it in ascending rank order, rounded once to out's dtype (tokens sent
        nowhere get zeros); out must not overlap x.
        weighting: Weighting.DEFAULT (0: SENDER on expert layouts, where each rank weights
          its rows by dispatch's topk_weights and sums one partial per token, rounded to
          bfloat16; NONE on FLAT: the caller weighted the rows).
        topk_weights [rows, K] and out_topk_weights [B, K] float32, both or neither (FLAT):
          the backward of dispatch's weights: entry k takes the value the rank hosting its
          expert sent (0 where masked). home_topk_weights [B, K] float32: Weighting.HOME
          only (expert layouts on a group with GroupFlags.COMBINE_PER_ENTRY: every
          (token, entry) row returns and this rank sums weight * row over the token's
          entries in top-k order in float32; served on HT EXPERT_PACKED and LL EXPERT_PADDED
          since 2.1).
        send_only=True queues only the sending half; complete() writes out. send_sms: as
        dispatch's."""
        args = _init(_ffi.EpcCombineArgs)
        args.flags = _ffi.EPC_STEP_SEND_ONLY if send_only else 0
        args.weighting = parse_enum(Weighting, weighting, "weighting")
        args.send_sms = unsigned("send_sms", send_sms)
        tensors = dict(
            x=x,
            topk_weights=topk_weights,
            home_topk_weights=home_topk_weights,
            out=out,
            out_topk_weights=out_topk_weights,
        )
        self._step("epc_combine", args, tensors, ("x", "out"), stream)

    def complete(self, stream: Any = None) -> None:
        """Finish the handle's pending send-only dispatch or combine (epc_complete): wait,
        on the device, for every peer and write the outputs that call named. `stream` must
        be ordered after the send-only call (stream=None: the current torch or CuPy stream
        of that call's tensors). Nothing pending: InvalidUsageError. Collective;
        stream-ordered; graph-capturable."""
        self._live()
        address = resolve_stream(stream, self._in_flight_objects, "epc_complete")
        with self._group._calls:  # noqa: SLF001
            call("epc_complete", self._live(), ctypes.c_uint32(0), ctypes.c_void_p(address))

    def _step(self, function: str, args: Any, tensors: Dict[str, Any], required: Sequence[str], stream: Any) -> None:
        self._live()
        address = resolve_stream(stream, tensors.values(), function)
        borrowed = _borrow(function, list(tensors.items()), address, required)
        _point(args, borrowed)
        self._call(function, borrowed, args, tuple(tensors.values()), ctypes.byref(args), address)

    def _call(
        self,
        function: str,
        borrowed: List[Borrowed],
        struct: Any,
        objects: Tuple[Any, ...],
        argument: Any,
        address: Optional[int],
    ) -> None:
        """Call `function(handle, argument, stream)` under the group's lock; on success keep
        the tensors (and the struct pointing at them) until the next call, else release
        them."""
        try:
            with self._group._calls:  # noqa: SLF001
                call(function, self._live(), argument, ctypes.c_void_p(address))
        except BaseException:
            _release(borrowed)
            raise
        self._hold(borrowed, struct, objects)

    def _hold(self, tensors: List[Borrowed], struct: Any = None, objects: Tuple[Any, ...] = ()) -> None:
        previous, self._in_flight = self._in_flight, tensors
        self._in_flight_struct, self._in_flight_objects = struct, objects
        _release(previous)

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._pointer is None

    @property
    def handle(self) -> int:
        """The EpcHandle* as an int address (for other C code)."""
        return ctypes.cast(self._live(), ctypes.c_void_p).value or 0

    @property
    def group(self) -> Any:
        return self._group

    def _live(self) -> "ctypes._Pointer[Any]":
        pointer = self._pointer
        if pointer is None:
            raise EpcError(Status.INVALID_ARGUMENT, "the handle is closed")
        return pointer

    def close(self) -> None:
        """Free the handle's device memory once the work queued on it has finished
        (epc_handle_destroy); a pending send-only step gives up its slot. Local; blocking;
        idempotent. The handle is gone afterwards even when the library reports an error,
        which is then raised."""
        with self._group._calls:  # noqa: SLF001
            pointer, self._pointer = self._pointer, None
            if pointer is None:
                return
            try:
                call("epc_handle_destroy", pointer)
            finally:
                self._hold([])
                self._group._unregister_handle(self)  # noqa: SLF001

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._pointer is not None:
                _leaked.append((self._pointer, self._in_flight, self._in_flight_struct))
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
