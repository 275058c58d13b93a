// SPDX-License-Identifier: Apache-2.0
#include "core/group.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "core/deadline.hpp"
#include "core/device_failure.hpp"
#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gin_probe.hpp"
#include "core/gin_support.hpp"
#include "core/gpu_check.hpp"
#include "core/nccl_runtime.hpp"
#include "core/nccl_wait.hpp"
#include "core/owned_stream.hpp"
#include "core/planner.hpp"
#include "kernels/launch.hpp"

namespace epc {

static_assert(kGinBackendProxy == NCCL_NET_DEVICE_GIN_PROXY && kGinBackendGdaki == NCCL_NET_DEVICE_GIN_GDAKI,
              "core/gin_support.hpp names NCCL's GIN backends by these values");
static_assert(kNcclInternalErrorCode == ncclInternalError && kNcclInvalidUsageCode == ncclInvalidUsage,
              "core/gin_support.hpp names NCCL's results by these values");

Group::Group(ncclComm_t comm, const GroupConfig& config) : comm_(comm), config_(config) {
  if (comm == nullptr) fail_argument("comm is NULL; pass an ncclComm_t (e.g. from epc_comm_init)");
  check_nccl_runtime();
  // A non-blocking communicator may still be coming up (or have failed since): finish_nccl
  // reads its state.
  try {
    finish_nccl(comm, ncclSuccess, "the communicator's creation (ncclCommInitRankConfig)",
                Deadline(config_.timeout_ms));
  } catch (const StrandedCall&) {
    mark_stranded(comm);
    throw;
  }
  int nranks = 0;
  check_nccl(ncclCommCount(comm, &nranks), "ncclCommCount", comm);
  check_nccl(ncclCommUserRank(comm, &rank_), "ncclCommUserRank", comm);
  check_nccl(ncclCommCuDevice(comm, &device_), "ncclCommCuDevice", comm);
  int current = -1;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device_) {
    fail_argument(
        format("the calling thread's current CUDA device is %d but the communicator "
               "uses device %d: call cudaSetDevice(%d) before epc_group_create",
               current, device_, device_));
  }

  ncclTeam_t lsa = ncclTeamLsa(comm);
  if (lsa.nRanks < 1 || nranks % lsa.nRanks != 0) {
    fail(EPC_ERR_UNSUPPORTED, format("the communicator's %d ranks do not split into NVLink (LSA) "
                                     "teams of equal size (this rank's team has %d ranks)",
                                     nranks, lsa.nRanks));
  }
  check_cuda(cudaDeviceGetAttribute(&device_sms_, cudaDevAttrMultiProcessorCount, device_),
             "reading the device's SM count");
  lsa_rank_ = lsa.rank;
  check_config_for_ranks(config_, nranks);
  topo_ = with_virtual_nodes(Topology{nranks, lsa.nRanks, nranks / lsa.nRanks}, config_.virtual_node_size);
  node_ = topo_.node_of(rank_);
  plan_ = make_plan(config_, topo_);

  owned_ = std::make_unique<Owned>(device_);
  try {
    prepare_locally();
    create_device_comm();
    if (spans_lsa_teams()) reset_gin_signals();
    register_window();
    locate_windows();
    barrier(nullptr);
  } catch (const StrandedCall&) {
    abandon();
    throw;
  } catch (...) {
    shut_down();
    throw;
  }
}

Group::~Group() { shut_down(); }

