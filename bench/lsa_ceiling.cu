// SPDX-License-Identifier: Apache-2.0
#include "bench/lsa_ceiling.hpp"

#include <nccl.h>
#include <nccl_device.h>
#include <cuda/atomic>

#include <algorithm>
#include <cstring>

#include "bench/try_call.hpp"

namespace epc::bench {
namespace {

constexpr int kMaxLsa = 128;          // per-peer sizes travel in the kernel's parameters
constexpr int kThreads = 512;         // all SMs: two blocks of 512 threads per SM
constexpr int kBudgetThreads = 1024;  // an SM budget: one block of 1024 threads per SM
constexpr int64_t kAlign = 4096;

struct CopyParams {
  ncclWindow_t window;
  const int4* source;
  int64_t vectors_to[kMaxLsa];  // 16-byte vectors for each LSA peer (0 for this rank)
  int64_t slot_bytes;           // each source rank's region in every window
  int64_t signal_offset;        // [lsa_size] uint64 flags after the regions
  int lsa_rank;
  int lsa_size;
  int blocks_per_peer;
  uint64_t epoch;
  uint64_t timeout_ns;
  uint32_t* done;
  int* failed;
};

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Blocks are dealt round-robin to peers, so every peer's links are busy from the start;
// the last block to finish publishes with one release store per peer, then waits for every
// peer's store, bounded by the timeout so a missing peer cannot hang the run.
__global__ void __launch_bounds__(kBudgetThreads) ceiling_copy(CopyParams p) {
  const int peers = p.lsa_size - 1;
  const int which = static_cast<int>(blockIdx.x) % peers;
  const int chunk = static_cast<int>(blockIdx.x) / peers;
  const int peer = (p.lsa_rank + 1 + which) % p.lsa_size;
  const int64_t n = p.vectors_to[peer];
  int4* dst = static_cast<int4*>(ncclGetLsaPointer(p.window, static_cast<size_t>(p.lsa_rank) * p.slot_bytes, peer));
  const int64_t stride = static_cast<int64_t>(p.blocks_per_peer) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(chunk) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = p.source[i];
  }

  __threadfence_system();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(p.done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0) *p.done = 0;  // the next launch starts after this kernel ends
  __threadfence_system();
  for (int q = threadIdx.x; q < p.lsa_size; q += blockDim.x) {
    if (q == p.lsa_rank) continue;
    auto* flag =
        static_cast<uint64_t*>(ncclGetLsaPointer(p.window, p.signal_offset + static_cast<size_t>(p.lsa_rank) * 8, q));
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*flag).store(p.epoch, cuda::memory_order_release);
  }
  for (int q = threadIdx.x; q < p.lsa_size; q += blockDim.x) {
    if (q == p.lsa_rank) continue;
    auto* flag = static_cast<uint64_t*>(ncclGetLocalPointer(p.window, p.signal_offset + static_cast<size_t>(q) * 8));
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> ref(*flag);
    const uint64_t start = now_ns();
    // `>=`: a faster peer may already have signalled its next launch.
    while (ref.load(cuda::memory_order_acquire) < p.epoch) {
      if (now_ns() - start > p.timeout_ns) {
        atomicExch(p.failed, 1);
        break;
      }
    }
  }
}

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

LsaCeiling::~LsaCeiling() { teardown(); }

