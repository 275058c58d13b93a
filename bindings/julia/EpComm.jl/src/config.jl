# SPDX-License-Identifier: Apache-2.0
# Group configuration: what a group carries and how much room it reserves.

"""
    GroupConfig(; num_experts, hidden, mode = 0, max_tokens_per_rank = 0, max_topk = 0,
                  max_token_bytes = 0, recv_capacity = 0, overflow = 0,
                  max_pending_steps = 0, num_sms = 0, timeout_ms = 0, flags = 0,
                  virtual_node_size = 0, alloc_fn = C_NULL, free_fn = C_NULL,
                  alloc_ctx = C_NULL)

The configuration of a group (`EpcGroupConfig`), keywords as its fields. `num_experts`
(divisible by the rank count) and `hidden` (a multiple of 8) are required; every zero means
the library's default: `mode` low latency (`:low_latency`, or `:high_throughput`),
`max_tokens_per_rank` 128 (LL) or 4096 (HT), `max_topk` 8, `max_token_bytes` 2 * hidden
(bf16 or fp16 payloads; down to hidden + hidden / 32 for a window that carries fp8 payloads
only), `recv_capacity` nranks * max_tokens_per_rank, `overflow` `:fail` (or `:drop`),
`max_pending_steps` 2 (up to 3), `num_sms` 132 (LL) or 24 (HT), `timeout_ms` 10000, `flags`
(`EPC_GROUP_*`) none. `alloc_fn`/`free_fn`/`alloc_ctx` are C function pointers (e.g. from
`@cfunction`) of a symmetric-memory allocator; set both or neither.

`virtual_node_size` is a testing and tuning aid. 0: a node is an NVLink (LSA) team.
Otherwise every LSA team is split into virtual nodes of this many consecutive ranks (it must
divide the team size): ranks in different virtual nodes then exchange data only through the
network transport (between virtual nodes an NVLink-backed stand-in with the network's
ordering rules), never through direct NVLink stores, so one host runs the code paths of a
multi-node group. [`GroupInfo`](@ref)'s `node` and `num_nodes` then count virtual nodes, and
the plan gains an `EPC_REGION_NET_STAGING` region.
"""
struct GroupConfig
    mode::EpcMode
    num_experts::UInt32
    hidden::UInt32
    max_tokens_per_rank::UInt32
    max_topk::UInt32
    max_token_bytes::UInt32
    recv_capacity::UInt64
    overflow::EpcOverflow
    max_pending_steps::UInt32
    num_sms::UInt32
    timeout_ms::UInt32
    flags::UInt32
    virtual_node_size::UInt32
    alloc_fn::Ptr{Cvoid}
    free_fn::Ptr{Cvoid}
    alloc_ctx::Ptr{Cvoid}
end

function GroupConfig(; num_experts::Integer, hidden::Integer, mode = 0,
                     max_tokens_per_rank::Integer = 0, max_topk::Integer = 0,
                     max_token_bytes::Integer = 0, recv_capacity::Integer = 0, overflow = 0,
                     max_pending_steps::Integer = 0, num_sms::Integer = 0,
                     timeout_ms::Integer = 0, flags::Integer = 0,
                     virtual_node_size::Integer = 0, alloc_fn::Ptr = C_NULL,
                     free_fn::Ptr = C_NULL, alloc_ctx::Ptr = C_NULL)
    return GroupConfig(mode_code(mode), num_experts, hidden, max_tokens_per_rank, max_topk,
                       max_token_bytes, recv_capacity, overflow_code(overflow),
                       max_pending_steps, num_sms, timeout_ms, flags, virtual_node_size,
                       alloc_fn, free_fn, alloc_ctx)
end

overflow_code(code::Integer) = EpcOverflow(code)

function overflow_code(name::Symbol)
    name === :fail && return EPC_OVERFLOW_FAIL
    name === :drop && return EPC_OVERFLOW_DROP
    throw(ArgumentError("unknown overflow :$name (known: :fail, :drop)"))
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
