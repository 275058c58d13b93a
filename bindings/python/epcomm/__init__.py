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
            with epcomm.Handle.create(g) as h:                     # before graph capture
                h.update(topk_idx)                                 # torch/CuPy/... tensors
                h.dispatch(x, out_x=out_x, topk_weights=topk_weights,
                           out_expert_counts=out_counts)           # collective
                h.combine(expert_out, out=out)                     # collective

One Handle type serves both modes: on a high-throughput group
(GroupConfig(mode=Mode.HIGH_THROUGHPUT, ...)) `Handle.create(g, sizing=Sizing.EXACT,
routing=topk_idx)` is collective and `h.rows` is the rows received. Keyword arguments are
the C structs' fields by name; stream=None takes the current torch or CuPy stream of the
tensors (stream=0 is the legacy default stream). `python -m epcomm` prints what the package
finds (library, ABI, NCCL, GPUs, torch) and says what is missing.
"""

from ._ffi import EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH

# The package's version is the header's ABI version (the wheel's, through Meson's project()).
__version__ = f"{EPC_ABI_MAJOR}.{EPC_ABI_MINOR}.{EPC_ABI_PATCH}"
from ._library import (
    BINDING_VERSION,
    ENV_LIBRARY,
    Library,
    find_library,
    Version,
    api_table,
    last_error,
    load_library,
    status_string,
    version,
)
from .bootstrap import Comm, UniqueId
from .config import GroupConfig
from .enums import (
    Dtype,
    GroupFlags,
    HandleFlags,
    Layout,
    Mode,
    Overflow,
    Pending,
    Quant,
    RegionKind,
    ScaleLayout,
    Sizing,
    Weighting,
    parse_dtype,
)
from .errors import CapacityError, EpcError, InvalidTensorError, InvalidUsageError, Status, StreamRequiredError
from .group import Group, GroupInfo
from .handle import Handle, HandleInfo, Routing
from .plan import Plan, PlanRegion, plan_query
from .tensor import EpcTensor, as_tensor, tensor_from_pointer

__all__ = [
    "__version__",
    "find_library",
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
    "GroupFlags",
    "HandleFlags",
    "Layout",
    "Mode",
    "Overflow",
    "Pending",
    "Quant",
    "RegionKind",
    "ScaleLayout",
    "Sizing",
    "Weighting",
    "parse_dtype",
    "CapacityError",
    "EpcError",
    "InvalidTensorError",
    "InvalidUsageError",
    "Status",
    "StreamRequiredError",
    "Group",
    "GroupInfo",
    "Handle",
    "HandleInfo",
    "Routing",
    "Plan",
    "PlanRegion",
    "plan_query",
    "EpcTensor",
    "as_tensor",
    "tensor_from_pointer",
]