void Group::prepare_locally() {
  // Where the ranks tell each other how their steps went, allocated first: a rank whose later
  // steps fail still takes part, rather than leave its peers in the next collective for good.
  auto* verdict = owned_->device.allocate<int64_t>(1, "cudaMalloc of the creation verdict");
  int64_t mine = 0;
  std::exception_ptr failure;
  // The lowest failing rank wins the max: nranks - rank in the high half, its status in the low.
  const auto verdict_of = [&](EpcStatus status) {
    return static_cast<int64_t>(topo_.nranks - rank_) << 32 | static_cast<uint32_t>(status);
  };
  try {
    reserve_kernel_stack();
    allocate_memory();
  } catch (const Error& e) {
    failure = std::current_exception();
    mine = verdict_of(e.status());
  } catch (...) {
    failure = std::current_exception();
    mine = verdict_of(EPC_ERR_INTERNAL);
  }
  check_cuda(cudaMemcpy(verdict, &mine, sizeof mine, cudaMemcpyHostToDevice), "writing the creation verdict");
  // The first step every rank must take part in: where a rank that never came is noticed.
  const Deadline deadline(config_.timeout_ms);
  const OwnedStream stream("creating a stream for the creation verdict");
  finish_nccl(comm_, ncclAllReduce(verdict, verdict, 1, ncclInt64, ncclMax, comm_, stream.get()),
              "ncclAllReduce of the creation verdict", deadline);
  finish_stream(stream.get(), "the all-reduce of the creation verdict", deadline);
  int64_t all = 0;
  check_cuda(cudaMemcpy(&all, verdict, sizeof all, cudaMemcpyDeviceToHost), "reading the creation verdict");
  if (failure) std::rethrow_exception(failure);
  if (all == 0) return;
  const int rank = topo_.nranks - static_cast<int>(all >> 32);
  const auto status = static_cast<EpcStatus>(static_cast<uint32_t>(all & 0xffffffff));
  fail(status, format("rank %d could not prepare its part of the group (status %d; its own epc_group_create "
                      "says why), so no rank went on to create it",
                      rank, static_cast<int>(status)));
}

void Group::allocate_memory() {
  const size_t bytes = plan_.symmetric_bytes;
  owned_->memory.allocate(comm_, bytes, config_.alloc_fn, config_.free_fn, config_.alloc_ctx);
  check_cuda(cudaMemset(owned_->memory.get(), 0, bytes), "zeroing the symmetric window");
  check_cuda(cudaDeviceSynchronize(), "zeroing the symmetric window");

  owned_->error_host = allocate_pinned<kernels::DeviceError>(cudaHostAllocMapped, "cudaHostAlloc of the error record");
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_device_), error_host(), 0),
             "cudaHostGetDevicePointer of the error record");
  uint32_t* claim = owned_->device.allocate<uint32_t>(1, "cudaMalloc of the error record's claim word");
  check_cuda(cudaMemset(claim, 0, sizeof(uint32_t)), "zeroing the error record's claim word");
  error_host()->claim = claim;

  // What the transport reads to stage bytes for ranks of other nodes (kernels/wire/transport.hpp).
  if (topo_.nodes() > 1) {
    staging_map_ = owned_->device.allocate<kernels::StagingMap>(1, "cudaMalloc of the staging map");
    check_cuda(cudaMemcpy(staging_map_, &plan_.staging_map, sizeof plan_.staging_map, cudaMemcpyHostToDevice),
               "copying the staging map");
  }
}

void Group::register_window() {
  // Peers write into the window, and signal this rank's GIN signals, only from kernels of
  // this group, launched after creation. Registration exchanges every rank's window handle,
  // so no rank leaves it before every rank has entered it, which each does only after
  // zeroing its window and (across LSA teams) resetting its GIN signals: nothing a peer
  // sends can be erased by those.
  const size_t bytes = plan_.symmetric_bytes;
  const ncclResult_t res =
      owned_->registration.register_window(comm_, owned_->memory.get(), bytes, Deadline(config_.timeout_ms));
  if (res != ncclSuccess && config_.alloc_fn != nullptr) {
    fail(EPC_ERR_NCCL, format("NCCL could not register the %zu bytes from EpcGroupConfig."
                              "alloc_fn as a window (%s: %s): the allocator must return memory "
                              "from ncclMemAlloc or CUDA's VMM API (cuMemCreate + cuMemMap)",
                              bytes, ncclGetErrorString(res), ncclGetLastError(comm_)));
  }
  check_nccl(res, "ncclCommWindowRegister", comm_);
}