bool LsaCeiling::setup(RankSession& session, int64_t slot_bytes, int timeout_ms, std::string& error) {
  s_ = &session;
  const ncclComm_t comm = static_cast<ncclComm_t>(session.comm());
  const ncclTeam_t lsa = ncclTeamLsa(comm);
  if (lsa.nRanks != session.nranks()) {
    error = "the ceiling needs every rank in one NVLink (LSA) domain, but this rank's has " +
            std::to_string(lsa.nRanks) + " of " + std::to_string(session.nranks()) + " ranks; run with --ceiling=off";
    return false;
  }
  if (lsa.nRanks < 2 || lsa.nRanks > kMaxLsa) {
    error = "the ceiling needs 2 to " + std::to_string(kMaxLsa) + " ranks; run with --ceiling=off";
    return false;
  }
  lsa_rank_ = lsa.rank;
  lsa_size_ = lsa.nRanks;
  slot_bytes_ = round_up(std::max<int64_t>(slot_bytes, 16), kAlign);
  timeout_ns_ = static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 10000) * 1000000ull;
  const size_t bytes = static_cast<size_t>(slot_bytes_ * lsa_size_ + round_up(8 * lsa_size_, kAlign));

  TRY_NCCL(ncclMemAlloc(&memory_, bytes), "ncclMemAlloc (ceiling window)");
  // Zero before registering: registration is collective, so no peer signals into this memory
  // before every rank's zeroing is done.
  TRY_CUDA(cudaMemset(memory_, 0, bytes), "zeroing the ceiling window");
  TRY_CUDA(cudaDeviceSynchronize(), "zeroing the ceiling window");
  ncclWindow_t window = nullptr;
  TRY_NCCL(ncclCommWindowRegister(comm, memory_, bytes, &window, NCCL_WIN_COLL_SYMMETRIC),
           "ncclCommWindowRegister (ceiling)");
  window_ = window;
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaMultimem = false;  // never multimem/NVLS on shared machines
  auto* dev_comm = new ncclDevComm;
  dev_comm_ = dev_comm;
  TRY_NCCL(ncclDevCommCreate(comm, &reqs, dev_comm), "ncclDevCommCreate (ceiling)");
  dev_comm_created_ = true;

  TRY_CUDA(cudaMalloc(&source_, static_cast<size_t>(slot_bytes_)), "cudaMalloc (ceiling source)");
  TRY_CUDA(cudaMemset(source_, 0x5a, static_cast<size_t>(slot_bytes_)), "filling the ceiling source");
  TRY_CUDA(cudaMalloc(reinterpret_cast<void**>(&done_), sizeof(uint32_t)), "cudaMalloc (ceiling counter)");
  TRY_CUDA(cudaMemset(done_, 0, sizeof(uint32_t)), "zeroing the ceiling counter");
  TRY_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&fail_host_), sizeof(int), cudaHostAllocMapped),
           "cudaHostAlloc (ceiling failure flag)");
  *fail_host_ = 0;
  TRY_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&fail_device_), fail_host_, 0),
           "cudaHostGetDevicePointer (ceiling failure flag)");
  TRY_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, session.device()), "cudaDeviceGetAttribute");
  // Two blocks per SM, dealt evenly to the peers.
  const int peers = lsa_size_ - 1;
  blocks_ = std::max(1, (2 * sms_ + peers - 1) / peers) * peers;
  TRY_CUDA(cudaDeviceSynchronize(), "ceiling set-up");
  return true;
}

void LsaCeiling::teardown() {
  if (s_ == nullptr) return;
  const ncclComm_t comm = static_cast<ncclComm_t>(s_->comm());
  cudaDeviceSynchronize();
  if (dev_comm_created_) ncclDevCommDestroy(comm, static_cast<ncclDevComm*>(dev_comm_));
  dev_comm_created_ = false;
  delete static_cast<ncclDevComm*>(dev_comm_);
  dev_comm_ = nullptr;
  if (window_ != nullptr) ncclCommWindowDeregister(comm, static_cast<ncclWindow_t>(window_));
  window_ = nullptr;
  if (memory_ != nullptr) ncclMemFree(memory_);
  memory_ = nullptr;
  if (source_ != nullptr) cudaFree(source_);
  source_ = nullptr;
  if (done_ != nullptr) cudaFree(done_);
  done_ = nullptr;
  if (fail_host_ != nullptr) cudaFreeHost(fail_host_);
  fail_host_ = nullptr;
  fail_device_ = nullptr;
  s_ = nullptr;
}

int LsaCeiling::budget_blocks(int sms) const {
  const int peers = lsa_size_ - 1;
  return std::max(1, sms / peers) * peers;
}

