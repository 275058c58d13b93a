# SPDX-License-Identifier: Apache-2.0
"""HtHandle: the routing and layout of one batch on a high-throughput group (ABI 1.2), and
the calls that use it: dispatch and combine, forward and backward, and update."""

import ctypes
from typing import Any, Union

from . import _ffi
from .enums import HtSizing, known_or_int
from .handle import HandleBase

# The tensors of epc_ht_dispatch that may be NULL.
_DISPATCH_OPTIONAL = frozenset(
    {"x_scales", "topk_weights", "out_scales", "out_topk_idx", "out_topk_weights", "out_expert_counts", "out_num_recv"}
)


def parse_sizing(value: Union[HtSizing, int, str]) -> int:
    """An EpcHtSizing from an HtSizing, an int code or a name ("exact", "capacity")."""
    if isinstance(value, str):
        try:
            return HtSizing[value.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown sizing {value!r}; expected one of {', '.join(m.name.lower() for m in HtSizing)}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"sizing must be an HtSizing, an int or a name, not {type(value).__name__}")
    return int(value)


class HtHandle(HandleBase):
    """One batch's routing on a high-throughput group (an EpcHandle* from
    epc_ht_handle_create) and its layout: which tokens go to which rank, and at which of
    the `rows` they land there. Every dispatch and combine on it, forward and backward,
    reuses that layout.

    Create it with HtHandle.create(group, topk_idx, sizing=...); `rows` is the row count of
    every [rows, ...] tensor its calls take. Lifetime, tensors, streams and threads as for
    Handle: close it (or leave its `with` block) before closing the group; the handle holds
    its latest call's tensors until its next call or close(); garbage collection never
    destroys it.
    """

    def __init__(self, pointer: "ctypes._Pointer", group: Any, rows: int, sizing: Union[HtSizing, int]):
        super().__init__(pointer, group)
        self._rows = rows
        self._sizing = known_or_int(HtSizing, sizing)

    @classmethod
    def create(
        cls, group: Any, topk_idx: Any, sizing: Union[HtSizing, int, str] = HtSizing.EXACT, stream: Any = None
    ) -> "HtHandle":
        """A handle on the high-throughput `group` for the routing `topk_idx`
        (epc_ht_handle_create): copy it ([B, K] int64 or int32 expert ids, -1 masking an
        entry; B <= max_tokens_per_rank, K <= max_topk), compute on the GPU which tokens go
        to which rank and where they land there, and exchange those counts with every rank.

        `sizing` (HtSizing, or "exact" / "capacity") decides `rows`: EXACT gives N, the
        tokens this rank receives, and synchronises `stream` once to learn it; CAPACITY
        gives nranks * max_tokens_per_rank without a host synchronisation. A low-latency
        group refuses it (its handles are Handles). Collective over the group's ranks;
        stream-ordered (blocking with EXACT); not graph-capturable (it allocates)."""
        code = parse_sizing(sizing)
        rows = ctypes.c_int64(0)
        pointer = cls._create(
            "epc_ht_handle_create",
            group,
            topk_idx,
            stream,
            before_stream=[_ffi.EpcHtSizing(code)],
            after_out=[ctypes.byref(rows)],
        )
        return cls(pointer, group, rows.value, code)

    @property
    def rows(self) -> int:
        """Rows of every [rows, ...] tensor: N with EXACT sizing, nranks *
        max_tokens_per_rank with CAPACITY (rows at or past N are then left unspecified; N
        is on the device, see dispatch's out_num_recv)."""
        return self._rows

    @property
    def sizing(self) -> Union[HtSizing, int]:
        return self._sizing

    def update(self, topk_idx: Any, stream: Any = None) -> None:
        """Replace the routing with `topk_idx` and recompute the layout
        (epc_handle_update): same rules as create(); B may change, K may not. Only
        CAPACITY handles accept it (an EXACT handle's row count would change: create a new
        handle instead). No allocation, no host synchronisation (graph-capturable).
        Collective (the layout is exchanged); stream-ordered."""
        self._run("epc_handle_update", [("topk_idx", topk_idx)], stream)

    def dispatch(
        self,
        x: Any,
        out_x: Any,
        *,
        x_scales: Any = None,
        out_scales: Any = None,
        topk_weights: Any = None,
        out_topk_weights: Any = None,
        out_topk_idx: Any = None,
        out_expert_counts: Any = None,
        out_num_recv: Any = None,
        stream: Any = None,
    ) -> None:
        """Send each of this rank's tokens once to every rank hosting one of its unmasked
        entries and receive this rank's N tokens (epc_ht_dispatch). The keyword tensors are
        optional (None: not passed):

        x [B, H] in the group's 16-bit dtype (bfloat16 or float16), or fp8_e4m3 with
        x_scales [B, H/128] float32 (quantized by the caller, copied unchanged; H % 128 ==
        0); out_x [rows, H], x's dtype: the received tokens ordered by (source rank, source
        token); out_scales [rows, H/128] float32 with fp8 x. topk_weights [B, K] float32
        and out_topk_weights [rows, K] float32, both or neither: the weight of entry k
        where its expert lives on this rank, else 0. out_topk_idx [rows, K] int32: the local
        expert id of entry k where local, else -1. out_expert_counts [L] int32: received
        (token, entry) pairs per local expert. out_num_recv [1] int32: N.

        The gradient of a combine is this call with the combine's output gradient as x.
        Collective over the group's ranks; stream-ordered; graph-capturable."""
        self._run(
            "epc_ht_dispatch",
            [
                ("x", x),
                ("x_scales", x_scales),
                ("topk_weights", topk_weights),
                ("out_x", out_x),
                ("out_scales", out_scales),
                ("out_topk_idx", out_topk_idx),
                ("out_topk_weights", out_topk_weights),
                ("out_expert_counts", out_expert_counts),
                ("out_num_recv", out_num_recv),
            ],
            stream,
            _ffi.EpcFlags(0),
            optional=_DISPATCH_OPTIONAL,
        )

    def combine(
        self, x: Any, out: Any, *, topk_weights: Any = None, out_topk_weights: Any = None, stream: Any = None
    ) -> None:
        """Return the rows to their tokens' ranks and sum them there (epc_ht_combine).

        x [rows, H] bfloat16 in dispatch's row order (the caller has already weighted and
        summed its local experts' outputs); out [B, H] bfloat16: per token, the float32 sum
        over the ranks that received it, in ascending rank order, rounded once; tokens sent
        nowhere get zeros. x must not overlap out.

        Backward weights: passing topk_weights [rows, K] float32 and out_topk_weights
        [B, K] float32 sets EPC_FLAG_BACKWARD_WEIGHTS: entry k of a token takes the value
        the rank hosting entry k's expert holds for it (0 where masked). The gradient of a
        dispatch is this call with the row gradients as x. Collective; stream-ordered;
        graph-capturable."""
        backward = topk_weights is not None or out_topk_weights is not None
        flags = _ffi.EPC_FLAG_BACKWARD_WEIGHTS if backward else 0
        self._run(
            "epc_ht_combine",
            [("x", x), ("topk_weights", topk_weights), ("out", out), ("out_topk_weights", out_topk_weights)],
            stream,
            _ffi.EpcFlags(flags),
            optional=() if backward else ("topk_weights", "out_topk_weights"),
        )
