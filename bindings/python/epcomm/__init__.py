# SPDX-License-Identifier: Apache-2.0
"""epcomm: Mixture-of-Experts expert-parallel communication on NCCL's Device API.

Pure-ctypes bindings of libepcomm's C ABI (capi/include/epcomm/epcomm.h). Importing this
package needs only the standard library and loads nothing; the shared library is loaded on
first use from $EPCOMM_LIB, else by its SONAME (libepcomm.so.<major>), and must have the
ABI major these bindings were generated for.

Every function and method says, as the header does, whether it is collective (every rank
calls it, in the same order) or local, and whether it blocks. Failures raise EpcError
with the library's status and its per-thread detail message.

    uid = epcomm.UniqueId.create()                      # on one process; share uid.hex()
    with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm:
        with epcomm.Group.create(comm, epcomm.GroupConfig(num_experts=64, hidden=7168)) as g:
            g.barrier()
            print(g.info())
            with epcomm.Handle.create(g, topk_idx) as h:           # torch/CuPy/... tensors
                h.ll_dispatch(x, topk_weights, out_x, out_counts)  # collective
                h.ll_combine(expert_out, out)                      # collective

On a high-throughput group (GroupConfig(mode=Mode.HIGH_THROUGHPUT, ...)) handles are
HtHandles: `HtHandle.create(g, topk_idx, sizing=HtSizing.EXACT)` (collective), then
`h.dispatch(x, out_x, ...)` and `h.combine(y, out, ...)` with `h.rows` received rows.
"""

from ._ffi import EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH
from ._library import (
    BINDING_VERSION,
    ENV_LIBRARY,
    Library,
    Version,
    api_table,
    last_error,
    load_library,
    status_string,
    version,
)
from .bootstrap import Comm, UniqueId
from .config import GroupConfig
from .enums import Dtype, HtSizing, Mode, RegionKind, parse_dtype
from .errors import EpcError, InvalidTensorError, Status
from .group import Group, GroupInfo
from .handle import Handle
from .ht_handle import HtHandle
from .plan import Plan, PlanRegion, plan_query
from .tensor import EpcTensor, as_tensor, tensor_from_pointer

__all__ = [
    "EPC_ABI_MAJOR",
    "EPC_ABI_MINOR",
    "EPC_ABI_PATCH",
    "BINDING_VERSION",
    "ENV_LIBRARY",
    "Library",
    "Version",
    "api_table",
    "last_error",
    "load_library",
    "status_string",
    "version",
    "Comm",
    "UniqueId",
    "GroupConfig",
    "Dtype",
    "HtSizing",
    "Mode",
    "RegionKind",
    "parse_dtype",
    "EpcError",
    "InvalidTensorError",
    "Status",
    "Group",
    "GroupInfo",
    "Handle",
    "HtHandle",
    "Plan",
    "PlanRegion",
    "plan_query",
    "EpcTensor",
    "as_tensor",
    "tensor_from_pointer",
]
