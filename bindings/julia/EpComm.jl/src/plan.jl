# SPDX-License-Identifier: Apache-2.0
# The plan: the memory and resources a configuration needs, computed on the CPU.

"""
    PlanRegion

One region of a group's symmetric window: `kind` (`LibEpComm.EPC_REGION_*`), the
double-buffer `slot` (`nothing` when the region is not per slot), `offset` and `size` in
bytes, and its `name` (e.g. "dispatch_recv[1]").
"""
struct PlanRegion
    kind::EpcRegionKind
    slot::Union{Int,Nothing}
    offset::Int
    size::Int
    name::String
end

function PlanRegion(raw::EpcPlanRegion)
    slot = raw.slot == EPC_SLOT_NONE ? nothing : Int(raw.slot)
    return PlanRegion(raw.kind, slot, raw.offset, raw.size, c_string(raw.name))
end

"""
    Plan

What a configuration costs per rank (`EpcPlan`): `symmetric_bytes` of registered window and
`workspace_bytes` of other device memory, the device memory of one default handle
(`handle_bytes`), the receive capacity after defaults, the kernels' SM and warp budget, the NCCL barriers
and GIN resources requested, the bytes per dispatched token (`message_bytes`; `max_token_bytes` after rounding), the
pending send-only steps allowed, and the window's `regions`.
"""
struct Plan
    mode::EpcMode
    num_slots::Int
    symmetric_bytes::Int
    workspace_bytes::Int
    handle_bytes::Int
    recv_capacity::Int
    num_sms::Int
    warps_per_block::Int
    lsa_barriers::Int
    gin_contexts::Int
    gin_signals::Int
    message_bytes::Int
    max_token_bytes::Int
    max_pending_steps::Int
    regions::Vector{PlanRegion}
end

function Plan(raw::EpcPlan)
    n_regions = min(Int(raw.num_regions), length(raw.regions))
    regions = PlanRegion[PlanRegion(raw.regions[i]) for i in 1:n_regions]
    scalars = (getfield(raw, name) for name in fieldnames(Plan) if name !== :regions)
    return Plan(scalars..., regions)
end

"""
    plan_query(config; nranks, lsa_size = nranks, num_nodes = cld(nranks, lsa_size)) -> Plan

The layout `config` needs on `nranks` ranks in NVLink (LSA) domains of `lsa_size` ranks on
`num_nodes` nodes (`epc_plan_query`), without touching a GPU. Validates `config` exactly as
group creation does. With `config.virtual_node_size` set, `lsa_size` is the NVLink team that
the virtual nodes split. Local, blocking (pure CPU), thread-safe.
"""
function plan_query(config::GroupConfig; nranks::Integer, lsa_size::Integer = nranks,
                    num_nodes::Integer = cld(nranks, lsa_size))
    plan = Ref(extensible(EpcPlan))
    check(epc_plan_query(Ref(c_config(config)), nranks, lsa_size, num_nodes, plan), :epc_plan_query)
    return Plan(plan[])
end

function Base.show(io::IO, ::MIME"text/plain", plan::Plan)
    println(io, "Plan: ", plan.symmetric_bytes, " symmetric bytes, ", plan.workspace_bytes,
            " workspace bytes, ", plan.num_slots, " slot(s), ", plan.num_sms, " SMs")
    for region in plan.regions
        println(io, "  ", rpad(region.name, 20), " offset ", lpad(region.offset, 12),
                "  size ", lpad(region.size, 12))
    end
end