void Group::locate_windows() {
  const int first = node_ * topo_.node_size;
  const int count = topo_.node_size;
  uint64_t* device =
      owned_->device.allocate<uint64_t>(static_cast<size_t>(count) + 1, "cudaMalloc of the window addresses");
  check_cuda(kernels::launch_window_pointers(window(), first, count, device, nullptr), "launching the window lookup");
  std::vector<uint64_t> at(static_cast<size_t>(count) + 1);
  check_cuda(cudaMemcpy(at.data(), device, at.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
             "reading the window addresses");
  // NCCL maps a team's windows at a fixed stride; the transport relies on it, so check it.
  node_stride_ = count > 1 ? at[1] - at[0] : 0;
  node_base_ = at[0] - static_cast<uint64_t>(first) * node_stride_;
  local_base_ = at[static_cast<size_t>(count)];
  for (int i = 0; i <= count; ++i) {
    const int peer = i < count ? first + i : rank_;
    const uint64_t expected = node_base_ + static_cast<uint64_t>(peer) * node_stride_;
    if (at[static_cast<size_t>(i)] != expected) {
      fail(EPC_ERR_INTERNAL,
           format("NCCL maps rank %d's window at 0x%llx, not at 0x%llx as an even spacing of this node's %d "
                  "windows would; this build of epcomm needs evenly spaced windows",
                  peer, static_cast<unsigned long long>(at[static_cast<size_t>(i)]),
                  static_cast<unsigned long long>(expected), count));
    }
  }
}

void Group::reset_gin_signals() {
  check_cuda(kernels::launch_gin_reset_signals(gin_state_, static_cast<uint32_t>(dev_comm().ginSignalCount), nullptr),
             "launching the GIN signal reset");
  check_cuda(cudaStreamSynchronize(nullptr), "resetting the GIN signals");
}

void Group::reserve_kernel_stack() {
  // Two ways a launch can wait behind a kernel already running on the device, which for a
  // kernel of another group waiting for its peers ends only by timing out: a launch needing
  // more per-thread local memory than the device has reserved (the driver grows the
  // reservation once the device is idle; NCCL sizes its own stack up front for this reason),
  // and, with CUDA's lazy module loading, the first launch of a kernel. Reading every
  // kernel's attributes loads them all now, and the limit is raised before any of them runs.
  // Setting the limit itself waits for the device, so it is set only when it must grow.
  // (docs/reliability.md says what this was seen to fix.)
  DeviceGuard guard(device_);
  const size_t needed = kernels::max_kernel_local_bytes();
  size_t reserved = 0;
  check_cuda(cudaDeviceGetLimit(&reserved, cudaLimitStackSize), "reading the device's stack size limit");
  if (reserved < needed) {
    check_cuda(cudaDeviceSetLimit(cudaLimitStackSize, needed), "reserving the kernels' stack on the device");
  }
}

void Group::create_device_comm() {
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaMultimem = false;  // never multimem/NVLS: it can take a shared host's GPUs down
  reqs.lsaBarrierCount = static_cast<int>(plan_.lsa_barriers);
  reqs.ginContextCount = static_cast<int>(plan_.gin_contexts);
  reqs.ginSignalCount = static_cast<int>(plan_.gin_signals);
  ncclDevComm dev_comm{};
  const Deadline deadline(config_.timeout_ms);
  if (!spans_lsa_teams()) {
    finish_nccl(comm_, ncclDevCommCreate(comm_, &reqs, &dev_comm), "ncclDevCommCreate", deadline);
    owned_->dev_comm.adopt(comm_, dev_comm);
    return;
  }
  // Whether NCCL can set GIN up, asked where a "no" does no harm (core/gin_probe.hpp).
  const GinReport probed = probe_gin(comm_, rank_, reqs, deadline);
  if (!probed.created) {
    const GinVerdict verdict = judge_gin(topo_, probed);
    fail(verdict.status, verdict.message);
  }
  const GinReport report = create_gin_device_comm(comm_, reqs, &dev_comm, deadline);
  if (report.created) owned_->dev_comm.adopt(comm_, dev_comm);
  const GinVerdict verdict = judge_gin(topo_, report);
  if (verdict.status != EPC_OK) fail(verdict.status, verdict.message);

  // What the kernels' GIN calls read (kernels/transport/gin_transport.cuh), beside the window.
  kernels::GinState state;
  std::memset(&state, 0, sizeof state);
  state.comm = dev_comm;
  state.signals = plan_.gin_signal_map;
  gin_state_ = owned_->device.allocate<kernels::GinState>(1, "cudaMalloc of the GIN state");
  check_cuda(cudaMemcpy(gin_state_, &state, sizeof state, cudaMemcpyHostToDevice), "copying the GIN state");
}

void Group::barrier(cudaStream_t stream) {
  check_healthy();
  DeviceGuard guard(device_);
  kernels::GroupBarrierParams p;
  std::memset(&p, 0, sizeof p);
  p.transport = transport();
  p.inbox_offset = plan_.region(EPC_REGION_CONTROL).offset + plan_.control.barrier_inbox_offset;
  p.epoch = ++barrier_epoch_;
  p.rank = rank_;
  p.nranks = topo_.nranks;
  p.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1000000ull;
  p.error = error_device_;
  try {
    check_cuda(kernels::launch_group_barrier(p, stream), "launching the group barrier kernel");
    check_cuda(cudaStreamSynchronize(stream), "waiting for the group barrier kernel");
  } catch (const Error& e) {
    // The epoch sequence is now out of step with the peers: the group cannot be used again.
    record_failure(e.status(), e.what());
    throw;
  }
  raise_if_device_failed();
}

bool Group::device_failure(EpcStatus* status, std::string* message) const {
  const volatile kernels::DeviceError* record = error_host();
  if (record == nullptr) return false;
  const uint32_t recorded = record->status;
  if (recorded == 0) return false;  // written last, after the fields it announces
  // The fields are read after the status (the kernel fenced them before writing it).
  std::atomic_thread_fence(std::memory_order_acquire);
  const RecordedFailure failure{recorded,          record->phase, record->rank,  record->peer,
                                record->waited_ns, record->seen,  record->wanted};
  *message = device_failure_message(failure, config_.num_experts, config_.timeout_ms);
  *status = static_cast<EpcStatus>(recorded);
  return true;
}

void Group::record_failure(EpcStatus status, std::string message) {
  if (failed_status_.load(std::memory_order_relaxed) != EPC_OK) return;
  failed_message_ = std::move(message);
  failed_status_.store(status, std::memory_order_release);
}

void Group::raise_if_device_failed() {
  EpcStatus status = EPC_OK;
  std::string message;
  if (!device_failure(&status, &message)) return;
  record_failure(status, std::move(message));
  fail(failed_status_.load(std::memory_order_relaxed), failed_message_);
}

void Group::check_healthy() {
  const EpcStatus failed = failed_status_.load(std::memory_order_relaxed);
  if (failed != EPC_OK) fail(failed, failed_message_);
  raise_if_device_failed();
}

void Group::check_async_error() const {
  const EpcStatus failed = failed_status_.load(std::memory_order_acquire);
  if (failed != EPC_OK) fail(failed, failed_message_);
  EpcStatus status = EPC_OK;
  std::string message;
  if (device_failure(&status, &message)) fail(status, message);
}

const ncclDevComm& Group::dev_comm() const {
  static const ncclDevComm kNone{};
  return owned_ ? owned_->dev_comm.get() : kNone;
}

kernels::PeerTransport Group::transport() const {
  kernels::PeerTransport t;
  std::memset(&t, 0, sizeof t);
  t.window = window();
  t.node_base = node_base_;
  t.node_stride = node_stride_;
  t.local_base = local_base_;
  t.node_begin = node_ * topo_.node_size;
  t.node_size = topo_.node_size;
  t.one_node = topo_.nodes() == 1;
  t.staging.map = staging_map_;
  t.staging.rank = rank_;
  t.net.kind = kernels::NetKind::kLsaStandIn;
  if (spans_lsa_teams()) {
    t.net.kind = kernels::NetKind::kGin;
    t.net.gin.state = gin_state_;
    t.net.gin.context = 0;  // the one context the planner asks for; senders and readers agree
  }
  return t;
}

EpcGroupInfo Group::info() const {
  EpcGroupInfo i;
  std::memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  i.abi_version = EPC_ABI_VERSION;
  i.rank = rank_;
  i.nranks = topo_.nranks;
  i.lsa_rank = lsa_rank_;
  i.lsa_size = topo_.lsa_size;
  i.node = node_;
  i.num_nodes = topo_.nodes();
  i.cuda_device = device_;
  i.mode = config_.mode;
  i.num_experts = config_.num_experts;
  i.local_experts = config_.local_experts(topo_.nranks);
  i.hidden = config_.hidden;
  i.max_tokens_per_rank = config_.max_tokens_per_rank;
  i.max_topk = config_.max_topk;
  i.max_token_bytes = config_.max_token_bytes();
  i.recv_capacity = config_.recv_capacity_for(topo_.nranks);
  i.overflow = config_.overflow;
  i.max_pending_steps = config_.max_pending_steps;
  i.num_sms = config_.num_sms;
  i.timeout_ms = config_.timeout_ms;
  i.flags = config_.flags;
  i.virtual_node_size = config_.virtual_node_size;
  i.symmetric_bytes = owned_ && owned_->memory.get() != nullptr ? plan_.symmetric_bytes : 0;
  i.workspace_bytes = plan_.workspace_bytes;
  return i;
}

void Group::destroy() {
  const CloseFailure failure = shut_down();
  if (!failure.message.empty()) fail(failure.status, failure.message);
}

bool Group::flush_gin(std::string* why) noexcept {
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = kernels::launch_gin_flush(gin_state_, stream);
  if (e != cudaSuccess) {
    *why = format_noexcept("flushing GIN before releasing the group: %s", cudaGetErrorString(e));
    if (stream != nullptr) cudaStreamDestroy(stream);
    return true;  // nothing is running: the memory can go
  }
  const bool flushed = poll_until(Deadline(config_.timeout_ms), [&] {
    e = cudaStreamQuery(stream);
    return e != cudaErrorNotReady;
  });
  if (!flushed) {
    *why = format_noexcept(
        "GIN did not finish this rank's outstanding puts within the group's timeout (%u ms) "
        "at destroy: the network may still read the group's memory, so its window, device "
        "communicator and GIN signals are left allocated (leaked)",
        config_.timeout_ms);
    cudaStreamDestroy(stream);  // released once the flush kernel ends, if it ever does
    return false;
  }
  if (e != cudaSuccess) *why = format_noexcept("flushing GIN before releasing the group: %s", cudaGetErrorString(e));
  cudaStreamDestroy(stream);
  return true;
}

void Group::abandon() noexcept {
  mark_stranded(comm_);
  owned_.release();  // deliberately leaked: NCCL's call in flight may still write into it
  error_device_ = nullptr;
  gin_state_ = nullptr;
  staging_map_ = nullptr;
}

CloseFailure Group::shut_down() noexcept {
  CloseFailure first;
  if (!owned_) return first;
  // By value and moved: a copy of the message could throw.
  auto note = [&first](CloseFailure failure) {
    if (!failure.message.empty() && first.message.empty()) first = std::move(failure);
  };
  int previous = -1;
  cudaGetDevice(&previous);
  if (device_ >= 0) cudaSetDevice(device_);
  // Nothing may still write into the window when it goes away.
  const cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) {
    note({EPC_ERR_CUDA,
          format_noexcept("cudaDeviceSynchronize before releasing the group: %s", cudaGetErrorString(sync))});
  }
  // Nor may the network still read from it: GIN puts can outlive the kernels that posted them.
  if (gin_state_ != nullptr && owned_->dev_comm.created()) {
    std::string why;
    const bool flushed = flush_gin(&why);
    if (!why.empty()) note({flushed ? EPC_ERR_CUDA : EPC_ERR_TIMEOUT, std::move(why)});
    if (!flushed) owned_.release();  // deliberately leaked: the flush kernel and the NIC may still use it
  }
  if (owned_) {
    // NCCL's objects in Owned's order, so that their failures can be reported; the rest goes
    // with Owned.
    note(owned_->dev_comm.close());
    note(owned_->registration.close());
    note(owned_->memory.close());
    owned_.reset();
  }
  error_device_ = nullptr;
  gin_state_ = nullptr;
  staging_map_ = nullptr;
  if (previous >= 0) cudaSetDevice(previous);
  return first;
}

}  // namespace epc
