# SPDX-License-Identifier: Apache-2.0
# Tests of EpComm.jl against the real C library (ENV["EPCOMM_LIB"], as Meson's bindings_env
# sets it). No Julia runs on the project's machines: bindings/julia/check_julia.py checks this
# package statically instead; these tests are for machines that have Julia.
#
#   julia --project=bindings/julia/EpComm.jl -e 'using Pkg; Pkg.test()'
#   EPCOMM_JULIA_GPU=1 ... additionally creates a one-rank group on GPU 0, and communicators
#   with a timeout there.

using Test
using EpComm
using EpComm.LibEpComm

"What `call()` throws, or `nothing`."
function failure_of(call)
    try
        call()
    catch caught
        return caught
    end
    return nothing
end

# Every (C function, call) in `calls` throws the library's refusal of a dead handle.
function refused_as_dead(calls)
    for (func, call) in calls
        failure = failure_of(call)
        @test failure isa EpcError && failure.func == func &&
              occursin("handle is not a live EpcHandle", failure.message)
    end
end

@testset "EpComm" begin
    @testset "library and version" begin
        @test isfile(EpComm.library_path())
        @test EpComm.version().major == EPC_ABI_MAJOR
        @test EpComm.binding_version() == VersionNumber(EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH)
        @test EpComm.status_string(EPC_OK) isa String
        @test EpComm.status_string(EPC_ERR_INVALID_ARGUMENT) == "invalid argument"
        @test EpComm.status_string(99) == "unknown status"
    end

    @testset "struct sizes (capi/abi.json 2.0.0)" begin
        @test sizeof(EpcTensor) == 80
        @test sizeof(EpcUniqueId) == 128
        @test fieldoffset(EpcGroupConfig, findfirst(==(:recv_capacity), fieldnames(EpcGroupConfig))) % 8 == 0
        @test sizeof(EpcPlanRegion) == 56
        @test fieldoffset(EpcApi, findfirst(==(:complete), fieldnames(EpcApi))) ==
              8 + 19 * sizeof(Ptr{Cvoid})  # the last of ABI 2.0's 20 entries
        @test fieldtype(EpcHandleConfig, :capacity) == UInt64  # capacities are 64-bit
        @test fieldtype(EpcGroupInfo, :recv_capacity) == UInt64
        @test all(isbitstype, (EpcPlan, EpcDispatchArgs, EpcCombineArgs, EpcHandleInfo, EpcRouting))
        @test fieldtype(EpcDispatchArgs, :out_x) == Ptr{EpcTensor}
    end

    @testset "2.1 fields appended after 2.0's (capi/abi.json 2.1.0)" begin
        offset(T, f) = fieldoffset(T, findfirst(==(f), fieldnames(T)))
        @test offset(EpcDispatchArgs, :send_sms) == 136 && offset(EpcDispatchArgs, :reserved0) == 140
        @test offset(EpcCombineArgs, :send_sms) == 56 && sizeof(EpcCombineArgs) == 64
    end

    @testset "2.2 fields appended after 2.1's (capi/abi.json 2.2.0)" begin
        offset(T, f) = fieldoffset(T, findfirst(==(f), fieldnames(T)))
        @test offset(EpcDispatchArgs, :max_step_tokens) == 144 && offset(EpcDispatchArgs, :reserved1) == 148
        @test sizeof(EpcDispatchArgs) == 152
    end

    @testset "2.3 table entry and struct (capi/abi.json 2.3.0)" begin
        @test sizeof(EpcApi) == 8 + 21 * sizeof(Ptr{Cvoid})  # comm_init_config appended
        @test sizeof(EpcCommConfig) == 16
        config = EpComm.extensible(EpcCommConfig; timeout_ms = 1000)
        @test config.struct_size == 16 && config.abi_version == EPC_ABI_VERSION
        @test config.timeout_ms == 1000 && config.flags == 0
    end

    @testset "plan_query: 4 ranks, 256 experts, hidden 7168" begin
        config = GroupConfig(num_experts = 256, hidden = 7168)
        plan = plan_query(config; nranks = 4)
        @test plan.symmetric_bytes == 35233792
        @test length(plan.regions) == 9
        @test plan.num_slots == 2
        @test plan.mode == EPC_MODE_LOW_LATENCY
        @test plan.max_token_bytes == 2 * 7168
        @test plan.recv_capacity == 4 * 128
        @test plan.max_pending_steps == 2
        @test plan.handle_bytes > 0
        @test plan.regions[1].name == "control"
        @test plan.regions[1].slot === nothing
        @test plan.regions[1].kind == EPC_REGION_CONTROL
        @test plan.regions[2].name == "dispatch_recv[0]"
        @test plan.regions[2].slot == 0
        @test plan.regions[end].name == "combine_signal[1]"
        @test issorted([r.offset for r in plan.regions])
        @test last(plan.regions).offset + last(plan.regions).size <= plan.symmetric_bytes
        @test EpComm.last_error_message() == ""
    end

    @testset "virtual nodes" begin
        whole_team = plan_query(GroupConfig(num_experts = 256, hidden = 7168); nranks = 4,
                                lsa_size = 4, num_nodes = 1)
        config = GroupConfig(num_experts = 256, hidden = 7168, virtual_node_size = 2)
        @test EpComm.c_config(config).virtual_node_size == 2
        plan = plan_query(config; nranks = 4, lsa_size = 4, num_nodes = 1)
        # The library read the field: the two ranks of the other virtual node get a staging
        # mirror, the last region of the window.
        staging = last(plan.regions)
        @test staging.kind == EPC_REGION_NET_STAGING
        @test staging.name == "net_staging"
        @test staging.slot === nothing
        @test length(plan.regions) == length(whole_team.regions) + 1
        @test all(r -> r.kind != EPC_REGION_NET_STAGING, whole_team.regions)
        @test staging.offset + staging.size <= plan.symmetric_bytes
        # Both modes serve EPC_GROUP_COMBINE_PER_ENTRY across virtual nodes (2.1): each rank
        # stages the entries' rows it sends the other node, so the staging region grows.
        for mode in (:low_latency, :high_throughput)
            partials = plan_query(GroupConfig(num_experts = 256, hidden = 7168, mode = mode,
                                              virtual_node_size = 2);
                                  nranks = 4, lsa_size = 4, num_nodes = 1)
            per_entry = plan_query(GroupConfig(num_experts = 256, hidden = 7168, mode = mode,
                                               virtual_node_size = 2, flags = EPC_GROUP_COMBINE_PER_ENTRY);
                                   nranks = 4, lsa_size = 4, num_nodes = 1)
            @test last(partials.regions).kind == EPC_REGION_NET_STAGING
            @test last(per_entry.regions).kind == EPC_REGION_NET_STAGING
            @test last(per_entry.regions).size > last(partials.regions).size
        end

        failure = failure_of(() -> plan_query(GroupConfig(num_experts = 256, hidden = 7168,
                                                          virtual_node_size = 3);
                                              nranks = 4, lsa_size = 4, num_nodes = 1))
        @test failure isa EpcError && failure.func == :epc_plan_query
        @test failure.status == EPC_ERR_INVALID_ARGUMENT
        @test occursin("virtual_node_size", failure.message)

    end

    @testset "group fields of ABI 2.0 and the status rule" begin
        fp8 = plan_query(GroupConfig(num_experts = 64, hidden = 2048,
                                     max_token_bytes = 2048 + 64 + 5); nranks = 4)
        @test fp8.max_token_bytes == 2048 + 64  # rounded down to an fp8-only window
        for (keywords, status, word) in [
                ((max_token_bytes = 2048,), EPC_ERR_INVALID_ARGUMENT, "max_token_bytes"),
                ((recv_capacity = 4 * 128 - 1,), EPC_ERR_UNSUPPORTED, "recv_capacity"),
                ((recv_capacity = 4 * 128 + 1,), EPC_ERR_INVALID_ARGUMENT, "recv_capacity"),
                ((max_pending_steps = 4,), EPC_ERR_UNSUPPORTED, "max_pending_steps"),
                ((overflow = 7,), EPC_ERR_INVALID_ARGUMENT, "overflow")]
            failure = failure_of(() -> plan_query(GroupConfig(; num_experts = 64, hidden = 2048,
                                                              keywords...); nranks = 4))
            @test failure isa EpcError && failure.status == status && occursin(word, failure.message)
        end
        drop = GroupConfig(num_experts = 64, hidden = 2048, recv_capacity = 4 * 128, overflow = :drop)
        @test EpComm.c_config(drop).overflow == EPC_OVERFLOW_DROP
        @test plan_query(drop; nranks = 4).recv_capacity == 4 * 128
        @test_throws ArgumentError GroupConfig(num_experts = 8, hidden = 64, overflow = :spill)
    end

    @testset "errors carry the library's message" begin
        failure = try
            plan_query(GroupConfig(num_experts = 0, hidden = 7168); nranks = 4)
        catch caught
            caught
        end
        @test failure isa EpcError
        @test failure.status == EPC_ERR_INVALID_ARGUMENT
        @test failure.func == :epc_plan_query
        @test occursin("num_experts", failure.message)
        @test occursin("invalid argument", sprint(showerror, failure))

        failure = try
            plan_query(GroupConfig(num_experts = 256, hidden = 7); nranks = 4)
        catch caught
            caught
        end
        @test failure isa EpcError && occursin("hidden", failure.message)

        @test_throws InexactError GroupConfig(num_experts = -1, hidden = 7168)
        @test_throws ArgumentError GroupConfig(num_experts = 8, hidden = 64, mode = :fast)
        @test_throws ArgumentError EpComm.dtype_code(Float64)
    end

    @testset "Comm checks the rank before any GPU work, with or without a timeout" begin
        id = UniqueId(zeros(UInt8, 128))
        for (func, timeout_ms) in ((:epc_comm_init, 0), (:epc_comm_init_config, 1000))
            failure = failure_of(() -> Comm(id, 2, 5; timeout_ms))
            @test failure isa EpcError && failure.func == func &&
                  failure.status == EPC_ERR_INVALID_ARGUMENT && occursin("rank is 5", failure.message)
        end
        @test_throws InexactError Comm(id, 1, 0; timeout_ms = -1)  # refused here
    end

    @testset "UniqueId bytes and hex round trip" begin
        raw = rand(UInt8, 128)
        id = UniqueId(raw)
        @test EpComm.bytes(id) == raw
        @test length(EpComm.hex(id)) == 256
        @test UniqueId(EpComm.hex(id)) == id
        @test_throws ArgumentError UniqueId(rand(UInt8, 127))
        created = try
            create_unique_id()
        catch caught  # NCCL may find no usable network interface on some machines
            caught isa EpcError || rethrow()
            nothing
        end
        created === nothing || @test UniqueId(EpComm.bytes(created)) == created
    end

    @testset "named choices and flags" begin
        @test EpComm.step_flags(0, false) == 0
        @test EpComm.step_flags(0, true) == EPC_STEP_SEND_ONLY
        @test EpComm.step_flags(0, false, true) == EPC_DISPATCH_POW2_SCALES
        @test EpComm.step_flags(0x80, true, true) == 0x80 | EPC_STEP_SEND_ONLY | EPC_DISPATCH_POW2_SCALES
        @test EpComm.layout_code(:flat) == EPC_LAYOUT_FLAT
        @test EpComm.layout_code(:expert_padded) == EPC_LAYOUT_EXPERT_PADDED
        @test EpComm.layout_code(3) isa EpcLayout
        @test EpComm.sizing_code(:exact) == EPC_SIZING_EXACT
        @test EpComm.sizing_code(:capacity) == EPC_SIZING_CAPACITY
        @test EpComm.quant_code(:fp8) == EPC_QUANT_FP8
        @test EpComm.quant_code(:passthrough) == EPC_QUANT_PASSTHROUGH
        @test EpComm.scale_layout_code(:swizzled_128x4) == EPC_SCALES_SWIZZLED_128X4
        @test EpComm.weighting_code(:home) == EPC_WEIGHTING_HOME
        @test_throws ArgumentError EpComm.sizing_code(:huge)
        @test_throws ArgumentError EpComm.layout_code("flat")
        # Without CUDA.jl the default stream is the legacy default stream.
        @test EpComm.default_stream() === nothing
        @test EpComm.stream_pointer(EpComm.default_stream()) == C_NULL
    end

    @testset "tensor descriptors" begin
        address = Ptr{Float32}(UInt(0x1000))
        tensor = Tensor(address, (2, 8))
        @test size(tensor) == (2, 8)
        @test strides(tensor) == (0, 0)
        @test EpComm.dtype(tensor) == EPC_DTYPE_FP32
        @test tensor.raw.shape == (2, 8, 0, 0)
        @test Tensor(Ptr{Cvoid}(UInt(0x1000)), (4,); dtype = :bf16).raw.dtype == EPC_DTYPE_BF16
        @test_throws ArgumentError Tensor(Ptr{Cvoid}(UInt(0x1000)), (4,))
        @test_throws ArgumentError Tensor(address, (1, 2, 3, 4, 5))
        # A Julia (hidden = 8, tokens = 2) matrix is the C [tokens, hidden] tensor.
        julia_view = EpComm.column_major_tensor(Ptr{Cvoid}(UInt(0x1000)), Float16, (8, 2), (1, 8), nothing)
        @test size(julia_view) == (2, 8)
        @test strides(julia_view) == (8, 1)
        @test EpComm.dtype(julia_view) == EPC_DTYPE_FP16
    end

    @testset "handles: the library refuses dead objects, the binding closed ones" begin
        # Zeroed memory stands in for a group and a handle: the library reads the first word,
        # finds no live magic and refuses, before looking at any tensor, so the fake device
        # addresses below are never dereferenced.
        fake_group, fake_handle = zeros(UInt64, 8), zeros(UInt64, 8)
        GC.@preserve fake_group fake_handle begin
            comm = adopt_comm(Ptr{Cvoid}(UInt(0x1000)))  # never reaches a C call here
            group = EpComm.Group(Ptr{EpcGroup}(pointer(fake_group)), comm, 0)
            comm.open_groups += 1  # as Group(comm, config) counts it
            device = Ptr{Cvoid}(UInt(0x7f0000001000))
            idx = Tensor(device, (4, 2); dtype = :int64)
            for keywords in [(;), (topk_idx = idx,), (sizing = :exact, topk_idx = idx),
                             (layout = :flat, stream = Ptr{Cvoid}(UInt(0x5000)))]
                failure = failure_of(() -> Handle(group; keywords...))
                @test failure isa EpcError && failure.func == :epc_handle_create
                @test occursin("group is not a live EpcGroup", failure.message)
            end
            @test group.open_handles == 0
            @test_throws ArgumentError Handle(group; layout = :diagonal)  # refused here
            failure = failure_of(() -> async_error(group))
            @test failure isa EpcError && failure.func == :epc_group_async_error &&
                  failure.status == EPC_ERR_INVALID_ARGUMENT
            @test occursin("group is not a live EpcGroup", failure.message)
            # async_error takes the group's lock, as info does, so close waits for it.
            asking = lock(group.lock) do
                task = Threads.@spawn failure_of(() -> async_error(group))
                sleep(0.5)
                @test !istaskdone(task)
                return task
            end
            failure = fetch(asking)
            @test failure isa EpcError && failure.func == :epc_group_async_error

            h = EpComm.Handle(Ptr{EpcHandle}(pointer(fake_handle)), group, EpComm.Tensor[])
            group.open_handles += 1
            x = Tensor(device, (4, 2048); dtype = :bf16)
            weights = Tensor(device, (4, 2); dtype = :fp32)
            out_x = Tensor(device, (4, 256, 2048); dtype = :bf16)
            counts = Tensor(device, (4,); dtype = :int32)
            fp8_x = Tensor(device, (4, 256, 2048); dtype = :fp8_e4m3)
            scales = Tensor(device, (4, 256, 16); dtype = :fp32)
            rows_x = Tensor(device, (256, 2048); dtype = :bf16)
            rows_k = Tensor(device, (256, 2); dtype = :fp32)
            rows_idx = Tensor(device, (256, 2); dtype = :int32)
            num_recv = Tensor(device, (1,); dtype = :int32)
            acc = Tensor(device, (4,); dtype = :int64)
            calls = [(:epc_handle_update, () -> update!(h; topk_idx = idx)),
                     (:epc_handle_query, () -> EpComm.info(h)),
                     (:epc_dispatch, () -> dispatch(h; x, topk_weights = weights, out_x,
                                                    out_expert_counts = counts)),
                     (:epc_dispatch, () -> dispatch(h; x, topk_weights = weights, out_x = fp8_x,
                                                    out_scales = scales, out_expert_counts = counts,
                                                    acc_expert_counts = acc, quant = :fp8,
                                                    send_only = true, pow2_scales = true)),
                     (:epc_dispatch, () -> dispatch(h; x, out_x = rows_x, topk_weights = weights,
                                                    out_topk_weights = rows_k, out_topk_idx = rows_idx,
                                                    out_expert_counts = counts, out_num_recv = num_recv)),
                     (:epc_combine, () -> combine(h; x = out_x, out = x)),
                     (:epc_combine, () -> combine(h; x = rows_x, out = x, topk_weights = rows_k,
                                                  out_topk_weights = weights, send_only = true)),
                     (:epc_complete, () -> complete(h)),
                     (:epc_complete, () -> complete(h; stream = nothing))]
            refused_as_dead(calls)
            @test_throws ArgumentError dispatch(h; x, out_x, quant = :fp4)  # refused here
            @test_throws UndefKeywordError dispatch(h; x)                   # out_x is required
            @test_throws ArgumentError close(group)   # a handle is still open
            @test_throws EpcError close(h)            # the library refuses the dead handle...
            @test !isopen(h) && group.open_handles == 0  # ...which is gone anyway
            @test_throws ArgumentError complete(h)    # closed: refused without the library
            @test_throws ArgumentError dispatch(h; x, out_x)
            @test_throws ArgumentError combine(h; x = out_x, out = x)
            @test_throws ArgumentError update!(h; topk_idx = idx)
            @test_throws ArgumentError EpComm.info(h)
            @test_throws ArgumentError EpComm.to_tensor(42)  # not describable as a tensor
            @test_throws ArgumentError close(comm)  # a group is still open on it
            @test isopen(comm)
            failure = failure_of(() -> EpComm.info(group))
            @test failure isa EpcError && failure.func == :epc_group_query &&
                  occursin("group is not a live EpcGroup", failure.message)
            # close waits for an info in flight, which holds the group's lock while it calls.
            closing = lock(group.lock) do
                task = Threads.@spawn failure_of(() -> close(group))
                sleep(0.5)
                @test isopen(group) && !istaskdone(task)
                return task
            end
            failure = fetch(closing)  # the library refuses the dead group...
            @test failure isa EpcError && failure.func == :epc_group_destroy &&
                  failure.status == EPC_ERR_INVALID_ARGUMENT
            @test !isopen(group)         # ...and only INVALID_USAGE would leave it open
            @test close(group) === nothing  # the pointer is never passed again
            @test comm.open_groups == 0 && close(comm) === nothing && !isopen(comm)
            @test_throws ArgumentError async_error(group)  # closed: refused without the library
            @test_throws ArgumentError EpComm.info(group)
        end
    end

    @testset "argument structs point at their tensors" begin
        device = Ptr{Cvoid}(UInt(0x7f0000001000))
        fields = EpComm.TensorFields((; x = Tensor(device, (4, 8); dtype = :bf16), x_scales = nothing,
                                      out_x = Tensor(device, (2, 4, 8); dtype = :fp8_e4m3)))
        GC.@preserve fields begin
            args = EpComm.extensible(EpcDispatchArgs; quant = EPC_QUANT_FP8, EpComm.pointers(fields)...)
            @test args.struct_size == sizeof(EpcDispatchArgs) && args.abi_version == EPC_ABI_VERSION
            @test args.x_scales == C_NULL && args.topk_weights == C_NULL
            @test unsafe_load(args.x).dtype == EPC_DTYPE_BF16
            @test unsafe_load(args.out_x).shape == (2, 4, 8, 0)
        end
    end

    if get(ENV, "EPCOMM_JULIA_GPU", "0") == "1"
        @testset "one-rank group on GPU 0" begin
            comm = Comm(create_unique_id(), 1, 0; cuda_device = 0)
            group = Group(comm, GroupConfig(num_experts = 8, hidden = 1024))
            h = Handle(group)  # no routing: local, allocates
            handle_info = EpComm.info(h)
            @test handle_info.layout == EPC_LAYOUT_EXPERT_PADDED && handle_info.num_tokens == 0
            @test handle_info.pending == EPC_PENDING_NONE && handle_info.overflow_rank == -1
            close(h)
            group_info = EpComm.info(group)
            @test group_info.rank == 0 && group_info.nranks == 1
            @test group_info.local_experts == 8
            @test group_info.symmetric_bytes > 0
            barrier(group)
            close(group)
            close(group)  # a no-op
            @test !isopen(group)
            close(comm)
        end

        @testset "communicators made within a bound on GPU 0" begin
            Comm(create_unique_id(), 1, 0; cuda_device = 0, timeout_ms = 30_000) do comm
                Group(comm, GroupConfig(num_experts = 8, hidden = 1024)) do group
                    barrier(group)
                    @test async_error(group) === nothing
                end
            end
            # Rank 1 never comes (nobody else has the id): TIMEOUT after about 1 s, no Comm.
            start = time()
            failure = failure_of(() -> Comm(create_unique_id(), 2, 0; cuda_device = 0, timeout_ms = 1000))
            seconds = time() - start
            @test failure isa EpcError && failure.func == :epc_comm_init_config &&
                  failure.status == EPC_ERR_TIMEOUT && occursin("within 1000 ms", failure.message)
            @test 0.95 <= seconds < 5
        end
    end
end
