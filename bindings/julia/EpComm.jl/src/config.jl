# Group configuration: what a group carries and how much room it reserves.

"""
    GroupConfig(; num_experts, hidden, mode = 0, max_tokens_per_rank = 0, max_topk = 0,
                  dtype = 0, num_sms = 0, timeout_ms = 0,
                  alloc_fn = C_NULL, free_fn = C_NULL, alloc_ctx = C_NULL)

The configuration of a group (`EpcGroupConfig`). `num_experts` (divisible by the rank count)
and `hidden` (a multiple of 8) are required; every zero means the library's default:
`mode` low latency (`:low_latency`, or `:high_throughput`), `max_tokens_per_rank` 128 (LL)
or 4096 (HT), `max_topk` 8, `dtype` bf16 (a name or type as in `dtype_code`), `num_sms` 132 (LL) or 24 (HT)
(LL) or 24 (HT), `timeout_ms` 10000. `alloc_fn`/`free_fn`/`alloc_ctx` are C function
pointers (e.g. from `@cfunction`) of a symmetric-memory allocator; set both or neither.
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
    alloc_fn::Ptr{Cvoid}
    free_fn::Ptr{Cvoid}
    alloc_ctx::Ptr{Cvoid}
end

function GroupConfig(; num_experts::Integer, hidden::Integer, mode = 0,
                     max_tokens_per_rank::Integer = 0, max_topk::Integer = 0, dtype = 0,
                     num_sms::Integer = 0, timeout_ms::Integer = 0, alloc_fn::Ptr = C_NULL,
                     free_fn::Ptr = C_NULL, alloc_ctx::Ptr = C_NULL)
    return GroupConfig(mode_code(mode), num_experts, hidden, max_tokens_per_rank, max_topk,
                       dtype_code(dtype), num_sms, timeout_ms, alloc_fn, free_fn, alloc_ctx)
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