bool LsaCeiling::launch(const std::vector<int64_t>& bytes_to, int blocks, int threads, std::string& error) {
  CopyParams p;
  std::memset(&p, 0, sizeof p);
  p.window = static_cast<ncclWindow_t>(window_);
  p.source = static_cast<const int4*>(source_);
  for (int q = 0; q < lsa_size_; ++q) {
    const int64_t bytes = q == lsa_rank_ ? 0 : round_up(bytes_to[static_cast<size_t>(q)], 16);
    if (bytes > slot_bytes_) {
      error = "the ceiling was asked to send " + std::to_string(bytes) +
              " bytes to a peer; its "
              "window holds " +
              std::to_string(slot_bytes_);
      return false;
    }
    p.vectors_to[q] = bytes / 16;
  }
  p.slot_bytes = slot_bytes_;
  p.signal_offset = slot_bytes_ * lsa_size_;
  p.lsa_rank = lsa_rank_;
  p.lsa_size = lsa_size_;
  p.blocks_per_peer = blocks / (lsa_size_ - 1);
  p.epoch = ++epoch_;
  p.timeout_ns = timeout_ns_;
  p.done = done_;
  p.failed = fail_device_;
  ceiling_copy<<<blocks, threads, 0, s_->stream()>>>(p);
  TRY_CUDA(cudaGetLastError(), "launching the ceiling copy");
  return true;
}

bool LsaCeiling::failed(std::string& error) {
  if (*static_cast<volatile int*>(fail_host_) == 0) return false;
  error = "ceiling copy: a peer did not signal within the timeout (rank " + std::to_string(s_->rank()) + " waited)";
  return true;
}

bool LsaCeiling::measure_peak(int64_t bytes_per_peer, int warmup, int iters, Summary& out, std::string& error) {
  const std::vector<int64_t> bytes_to(static_cast<size_t>(lsa_size_), bytes_per_peer);
  EventMarks marks(iters, 2);
  for (int i = 0; i < warmup; ++i) {
    if (!launch(bytes_to, blocks_, kThreads, error)) return false;
  }
  for (int i = 0; i < iters; ++i) {
    marks.record(i, 0, s_->stream());
    if (!launch(bytes_to, blocks_, kThreads, error)) return false;
    marks.record(i, 1, s_->stream());
  }
  TRY_CUDA(cudaStreamSynchronize(s_->stream()), "running the ceiling copy");
  if (failed(error)) return false;
  std::vector<double> us;
  if (!marks.ok() || !marks.elapsed_us(0, 1, us)) {
    error = "reading the ceiling's CUDA events";
    return false;
  }
  out = summarize(us);
  return true;
}

bool LsaCeiling::measure_point(const RankTraffic& traffic, int warmup, int iters, const std::string& who, int sms,
                               MetricList& out, std::string& error) {
  const int blocks = sms > 0 ? budget_blocks(sms) : blocks_;
  const int threads = sms > 0 ? kBudgetThreads : kThreads;
  EventMarks marks(iters, 3);
  for (int i = 0; i < warmup; ++i) {
    if (!launch(traffic.dispatch_to, blocks, threads, error) || !launch(traffic.combine_to, blocks, threads, error)) {
      return false;
    }
  }
  for (int i = 0; i < iters; ++i) {
    marks.record(i, 0, s_->stream());
    if (!launch(traffic.dispatch_to, blocks, threads, error)) return false;
    marks.record(i, 1, s_->stream());
    if (!launch(traffic.combine_to, blocks, threads, error)) return false;
    marks.record(i, 2, s_->stream());
  }
  TRY_CUDA(cudaStreamSynchronize(s_->stream()), "running the ceiling copy");
  if (failed(error)) return false;
  std::vector<double> d, c, step;
  if (!marks.ok() || !marks.elapsed_us(0, 1, d) || !marks.elapsed_us(1, 2, c) || !marks.elapsed_us(0, 2, step)) {
    error = "reading the ceiling's CUDA events";
    return false;
  }
  out.emplace_back(who + ".kernel.dispatch", summarize(d));
  out.emplace_back(who + ".kernel.combine", summarize(c));
  out.emplace_back(who + ".kernel.step", summarize(step));
  return true;
}

}  // namespace epc::bench
