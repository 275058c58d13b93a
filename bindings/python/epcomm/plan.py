# SPDX-License-Identifier: Apache-2.0
"""plan_query: what a configuration costs, computed on the CPU before any GPU work."""

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from . import _ffi
from ._library import call
from .config import GroupConfig
from .enums import Mode, RegionKind, known_or_int


@dataclass(frozen=True)
class PlanRegion:
    """One region of a group's symmetric window (EpcPlanRegion)."""

    kind: Union[RegionKind, int]
    slot: Optional[int]  # double-buffer slot (0 or 1); None when not per slot
    offset: int  # bytes from the start of the window
    size: int  # bytes
    name: str  # e.g. "dispatch_recv[1]"


@dataclass(frozen=True)
class Plan:
    """The byte layout and resources a configuration needs on every rank (EpcPlan)."""

    mode: Union[Mode, int]
    num_slots: int
    symmetric_bytes: int  # per rank: the registered window
    workspace_bytes: int  # per rank: ordinary device memory beside it
    handle_bytes: int  # device memory one handle with the default handle config holds
    recv_capacity: int  # tokens per rank the receive window holds, after defaults
    num_sms: int
    warps_per_block: int
    lsa_barriers: int
    gin_contexts: int
    gin_signals: int
    message_bytes: int  # bytes one token occupies in a dispatch receive buffer
    max_token_bytes: int  # after defaults and rounding
    max_pending_steps: int  # after defaults
    regions: Tuple[PlanRegion, ...]

    def region(self, name: str) -> PlanRegion:
        """The region called `name` (KeyError if there is none)."""
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"no region {name!r}; the plan has {[r.name for r in self.regions]}")


# EpcPlan fields Plan represents other than by a field of the same name.
_PLAN_STRUCTURAL_FIELDS = ("struct_size", "abi_version", "num_regions", "regions")


def unexposed_struct_fields() -> List[str]:
    """EpcPlan fields Plan does not carry (besides the struct header, reserved fields and the
    region array): empty unless the header grew and this module was not updated."""
    exposed = {f.name for f in dataclasses.fields(Plan)}
    return [
        name
        for name in (f[0] for f in _ffi.EpcPlan._fields_)
        if name not in exposed and name not in _PLAN_STRUCTURAL_FIELDS and not name.startswith("reserved")
    ]


def _region(struct: "_ffi.EpcPlanRegion") -> PlanRegion:
    slot = None if struct.slot == _ffi.EPC_SLOT_NONE else int(struct.slot)
    return PlanRegion(
        kind=known_or_int(RegionKind, struct.kind),
        slot=slot,
        offset=int(struct.offset),
        size=int(struct.size),
        name=struct.name.decode("utf-8", errors="replace"),
    )


def plan_from_struct(struct: "_ffi.EpcPlan") -> Plan:
    count = min(int(struct.num_regions), len(struct.regions))
    values = {f.name: getattr(struct, f.name) for f in dataclasses.fields(Plan) if f.name != "regions"}
    values["mode"] = known_or_int(Mode, values["mode"])
    return Plan(regions=tuple(_region(struct.regions[i]) for i in range(count)), **values)


def plan_query(
    config: Union[GroupConfig, "_ffi.EpcGroupConfig"],
    nranks: int,
    lsa_size: Optional[int] = None,
    num_nodes: Optional[int] = None,
) -> Plan:
    """The layout `config` needs on `nranks` ranks whose NVLink (LSA) domains hold
    `lsa_size` ranks each (default: all of them) on `num_nodes` nodes (default: one per
    NVLink domain, nranks / lsa_size, as the library requires) (epc_plan_query).

    Validates `config` exactly as Group.create does, so a bad config raises the same
    EpcError here, without a GPU. With config.virtual_node_size set, `lsa_size` is the
    NVLink team that the virtual nodes split. Local, blocking (pure CPU), thread-safe.
    """
    struct = config.to_struct() if isinstance(config, GroupConfig) else config
    if not isinstance(struct, _ffi.EpcGroupConfig):
        raise TypeError(f"config must be a GroupConfig, not {type(config).__name__}")
    lsa = int(nranks if lsa_size is None else lsa_size)
    if num_nodes is None:  # a size the library refuses gets its message, not ours
        num_nodes = -(-int(nranks) // lsa) if lsa > 0 else 1
    out = _ffi.EpcPlan()
    out.struct_size = ctypes.sizeof(out)
    out.abi_version = _ffi.EPC_ABI_VERSION
    call("epc_plan_query", ctypes.byref(struct), int(nranks), lsa, int(num_nodes), ctypes.byref(out))
    return plan_from_struct(out)
