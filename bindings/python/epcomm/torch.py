# SPDX-License-Identifier: Apache-2.0
"""epcomm for torch: a Buffer built from a torch.distributed process group, dispatch and
combine as torch custom ops, and an autograd function for the high-throughput path.

Importing this module imports torch (the core package never does).

    dist.init_process_group("nccl")                # torchrun: nothing else to set up
    torch.cuda.set_device(local_rank)
    buffer = epcomm.torch.Buffer(num_experts=64, hidden=4096)           # collective
    recv_x, counts = buffer.ll_dispatch(x, topk_idx, topk_weights)      # collective
    out = buffer.ll_combine(expert_fn(recv_x, counts), topk_idx)        # collective

Communicator: the Buffer adopts the process group's own NCCL communicator when it can (after
one collective, so that it exists): when torch's ProcessGroupNCCL exposes it (`_comm_ptr`,
not NULL) and the process has exactly one libnccl loaded, of the version torch reports, so
that torch and libepcomm share it. Otherwise (or with adopt=False, or EPCOMM_TORCH_ADOPT=0)
rank 0 of the group creates an epcomm unique id, broadcasts it over the group, and every
rank creates a communicator of its own, which the Buffer destroys at close().
`Buffer.comm_source` says which happened and why.

Calls run on the current torch stream of the Buffer's device. Outputs not given are
allocated and returned; preallocated ones (keyword `out_*`) are written and returned, which
is what CUDA graph capture (torch.cuda.graph) needs: create the Buffer and run one step
before capturing (handles are created at their first step). Every call is also registered
as a torch.library.custom_op (namespace `epcomm`) with its outputs declared as mutated,
so torch.compile sees opaque ops; eager calls skip the dispatcher and go straight to the
fast path (descriptors refilled in place, the C function called with int addresses).

Tensors must be CUDA tensors on the Buffer's device, contiguous, of the dtype each argument
names; anything else raises InvalidTensorError (a ValueError) naming the argument, before
the library is called. Shapes are checked by the library (EpcError naming the field).

`slot` (default 0) names one epcomm handle of the Buffer: a step's routing lives in its
handle, so layers whose steps interleave (the high-throughput backward pass runs after every
forward layer) use one slot each. A slot's layout is fixed by its first call:
ht_dispatch_packed makes an EXPERT_PACKED handle (rows grouped by local expert, zones
aligned for a grouped GEMM, combine weighting each row on the expert's rank), the other
calls the mode's default layout.
"""

import itertools
import os
import threading
from typing import Any, Dict, FrozenSet, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _ffi
from ._fastpath import Args, Function
from .bootstrap import Comm, UniqueId
from .config import GroupConfig
from .enums import Dtype, Layout, Mode, parse_enum
from .errors import InvalidTensorError
from .group import Group, GroupInfo
from .handle import Handle

__all__ = ["Buffer", "describe", "DTYPES"]

# torch dtype -> epcomm Dtype, for the dtypes both know.
DTYPES: Dict[Any, Dtype] = {
    torch.bfloat16: Dtype.BF16,
    torch.float16: Dtype.FP16,
    torch.float32: Dtype.FP32,
    torch.int32: Dtype.INT32,
    torch.int64: Dtype.INT64,
    torch.uint8: Dtype.UINT8,
}
for _name, _code in (("float8_e4m3fn", Dtype.FP8_E4M3), ("float8_e5m2", Dtype.FP8_E5M2)):
    if hasattr(torch, _name):
        DTYPES[getattr(torch, _name)] = _code

_TOKENS = frozenset({torch.bfloat16, torch.float16})
_BF16 = frozenset({torch.bfloat16})
_INDEX = frozenset({torch.int32, torch.int64})
_INT32 = frozenset({torch.int32})
_FP32 = frozenset({torch.float32})
_OUT = frozenset({torch.bfloat16, torch.float16, torch.float32})

# The current stream of a device as an int, without building a torch.cuda.Stream.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(index: int) -> int:
    if _raw_stream is not None:
        return int(_raw_stream(index))
    return int(torch.cuda.current_stream(index).cuda_stream)  # pragma: no cover


def _dtype_names(dtypes: FrozenSet[Any]) -> str:
    return " or ".join(sorted(str(d).replace("torch.", "") for d in dtypes))


def _dtype_of(tensor: Any) -> Any:
    """A tensor's dtype for allocating outputs like it; bf16 for what is not a tensor (the
    call's check then refuses it, naming the argument)."""
    return tensor.dtype if isinstance(tensor, torch.Tensor) else torch.bfloat16


def _first_dim(tensor: Any, name: str, function: str) -> int:
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1:
        raise TypeError(f"{function}: {name} must be a torch.Tensor with at least one dimension")
    return int(tensor.shape[0])


