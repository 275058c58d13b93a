# SPDX-License-Identifier: Apache-2.0
# Tests of EpComm.jl against the real C library (ENV["EPCOMM_LIB"], as Meson's bindings_env
# sets it). No Julia runs on the project's machines: bindings/julia/check_julia.py checks this
# package statically instead; these tests are for machines that have Julia.
#
#   julia --project=bindings/julia/EpComm.jl -e 'using Pkg; Pkg.test()'
#   EPCOMM_JULIA_GPU=1 ... additionally creates a one-rank group on GPU 0.

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

    @testset "struct sizes (capi/abi.json 1.3.0)" begin
        @test sizeof(EpcTensor) == 80
        @test sizeof(EpcUniqueId) == 128
        @test sizeof(EpcGroupConfig) == 72
        @test fieldoffset(EpcGroupConfig, 12) == 44  # virtual_node_size (reserved0 before 1.3)
        @test sizeof(EpcPlanRegion) == 56
        @test sizeof(EpcPlan) == 968
        @test sizeof(EpcGroupInfo) == 88
        @test sizeof(EpcApi) == 184  # 17 entries in ABI 1.0 (144 bytes), ll_dispatch_fp8 in 1.1, 3 ht_* in 1.2,
                                     # group_async_error in 1.3
        @test fieldoffset(EpcPlan, 17) == 72  # regions
        @test isbitstype(EpcPlan)
    end

    @testset "plan_query: 4 ranks, 256 experts, hidden 7168" begin
        config = GroupConfig(num_experts = 256, hidden = 7168)
        plan = plan_query(config; nranks = 4)
        @test plan.symmetric_bytes == 29478912
        @test length(plan.regions) == 9
        @test plan.num_slots == 2
        @test plan.mode == EPC_MODE_LOW_LATENCY
        @test plan.dtype == EPC_DTYPE_BF16
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

    @testset "virtual nodes (ABI 1.3)" begin
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

        failure = failure_of(() -> plan_query(GroupConfig(num_experts = 256, hidden = 7168,
                                                          virtual_node_size = 3);
                                              nranks = 4, lsa_size = 4, num_nodes = 1))
        @test failure isa EpcError && failure.func == :epc_plan_query
        @test failure.status == EPC_ERR_INVALID_ARGUMENT
        @test occursin("virtual_node_size", failure.message)

        # A library older than ABI 1.3 would take the field for reserved0 (must be 0).
        failure = failure_of(() -> EpComm.check_supported(config, VersionNumber(1, 2, 0)))
        @test failure isa ArgumentError && occursin("ABI 1.3.0 or newer", failure.msg)
        @test EpComm.check_supported(config, VersionNumber(1, 3, 0)) === nothing
        @test EpComm.check_supported(GroupConfig(num_experts = 8, hidden = 64),
                                     VersionNumber(1, 0, 0)) === nothing
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

    @testset "dispatch flags" begin
        @test EpComm.send_only_flags(false) == 0
        @test EpComm.fp8_flags(false, false) == 0
        @test EpComm.fp8_flags(true, false) == EPC_FLAG_SEND_ONLY
        @test EpComm.fp8_flags(false, true) == EPC_FLAG_FP8_POW2_SCALES
        @test EpComm.fp8_flags(true, true) == EPC_FLAG_SEND_ONLY | EPC_FLAG_FP8_POW2_SCALES
        @test EpComm.fp8_flags(true, true) isa EpcFlags
        @test EpComm.backward_flags(false) == 0
        @test EpComm.backward_flags(true) == EPC_FLAG_BACKWARD_WEIGHTS
        @test EpComm.backward_flags(true) isa EpcFlags
    end

    @testset "high-throughput sizing" begin
        @test EpComm.sizing_code(:exact) == EPC_HT_SIZING_EXACT
        @test EpComm.sizing_code(:capacity) == EPC_HT_SIZING_CAPACITY
        @test EpComm.sizing_code(EPC_HT_SIZING_CAPACITY) isa EpcHtSizing
        @test_throws ArgumentError EpComm.sizing_code(:huge)
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
            device = Ptr{Cvoid}(UInt(0x7f0000001000))
            idx = Tensor(device, (4, 2); dtype = :int64)
            failure = try
                Handle(group, idx)
            catch caught
                caught
            end
            @test failure isa EpcError && failure.func == :epc_handle_create
            @test occursin("group is not a live EpcGroup", failure.message)
            @test group.open_handles == 0
            failure = failure_of(() -> async_error(group))
            @test failure isa EpcError && failure.func == :epc_group_async_error &&
                  failure.status == EPC_ERR_INVALID_ARGUMENT
            @test occursin("group is not a live EpcGroup", failure.message)

            h = EpComm.Handle(Ptr{EpcHandle}(pointer(fake_handle)), group, EpComm.Tensor[])
            group.open_handles += 1
            x = Tensor(device, (4, 2048); dtype = :bf16)
            weights = Tensor(device, (4, 2); dtype = :fp32)
            out_x = Tensor(device, (4, 256, 2048); dtype = :bf16)
            counts = Tensor(device, (4,); dtype = :int32)
            fp8_x = Tensor(device, (4, 256, 2048); dtype = :fp8_e4m3)
            scales = Tensor(device, (4, 256, 16); dtype = :fp32)
            calls = [(:epc_handle_update, () -> update!(h, idx)),
                     (:epc_ll_dispatch, () -> ll_dispatch(h, x, weights, out_x, counts)),
                     (:epc_ll_dispatch, () -> ll_dispatch(h, x, weights, out_x, counts; send_only = true)),
                     (:epc_ll_dispatch_fp8, () -> ll_dispatch_fp8(h, x, weights, fp8_x, scales, counts)),
                     (:epc_ll_dispatch_fp8, () -> ll_dispatch_fp8(h, x, weights, fp8_x, scales, counts;
                                                                  send_only = true, pow2_scales = true)),
                     (:epc_ll_combine, () -> ll_combine(h, out_x, x)),
                     (:epc_complete, () -> complete(h))]
            refused_as_dead(calls)
            @test_throws ArgumentError close(group)   # a handle is still open
            @test_throws EpcError close(h)            # the library refuses the dead handle...
            @test !isopen(h) && group.open_handles == 0  # ...which is gone anyway
            @test_throws ArgumentError complete(h)    # closed: refused without the library
            @test_throws ArgumentError ll_dispatch(h, x, weights, out_x, counts)
            @test_throws ArgumentError ll_dispatch_fp8(h, x, weights, fp8_x, scales, counts)
            @test_throws ArgumentError EpComm.to_tensor(42)  # not describable as a tensor

            # High-throughput handles: the same refusals through every HT call.
            for sizing in (:exact, :capacity)
                failure = failure_of(() -> HtHandle(group, idx; sizing))
                @test failure isa EpcError && failure.func == :epc_ht_handle_create
                @test occursin("group is not a live EpcGroup", failure.message)
            end
            @test group.open_handles == 0
            fake_ht = zeros(UInt64, 8)
            GC.@preserve fake_ht begin
                ht = EpComm.HtHandle(Ptr{EpcHandle}(pointer(fake_ht)), group, 256, EPC_HT_SIZING_CAPACITY,
                                     EpComm.Tensor[])
                group.open_handles += 1
                @test EpComm.rows(ht) == 256
                rows_x = Tensor(device, (256, 2048); dtype = :bf16)
                rows_k = Tensor(device, (256, 2); dtype = :fp32)
                rows_idx = Tensor(device, (256, 2); dtype = :int32)
                num_recv = Tensor(device, (1,); dtype = :int32)
                fp8_tokens = Tensor(device, (4, 2048); dtype = :fp8_e4m3)
                fp8_rows = Tensor(device, (256, 2048); dtype = :fp8_e4m3)
                token_scales = Tensor(device, (4, 16); dtype = :fp32)
                row_scales = Tensor(device, (256, 16); dtype = :fp32)
                ht_calls = [(:epc_handle_update, () -> update!(ht, idx)),
                            (:epc_ht_dispatch, () -> ht_dispatch(ht, x, rows_x)),
                            (:epc_ht_dispatch, () -> ht_dispatch(ht, x, rows_x; topk_weights = weights,
                                                                 out_topk_weights = rows_k,
                                                                 out_topk_idx = rows_idx,
                                                                 out_expert_counts = counts,
                                                                 out_num_recv = num_recv)),
                            (:epc_ht_dispatch, () -> ht_dispatch(ht, fp8_tokens, fp8_rows;
                                                                 x_scales = token_scales,
                                                                 out_scales = row_scales)),
                            (:epc_ht_combine, () -> ht_combine(ht, rows_x, x)),
                            (:epc_ht_combine, () -> ht_combine(ht, rows_x, x; topk_weights = rows_k,
                                                                out_topk_weights = weights))]
                refused_as_dead(ht_calls)
                # One backward-weights tensor without the other: refused here.
                @test_throws ArgumentError ht_combine(ht, rows_x, x; topk_weights = rows_k)
                @test_throws EpcError close(ht)
                @test !isopen(ht) && group.open_handles == 0
                @test_throws ArgumentError ht_dispatch(ht, x, rows_x)  # closed: no library call
                @test_throws ArgumentError update!(ht, idx)
            end
            group.handle = C_NULL  # nothing real to destroy
            @test_throws ArgumentError async_error(group)  # closed: refused without the library
        end
    end

    @testset "async_error needs ABI 1.3" begin
        @test EpComm.require_abi(v"1.3.0", :epc_group_async_error, v"1.3.0") === nothing
        @test EpComm.require_abi(v"1.3.0", :epc_group_async_error, v"1.4.2") === nothing
        failure = failure_of(() -> EpComm.require_abi(v"1.3.0", :epc_group_async_error, v"1.2.0"))
        @test failure isa EpcError && failure.status == EPC_ERR_UNSUPPORTED &&
              failure.func == :epc_group_async_error
        @test occursin("needs libepcomm ABI 1.3.0 or newer", failure.message)
        @test occursin("implements ABI 1.2.0", failure.message)
        failure = failure_of(() -> async_error(EpComm.Group(Ptr{EpcGroup}(C_NULL), adopt_comm(Ptr{Cvoid}(UInt(0x1000))), 0)))
        @test failure isa ArgumentError  # a NULL handle is a closed group here
    end

    if get(ENV, "EPCOMM_JULIA_GPU", "0") == "1"
        @testset "one-rank group on GPU 0" begin
            comm = Comm(create_unique_id(), 1, 0; cuda_device = 0)
            group = Group(comm, GroupConfig(num_experts = 8, hidden = 1024))
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
    end
end
