# SPDX-License-Identifier: Apache-2.0
# Group configuration: what a group carries and how much room it reserves.

"""
    GroupConfig(; num_experts, hidden, mode = 0, max_tokens_per_rank = 0, max_topk = 0,
                  dtype = 0, num_sms = 0, timeout_ms = 0, virtual_node_size = 0,
                  alloc_fn = C_NULL, free_fn = C_NULL, alloc_ctx = C_NULL)

The configuration of a group (`EpcGroupConfig`). `num_experts` (divisible by the rank count)
and `hidden` (a multiple of 8) are required; every zero means the library's default:
`mode` low latency (`:low_latency`, or `:high_throughput`), `max_tokens_per_rank` 128 (LL)
or 4096 (HT), `max_topk` 8, `dtype` bf16 (a name or type as in `dtype_code`), `num_sms` 132
(LL) or 24 (HT), `timeout_ms` 10000. `alloc_fn`/`free_fn`/`alloc_ctx` are C function
pointers (e.g. from `@cfunction`) of a symmetric-memory allocator; set both or neither.

`virtual_node_size` (ABI 1.3) is a testing and tuning aid. 0: a node is an NVLink (LSA)
team. Otherwise every LSA team is split into virtual nodes of this many consecutive ranks
(it must divide the team size): ranks in different virtual nodes then exchange data only
through the network transport (between virtual nodes an NVLink-backed stand-in with the
network's ordering rules), never through direct NVLink stores, so one host runs the code
paths of a multi-node group. [`GroupInfo`](@ref)'s `node` and `num_nodes` then count virtual
nodes, and the plan gains an `EPC_REGION_NET_STAGING` region. A library older than ABI 1.3
has no such field: [`plan_query`](@ref) and [`Group`](@ref) then throw an `ArgumentError`
for a non-zero value, without calling it.
"""
struct GroupConfig
    mode::EpcMode
    num_experts::UInt32
    hidden::UInt32
    max_tokens_per_rank::UInt32
    max_topk::UInt32
    dtype::EpcDtype
    num_sms::UInt32
    timeout_ms::UInt32
    virtual_node_size::UInt32
    alloc_fn::Ptr{Cvoid}
    free_fn::Ptr{Cvoid}
    alloc_ctx::Ptr{Cvoid}
end

function GroupConfig(; num_experts::Integer, hidden::Integer, mode = 0,
                     max_tokens_per_rank::Integer = 0, max_topk::Integer = 0, dtype = 0,
                     num_sms::Integer = 0, timeout_ms::Integer = 0,
                     virtual_node_size::Integer = 0, alloc_fn::Ptr = C_NULL,
                     free_fn::Ptr = C_NULL, alloc_ctx::Ptr = C_NULL)
    return GroupConfig(mode_code(mode), num_experts, hidden, max_tokens_per_rank, max_topk,
                       dtype_code(dtype), num_sms, timeout_ms, virtual_node_size, alloc_fn,
                       free_fn, alloc_ctx)
end

mode_code(code::Integer) = EpcMode(code)

function mode_code(name::Symbol)
    name === :low_latency && return EPC_MODE_LOW_LATENCY
    name === :high_throughput && return EPC_MODE_HIGH_THROUGHPUT
    throw(ArgumentError("unknown mode :$name (known: :low_latency, :high_throughput)"))
end

"The C struct for `config`: sized, versioned, every field not in `GroupConfig` zero."
c_config(config::GroupConfig) =
    extensible(EpcGroupConfig; (name => getfield(config, name) for name in fieldnames(GroupConfig))...)

"The first ABI whose `EpcGroupConfig` has `virtual_node_size` (`reserved0` before, which had to be 0)."
const VIRTUAL_NODES_ABI = VersionNumber(1, 3, 0)

"""
    check_supported(config::GroupConfig, library::VersionNumber = version())

Throw an `ArgumentError` for a setting of `config` that a library of ABI `library` cannot
read: a field newer than that library, which it would take for a reserved field that must
be 0. [`plan_query`](@ref) and [`Group`](@ref) call it before passing `config` on.
"""
function check_supported(config::GroupConfig, library::VersionNumber = version())
    if config.virtual_node_size != 0 && library < VIRTUAL_NODES_ABI
        throw(ArgumentError("virtual_node_size = $(config.virtual_node_size) needs libepcomm " *
                            "ABI $(VIRTUAL_NODES_ABI) or newer, but the loaded library " *
                            "implements ABI $(library), which has no virtual nodes; leave it 0 there"))
    end
    return nothing
end