def check(tensor: Any, name: str, device: int, dtypes: FrozenSet[Any], function: str) -> Any:
    """Refuse what the fast path cannot describe, naming the argument: not a torch tensor,
    not CUDA, another GPU, a dtype outside `dtypes`, non-contiguous, more than 4 dims.
    Returns the epcomm dtype code."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{function}: {name} must be a torch.Tensor, not {type(tensor).__name__}")
    where = tensor.get_device()
    if where != device:
        place = "the CPU" if where < 0 else f"cuda:{where}"
        raise InvalidTensorError(
            f"{name} is on {place}; the buffer's group is on cuda:{device} (move it there, e.g. {name}.to('cuda:{device}'))",
            function=function,
        )
    if tensor.dtype not in dtypes:
        raise InvalidTensorError(f"{name} has dtype {tensor.dtype}; expected {_dtype_names(dtypes)}", function=function)
    if not tensor.is_contiguous():
        raise InvalidTensorError(
            f"{name} is not contiguous (shape {tuple(tensor.shape)}, strides {tensor.stride()}); pass {name}.contiguous()",
            function=function,
        )
    if tensor.dim() > _ffi.EPC_TENSOR_MAX_DIMS:
        raise InvalidTensorError(
            f"{name} has {tensor.dim()} dimensions; at most {_ffi.EPC_TENSOR_MAX_DIMS}", function=function
        )
    return DTYPES[tensor.dtype]


def describe(tensor: Any) -> Any:
    """A reusable EpcTensor for a static torch buffer (from data_ptr, shape, strides and
    dtype, no DLPack): build it once, pass it to every step of the core Handle API; it
    keeps `tensor` alive and stays valid until you release() it. CPU tensors are
    described as host memory (the one host field takes pinned memory)."""
    from .tensor import from_torch

    return from_torch(tensor)


class _Slot:
    """One handle of a Buffer and the structs its steps refill. `packed`: an EXPERT_PACKED
    handle with zones aligned to `alignment` rows (high-throughput), else the mode's
    default layout."""

    def __init__(self, buffer: "Buffer", packed: bool = False, alignment: int = 0):
        self.packed, self.alignment = packed, alignment
        if packed:
            self.handle = Handle.create(buffer.group, layout=Layout.EXPERT_PACKED, expert_alignment=alignment)
        else:
            self.handle = Handle.create(buffer.group)
        try:
            self.address = self.handle.handle
            self.rows = self.handle.rows
        except BaseException:
            _release(self.handle)  # else it leaks, and the group can never be closed
            raise
        self.routing = Args(_ffi.EpcRouting, ("topk_idx",))
        self.ll_dispatch = Args(_ffi.EpcDispatchArgs, ("x", "topk_weights", "out_x", "out_expert_counts"))
        self.ht_dispatch = Args(
            _ffi.EpcDispatchArgs,
            ("x", "topk_weights", "out_x", "out_topk_idx", "out_topk_weights", "out_expert_counts", "out_num_recv"),
        )
        self.packed_dispatch = Args(
            _ffi.EpcDispatchArgs, ("x", "topk_weights", "out_x", "out_expert_counts", "out_expert_offsets")
        )
        self.rows_dispatch = Args(_ffi.EpcDispatchArgs, ("x", "out_x"))
        self.combine = Args(_ffi.EpcCombineArgs, ("x", "out"))
        self.combine_weights = Args(_ffi.EpcCombineArgs, ("x", "topk_weights", "out", "out_topk_weights"))
        self.combine_home = Args(_ffi.EpcCombineArgs, ("x", "home_topk_weights", "out"))
        self.combine_home.struct.weighting = _ffi.EPC_WEIGHTING_HOME


def _release(*objects: Any) -> None:
    """Close `objects` in order after a failure, which the caller re-raises: an error of a
    close is dropped so that it does not hide the original one."""
    for thing in objects:
        if thing is not None:
            try:
                thing.close()
            except Exception:  # noqa: BLE001 (the caller raises the original error)
                pass


_buffers: Dict[int, "Buffer"] = {}
_ids = itertools.count(1)
_UPDATE = "epc_handle_update"


class Buffer:
    """An epcomm group on a torch.distributed process group, and its handles.

    group: the ProcessGroup (None: the default group); its backend must be NCCL.
    mode: "low_latency" (default) or "high_throughput" (a Mode or its name).
    num_experts, hidden (required) and every other keyword of GroupConfig
    (max_tokens_per_rank, max_topk, num_sms, timeout_ms, ...; 0 means the default), among
    them flags=GroupFlags.COMBINE_PER_ENTRY, which home_topk_weights at ll_combine and
    ht_combine needs (any number of nodes; without it those calls raise the library's EpcError).
    device: the CUDA device (None: torch's current device).
    adopt: None (adopt the group's NCCL communicator when usable), False (never: broadcast
    a unique id), True (adopt or raise).

    Collective over the group: every rank constructs it, and every rank calls close() (or
    leaves its `with` block), which destroys the handles, the group and an owned
    communicator. Thread-safety: one Buffer is driven by one thread.
    """

    def __init__(
        self,
        group: Any = None,
        *,
        num_experts: int,
        hidden: int,
        mode: Union[Mode, int, str] = Mode.LOW_LATENCY,
        device: Any = None,
        adopt: Optional[bool] = None,
        **config: Any,
    ):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "epcomm.torch.Buffer: torch.distributed is not initialized; call "
                "torch.distributed.init_process_group('nccl') first (torchrun sets up the rest)"
            )
        pg = group if group is not None else dist.group.WORLD
        backend = str(dist.get_backend(pg))
        if "nccl" not in backend:
            raise ValueError(
                f"epcomm.torch.Buffer: the process group's backend is {backend!r}, not NCCL; "
                "epcomm needs an NCCL process group (init_process_group('nccl') or new_group(backend='nccl'))"
            )
        self.device = torch.device(
            "cuda", torch.cuda.current_device() if device is None else torch.device(device).index
        )
        self.device_index: int = int(self.device.index)
        self.process_group = pg
        self.rank = dist.get_rank(pg)
        self.nranks = dist.get_world_size(pg)
        self._lock = threading.Lock()
        self._slots: Dict[int, _Slot] = {}
        self.comm: Optional[Comm] = None
        self.group: Any = None
        with torch.cuda.device(self.device):
            self.comm, self.comm_source = self._communicator(pg, adopt)
            parsed_mode = parse_enum(Mode, mode, "mode")
            try:
                self.group = Group.create(
                    self.comm, GroupConfig(mode=parsed_mode, num_experts=num_experts, hidden=hidden, **config)
                )
                self.info: GroupInfo = self.group.info()
            except BaseException:
                _release(self.group, self.comm)  # what this constructor made, newest first
                raise
        self.mode = self.info.mode
        self.id = next(_ids)
        _buffers[self.id] = self
        self._functions = {name: Function(name) for name in (_UPDATE, "epc_dispatch", "epc_combine")}

    # -- set-up -----------------------------------------------------------------------------

    def _communicator(self, pg: Any, adopt: Optional[bool]) -> Tuple[Comm, str]:
        if adopt is None and os.environ.get("EPCOMM_TORCH_ADOPT", "") == "0":
            adopt = False
        reason = "adopt=False"
        if adopt is not False:
            pointer, reason = self._nccl_comm_of(pg)
            if pointer:
                return Comm.adopt(pointer), f"adopted the process group's NCCL communicator ({reason})"
            if adopt:
                raise RuntimeError(
                    f"epcomm.torch.Buffer(adopt=True): cannot adopt the process group's communicator: {reason}"
                )
        data = torch.zeros(UniqueId.SIZE, dtype=torch.uint8, device=self.device)
        if self.rank == 0:
            data.copy_(torch.tensor(list(bytes(UniqueId.create())), dtype=torch.uint8))
        dist.broadcast(data, src=dist.get_global_rank(pg, 0), group=pg)
        unique_id = UniqueId(bytes(data.cpu().tolist()))
        comm = Comm.init(unique_id, self.nranks, self.rank, device=self.device_index)
        return comm, f"a communicator of its own from a unique id broadcast over the group ({reason})"

    def _nccl_comm_of(self, pg: Any) -> Tuple[int, str]:
        """(ncclComm_t, why) of the group on this device, or (0, why not)."""
        try:
            backend = pg._get_backend(self.device)  # noqa: SLF001
            comm_ptr = backend._comm_ptr  # noqa: SLF001
        except (AttributeError, RuntimeError) as error:
            return 0, f"torch exposes no NCCL communicator pointer ({error})"
        probe = torch.zeros(1, device=self.device)
        dist.all_reduce(probe, group=pg)  # NCCL communicators are created at first use
        torch.cuda.synchronize(self.device)
        pointer = int(comm_ptr())
        if not pointer:
            return 0, "the process group's NCCL communicator pointer is NULL"
        from ._library import library

        library()  # libepcomm (and its libnccl) loaded before the maps are read
        files = _loaded_nccl()
        try:
            torch_version = tuple(torch.cuda.nccl.version())
        except Exception as error:  # noqa: BLE001
            return 0, f"torch does not say its NCCL version ({error})"
        if len(files) != 1:
            return (
                0,
                f"{len(files)} libnccl files are loaded ({', '.join(sorted(files)) or 'none'}): torch's NCCL may not be epcomm's",
            )
        (path,) = files
        version = _nccl_version(path)
        if version != torch_version[:3]:
            return 0, f"torch's NCCL is {torch_version} but {path} is {version}"
        return pointer, f"NCCL {'.'.join(map(str, version))} at {path}"

    # -- slots ------------------------------------------------------------------------------

    def _slot(self, slot: int, packed: Optional[bool] = None, alignment: int = 0) -> _Slot:
        """The slot's handle, created at its first use: EXPERT_PACKED (aligned to
        `alignment`) when the first call is ht_dispatch_packed, else the mode's default
        layout. `packed` (None: any) checks that a later call fits the slot's layout."""
        state = self._slots.get(slot)
        if state is None:
            if self.group is None or self.group.closed:
                raise RuntimeError("epcomm.torch.Buffer is closed")
            with torch.cuda.device(self.device):
                state = self._slots[slot] = _Slot(self, bool(packed), alignment)
        elif packed is not None and (state.packed != packed or (packed and state.alignment != alignment)):
            have = f"EXPERT_PACKED (alignment {state.alignment})" if state.packed else "the mode's default layout"
            want = f"EXPERT_PACKED (alignment {alignment})" if packed else "the mode's default layout"
            raise ValueError(
                f"epcomm.torch.Buffer: slot {slot}'s handle has {have}, but this call needs {want}; "
                "use another slot for each layout"
            )
        return state

    def rows(self, slot: int = 0) -> int:
        """High-throughput: the first dimension of every [rows, ...] output (capacity
        sizing: nranks * max_tokens_per_rank on the flat layout; an EXPERT_PACKED slot
        holds the most rows its routing can produce, alignment padding included)."""
        return self._slot(slot).rows

    def _empty(self, shape: Sequence[int], dtype: Any) -> Any:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _run(self, function: str, address: int, argument: int) -> None:
        with self.group._calls:  # noqa: SLF001
            self._functions[function](address, argument, _current_stream(self.device_index))

    def _fill(self, args: Args, name: str, tensor: Any, dtypes: FrozenSet[Any], function: str) -> None:
        code = check(tensor, name, self.device_index, dtypes, function)
        args.tensors[name].fill(tensor.data_ptr(), code, tensor.shape)

    def _route(self, state: _Slot, topk_idx: Any, function: str) -> None:
        self._fill(state.routing, "topk_idx", topk_idx, _INDEX, function)
        self._run(_UPDATE, state.address, state.routing.address)

    # -- low latency ------------------------------------------------------------------------

    def ll_dispatch(
        self,
        x: Any,
        topk_idx: Any,
        topk_weights: Any = None,
        *,
        out_x: Any = None,
        out_expert_counts: Any = None,
        slot: int = 0,
        max_step_tokens: int = 0,
    ) -> Tuple[Any, Any]:
        """Route (topk_idx [B, K] int32/int64, -1 masks an entry) and dispatch x [B, H]
        bf16/fp16 with topk_weights [B, K] float32, which ll_combine weights the rows by
        (None: weights at combine only, ll_combine(home_topk_weights=) on a Buffer with
        GroupFlags.COMBINE_PER_ENTRY); returns (out_x [L, R*T, H] in x's dtype,
        out_expert_counts [L] int32). max_step_tokens (ABI 2.2): the most tokens any
        rank dispatches in this step, the same on every rank (0: max_tokens_per_rank); a
        small bound lets a group of one node move the step as line records. Collective; on
        the current stream."""
        info = self.info
        if out_x is None:
            out_x = self._empty((info.local_experts, info.nranks * info.max_tokens_per_rank, info.hidden), _dtype_of(x))
        if out_expert_counts is None:
            out_expert_counts = self._empty((info.local_experts,), torch.int32)
        if torch.compiler.is_compiling():
            torch.ops.epcomm.ll_dispatch(
                self.id, slot, x, topk_idx, topk_weights, out_x, out_expert_counts, max_step_tokens
            )
        else:
            self._ll_dispatch(slot, x, topk_idx, topk_weights, out_x, out_expert_counts, max_step_tokens)
        return out_x, out_expert_counts

    def _ll_dispatch(
        self, slot: int, x: Any, topk_idx: Any, topk_weights: Any, out_x: Any, counts: Any, max_step_tokens: int
    ) -> None:
        state = self._slot(slot)
        function = "ll_dispatch"
        args = state.ll_dispatch
        args.struct.max_step_tokens = max_step_tokens
        self._fill(args, "x", x, _TOKENS, function)
        args.present("topk_weights", topk_weights is not None)
        if topk_weights is not None:
            self._fill(args, "topk_weights", topk_weights, _FP32, function)
        self._fill(args, "out_x", out_x, _TOKENS, function)
        self._fill(args, "out_expert_counts", counts, _INT32, function)
        self._route(state, topk_idx, function)
        self._run("epc_dispatch", state.address, args.address)

    def ll_combine(
        self, x: Any, topk_idx: Any, *, out: Any = None, slot: int = 0, home_topk_weights: Any = None
    ) -> Any:
        """Combine the expert outputs x [L, R*T, H] bf16 of the slot's last dispatch into
        out [B, H] (bf16 default, fp16, fp32; B = topk_idx.shape[0]), each token's rows
        weighted by its dispatch's topk_weights. home_topk_weights [B, K] float32 (a Buffer
        created with flags=GroupFlags.COMBINE_PER_ENTRY, any number of nodes): the weights given
        here, not dispatch's, as in ht_combine (Weighting.HOME). Collective; on the current
        stream."""
        if out is None:
            out = self._empty((_first_dim(topk_idx, "topk_idx", "ll_combine"), self.info.hidden), torch.bfloat16)
        if home_topk_weights is not None:
            self._call_combine_home(slot, x, home_topk_weights, out)
            return out
        if torch.compiler.is_compiling():
            torch.ops.epcomm.combine(self.id, slot, x, out)
        else:
            self._combine(slot, x, out)
        return out

    def _combine(self, slot: int, x: Any, out: Any) -> None:
        state = self._slot(slot)
        args = state.combine
        self._fill(args, "x", x, _BF16, "combine")
        self._fill(args, "out", out, _OUT, "combine")
        self._run("epc_combine", state.address, args.address)

    # -- high throughput --------------------------------------------------------------------

    def ht_dispatch(
        self,
        x: Any,
        topk_idx: Any,
        topk_weights: Any,
        *,
        out_x: Any = None,
        out_topk_idx: Any = None,
        out_topk_weights: Any = None,
        out_expert_counts: Any = None,
        out_num_recv: Any = None,
        slot: int = 0,
    ) -> Tuple[Any, Any, Any, Any, Any]:
        """Route (collective: the layout is exchanged) and dispatch x [B, H] bf16/fp16 with
        topk_weights [B, K] float32 on the FLAT layout with capacity sizing. Returns
        (out_x [rows, H], out_topk_idx [rows, K] int32 local expert ids or -1,
        out_topk_weights [rows, K] float32, out_expert_counts [L] int32, out_num_recv [1]
        int32); rows = self.rows(slot); rows at or past out_num_recv are unspecified."""
        _first_dim(topk_idx, "topk_idx", "ht_dispatch")
        rows, k = self.rows(slot), int(topk_idx.shape[-1])
        if out_x is None:
            out_x = self._empty((rows, self.info.hidden), _dtype_of(x))
        if out_topk_idx is None:
            out_topk_idx = self._empty((rows, k), torch.int32)
        if out_topk_weights is None:
            out_topk_weights = self._empty((rows, k), torch.float32)
        if out_expert_counts is None:
            out_expert_counts = self._empty((self.info.local_experts,), torch.int32)
        if out_num_recv is None:
            out_num_recv = self._empty((1,), torch.int32)
        outs = (out_x, out_topk_idx, out_topk_weights, out_expert_counts, out_num_recv)
        if torch.compiler.is_compiling():
            torch.ops.epcomm.ht_dispatch(self.id, slot, x, topk_idx, topk_weights, *outs)
        else:
            self._ht_dispatch(slot, x, topk_idx, topk_weights, *outs)
        return outs

    def _ht_dispatch(self, slot: int, x: Any, topk_idx: Any, topk_weights: Any, *outs: Any) -> None:
        state = self._slot(slot, packed=False)
        function = "ht_dispatch"
        args = state.ht_dispatch
        self._fill(args, "x", x, _TOKENS, function)
        self._fill(args, "topk_weights", topk_weights, _FP32, function)
        for name, tensor, dtypes in zip(
            ("out_x", "out_topk_idx", "out_topk_weights", "out_expert_counts", "out_num_recv"),
            outs,
            (_TOKENS, _INT32, _FP32, _INT32, _INT32),
        ):
            self._fill(args, name, tensor, dtypes, function)
        self._route(state, topk_idx, function)
        self._run("epc_dispatch", state.address, args.address)

    def ht_dispatch_packed(
        self,
        x: Any,
        topk_idx: Any,
        topk_weights: Any,
        *,
        alignment: int = 1,
        out_x: Any = None,
        out_expert_counts: Any = None,
        out_expert_offsets: Any = None,
        slot: int = 0,
    ) -> Tuple[Any, Any, Any]:
        """Route (collective) and dispatch x [B, H] bf16/fp16 with topk_weights [B, K]
        float32 on the EXPERT_PACKED layout: the rows of local expert l are out_x[off[l] :
        off[l] + counts[l]], one per (token, entry) naming it, ordered by (source rank, source
        token, top-k slot); zones start at multiples of `alignment`, so a grouped GEMM runs
        on them as they are. Returns (out_x [rows, H], out_expert_counts [L] int32,
        out_expert_offsets [L + 1] int32; the last offset is the rows in use). The slot's
        handle is created EXPERT_PACKED with `alignment` at its first use; ht_combine on the
        slot then weights each row by its entry's topk_weights on the expert's rank.
        High-throughput groups of one node; collective; on the current stream."""
        state = self._slot(slot, packed=True, alignment=alignment)
        if out_x is None:
            out_x = self._empty((state.rows, self.info.hidden), _dtype_of(x))
        if out_expert_counts is None:
            out_expert_counts = self._empty((self.info.local_experts,), torch.int32)
        if out_expert_offsets is None:
            out_expert_offsets = self._empty((self.info.local_experts + 1,), torch.int32)
        outs = (out_x, out_expert_counts, out_expert_offsets)
        if torch.compiler.is_compiling():
            torch.ops.epcomm.ht_dispatch_packed(self.id, slot, alignment, x, topk_idx, topk_weights, *outs)
        else:
            self._ht_dispatch_packed(slot, alignment, x, topk_idx, topk_weights, *outs)
        return outs

    def _ht_dispatch_packed(
        self, slot: int, alignment: int, x: Any, topk_idx: Any, topk_weights: Any, *outs: Any
    ) -> None:
        state = self._slot(slot, packed=True, alignment=alignment)
        function = "ht_dispatch_packed"
        args = state.packed_dispatch
        self._fill(args, "x", x, _TOKENS, function)
        self._fill(args, "topk_weights", topk_weights, _FP32, function)
        for name, tensor, dtypes in zip(
            ("out_x", "out_expert_counts", "out_expert_offsets"), outs, (_TOKENS, _INT32, _INT32)
        ):
            self._fill(args, name, tensor, dtypes, function)
        self._route(state, topk_idx, function)
        self._run("epc_dispatch", state.address, args.address)

    def ht_dispatch_rows(self, x: Any, *, out_x: Any = None, slot: int = 0) -> Any:
        """Dispatch x [B, H] on the slot's current layout, without routing again or sending
        weights (the backward of ht_combine). Returns out_x [rows, H]."""
        if out_x is None:
            out_x = self._empty((self.rows(slot), self.info.hidden), _dtype_of(x))
        if torch.compiler.is_compiling():
            torch.ops.epcomm.dispatch_rows(self.id, slot, x, out_x)
        else:
            self._dispatch_rows(slot, x, out_x)
        return out_x

    def _dispatch_rows(self, slot: int, x: Any, out_x: Any) -> None:
        state = self._slot(slot)
        args = state.rows_dispatch
        self._fill(args, "x", x, _TOKENS, "ht_dispatch_rows")
        self._fill(args, "out_x", out_x, _TOKENS, "ht_dispatch_rows")
        self._run("epc_dispatch", state.address, args.address)

    def ht_combine(
        self,
        x: Any,
        topk_idx: Any,
        *,
        out: Any = None,
        topk_weights: Any = None,
        out_topk_weights: Any = None,
        home_topk_weights: Any = None,
        slot: int = 0,
    ) -> Any:
        """Sum the rows x [rows, H] bf16 back to their tokens: out [B, H] (bf16 default,
        fp16, fp32; B = topk_idx.shape[0]). With topk_weights [rows, K] float32 (the
        gradients of dispatch's out_topk_weights) also writes out_topk_weights [B, K]
        float32 (allocated when None) and returns (out, out_topk_weights).
        home_topk_weights [B, K] float32 (an expert-packed slot of a Buffer created with
        flags=GroupFlags.COMBINE_PER_ENTRY; not with topk_weights): the weights given here,
        not dispatch's: every (token, entry) row comes back and out is the float32 sum of
        home_topk_weights[t, k] * row in top-k order, rounded once (Weighting.HOME)."""
        if out is None:
            out = self._empty((_first_dim(topk_idx, "topk_idx", "ht_combine"), self.info.hidden), torch.bfloat16)
        if home_topk_weights is not None:
            if topk_weights is not None:
                raise ValueError("ht_combine: home_topk_weights goes without topk_weights (no backward weights)")
            self._call_combine_home(slot, x, home_topk_weights, out)
            return out
        if topk_weights is None:
            if torch.compiler.is_compiling():
                torch.ops.epcomm.combine(self.id, slot, x, out)
            else:
                self._combine(slot, x, out)
            return out
        if out_topk_weights is None:
            out_topk_weights = self._empty(tuple(topk_idx.shape), torch.float32)
        if torch.compiler.is_compiling():
            torch.ops.epcomm.combine_weights(self.id, slot, x, topk_weights, out, out_topk_weights)
        else:
            self._combine_weights(slot, x, topk_weights, out, out_topk_weights)
        return out, out_topk_weights

    def _combine_weights(self, slot: int, x: Any, topk_weights: Any, out: Any, out_topk_weights: Any) -> None:
        state = self._slot(slot)
        args = state.combine_weights
        self._fill(args, "x", x, _BF16, "ht_combine")
        self._fill(args, "topk_weights", topk_weights, _FP32, "ht_combine")
        self._fill(args, "out", out, _OUT, "ht_combine")
        self._fill(args, "out_topk_weights", out_topk_weights, _FP32, "ht_combine")
        self._run("epc_combine", state.address, args.address)

    def _call_combine_home(self, slot: int, x: Any, home_topk_weights: Any, out: Any) -> None:
        """ll_combine's and ht_combine's Weighting.HOME: the custom op under torch.compile."""
        if torch.compiler.is_compiling():
            torch.ops.epcomm.combine_home(self.id, slot, x, home_topk_weights, out)
        else:
            self._combine_home(slot, x, home_topk_weights, out)

    def _combine_home(self, slot: int, x: Any, home_topk_weights: Any, out: Any) -> None:
        state = self._slot(slot)
        args = state.combine_home
        function = "ll_combine" if self.mode == Mode.LOW_LATENCY else "ht_combine"
        self._fill(args, "x", x, _BF16, function)
        self._fill(args, "home_topk_weights", home_topk_weights, _FP32, function)
        self._fill(args, "out", out, _OUT, function)
        self._run("epc_combine", state.address, args.address)

    # -- autograd ---------------------------------------------------------------------------

    def dispatch_autograd(self, x: Any, topk_idx: Any, topk_weights: Any, *, slot: int = 0) -> Tuple[Any, ...]:
        """ht_dispatch with gradients for x and topk_weights: its backward is an ht_combine
        of the rows' gradients (and of out_topk_weights' gradients) on the same slot."""
        result: Tuple[Any, ...] = _HtDispatch.apply(self.id, slot, x, topk_idx, topk_weights)
        return result

    def combine_autograd(self, x: Any, topk_idx: Any, *, slot: int = 0) -> Any:
        """ht_combine into bf16 with a gradient for x: its backward is ht_dispatch_rows of the
        output's gradient on the same slot."""
        return _HtCombine.apply(self.id, slot, x, topk_idx)

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.group is None or self.group.closed

    def close(self) -> None:
        """Destroy the handles, the group and an owned communicator. Collective; blocking."""
        _buffers.pop(getattr(self, "id", -1), None)
        with torch.cuda.device(self.device):
            for state in self._slots.values():
                state.handle.close()
            self._slots.clear()
            if self.group is not None:
                self.group.close()
            if self.comm is not None:
                self.comm.close()

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"epcomm.torch.Buffer(rank {self.rank}/{self.nranks}, cuda:{self.device_index}, {self.mode!r})"


def _loaded_nccl() -> FrozenSet[str]:
    files = set()
    with open("/proc/self/maps") as maps:
        for entry in maps:
            path = entry.split()[-1] if "/" in entry else ""
            if os.path.basename(path).startswith("libnccl"):
                files.add(os.path.realpath(path))
    return frozenset(files)


def _nccl_version(path: str) -> Tuple[int, ...]:
    import ctypes

    code = ctypes.c_int(0)
    if ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code)) != 0:
        return ()
    value = code.value
    return (value // 10000, value // 100 % 100, value % 100)


# -- custom ops: what torch.compile sees ------------------------------------------------------


def _ll_dispatch_op(
    buffer: int, slot: int, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: Optional[torch.Tensor],
    out_x: torch.Tensor, out_expert_counts: torch.Tensor, max_step_tokens: int,
) -> None:  # fmt: skip
    _buffers[buffer]._ll_dispatch(slot, x, topk_idx, topk_weights, out_x, out_expert_counts, max_step_tokens)  # noqa: SLF001


def _ht_dispatch_op(
    buffer: int, slot: int, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
    out_x: torch.Tensor, out_topk_idx: torch.Tensor, out_topk_weights: torch.Tensor,
    out_expert_counts: torch.Tensor, out_num_recv: torch.Tensor,
) -> None:  # fmt: skip
    _buffers[buffer]._ht_dispatch(  # noqa: SLF001
        slot, x, topk_idx, topk_weights, out_x, out_topk_idx, out_topk_weights, out_expert_counts, out_num_recv
    )


def _ht_dispatch_packed_op(
    buffer: int, slot: int, alignment: int, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
    out_x: torch.Tensor, out_expert_counts: torch.Tensor, out_expert_offsets: torch.Tensor,
) -> None:  # fmt: skip
    _buffers[buffer]._ht_dispatch_packed(  # noqa: SLF001
        slot, alignment, x, topk_idx, topk_weights, out_x, out_expert_counts, out_expert_offsets
    )


def _dispatch_rows_op(buffer: int, slot: int, x: torch.Tensor, out_x: torch.Tensor) -> None:
    _buffers[buffer]._dispatch_rows(slot, x, out_x)  # noqa: SLF001


def _combine_op(buffer: int, slot: int, x: torch.Tensor, out: torch.Tensor) -> None:
    _buffers[buffer]._combine(slot, x, out)  # noqa: SLF001


def _combine_weights_op(
    buffer: int, slot: int, x: torch.Tensor, topk_weights: torch.Tensor, out: torch.Tensor,
    out_topk_weights: torch.Tensor,
) -> None:  # fmt: skip
    _buffers[buffer]._combine_weights(slot, x, topk_weights, out, out_topk_weights)  # noqa: SLF001


def _combine_home_op(
    buffer: int, slot: int, x: torch.Tensor, home_topk_weights: torch.Tensor, out: torch.Tensor
) -> None:  # fmt: skip
    _buffers[buffer]._combine_home(slot, x, home_topk_weights, out)  # noqa: SLF001


def _nothing(*args: Any) -> None:
    return None


OPS: Dict[str, Any] = {}
for _op_name, _function, _mutated in (
    ("ll_dispatch", _ll_dispatch_op, ("out_x", "out_expert_counts")),
    (
        "ht_dispatch",
        _ht_dispatch_op,
        ("out_x", "out_topk_idx", "out_topk_weights", "out_expert_counts", "out_num_recv"),
    ),
    ("ht_dispatch_packed", _ht_dispatch_packed_op, ("out_x", "out_expert_counts", "out_expert_offsets")),
    ("dispatch_rows", _dispatch_rows_op, ("out_x",)),
    ("combine", _combine_op, ("out",)),
    ("combine_weights", _combine_weights_op, ("out", "out_topk_weights")),
    ("combine_home", _combine_home_op, ("out",)),
):
    _op = torch.library.custom_op(f"epcomm::{_op_name}", _function, mutates_args=_mutated)
    _op.register_fake(_nothing)
    OPS[_op_name] = _op


# -- autograd ----------------------------------------------------------------------------------


class _HtDispatch(torch.autograd.Function):  # type: ignore[misc]
    """Forward: ht_dispatch. Backward: the gradient of a dispatch is a combine (with the
    received weights' gradients going home as the weights' gradient)."""

    @staticmethod
    def forward(ctx: Any, buffer: int, slot: int, x: Any, topk_idx: Any, topk_weights: Any) -> Tuple[Any, ...]:
        outs = _buffers[buffer].ht_dispatch(x, topk_idx, topk_weights, slot=slot)
        ctx.buffer, ctx.slot, ctx.x_dtype = buffer, slot, x.dtype
        ctx.save_for_backward(topk_idx)
        ctx.mark_non_differentiable(outs[1], outs[3], outs[4])
        return outs

    @staticmethod
    def backward(ctx: Any, grad_x: Any, _idx: Any, grad_w: Any, _counts: Any, _num: Any) -> Tuple[Any, ...]:
        buffer = _buffers[ctx.buffer]
        (topk_idx,) = ctx.saved_tensors
        rows = buffer.rows(ctx.slot)
        if grad_x is None:
            grad_x = torch.zeros((rows, buffer.info.hidden), dtype=torch.bfloat16, device=buffer.device)
        if grad_w is None:
            grad_w = torch.zeros((rows, topk_idx.shape[1]), dtype=torch.float32, device=buffer.device)
        out = torch.empty((topk_idx.shape[0], buffer.info.hidden), dtype=ctx.x_dtype, device=buffer.device)
        out, out_w = buffer.ht_combine(
            grad_x.to(torch.bfloat16).contiguous(), topk_idx, out=out, topk_weights=grad_w.contiguous(), slot=ctx.slot
        )
        return None, None, out, None, out_w


class _HtCombine(torch.autograd.Function):  # type: ignore[misc]
    """Forward: ht_combine into bf16. Backward: the gradient of a combine is a dispatch of
    the output's gradient on the same layout."""

    @staticmethod
    def forward(ctx: Any, buffer: int, slot: int, x: Any, topk_idx: Any) -> Any:
        ctx.buffer, ctx.slot, ctx.x_dtype = buffer, slot, x.dtype
        return _buffers[buffer].ht_combine(x, topk_idx, slot=slot)

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Tuple[Any, ...]:
        buffer = _buffers[ctx.buffer]
        grad_x = buffer.ht_dispatch_rows(grad_out.to(ctx.x_dtype).contiguous(), slot=ctx.slot)
        return None, None, grad_x, None
