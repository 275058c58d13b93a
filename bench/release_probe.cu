// SPDX-License-Identifier: Apache-2.0
// epcomm-release-probe: what the way a sending launch publishes its stores costs the launch, on
// this GPU, apart from the kernels. Its kernel has the shape of a 1-token LL sending launch
// (8 blocks of 256 threads, each copying one 14 KB row, hidden 7168 in 16 bits); after the
// copy and a block barrier, thread 0 of each block ends in one of the ways below. Each ending
// runs 200 times in one CUDA graph, replayed five times and timed with events; the line is the
// median replay over 200, in microseconds, for three rounds: first with the rows and flags in
// this GPU's memory, then, where a second GPU is visible and reachable, in that GPU's memory
// (as a sending launch stores into a peer's window over NVLink), where a release also waits
// for the peer's acknowledgements. epcomm-fence-probe gives one operation's cost to its
// thread in cycles; this gives what it adds to a whole launch, where a release waits for its
// block's stores and a chain of them adds up
// (bench/results/release_chain_probe_session41_1xh200.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int kBlocks = 8;
constexpr int kThreads = 256;
constexpr int kRowBytes = 14336;
constexpr int kRounds = 3;
constexpr int kLaunchesPerGraph = 200;
constexpr int kReplays = 5;

enum Ending {
  kNothing,
  kReleaseGpu,
  kReleaseSys,
  kFenceScSys,
  kRelaxedAdd,
  kCount,
  kCountThenReleaseSys,
  kCountSysThenReleaseSys,
  kCountThenFenceSys,
  kReduceReleaseSys,
  kEndings
};
const char* const kNames[kEndings] = {
    "nothing (the stores only)",
    "st.release.gpu",
    "st.release.sys",
    "fence.sc.sys, store",
    "relaxed atomic add",
    "count (atom.acq_rel.gpu)",
    "count, last block st.release.sys",
    "count at sys scope, last st.release.sys",
    "count, last fence.acq_rel.sys, store",
    "red.release.sys.add (a block's own signal)",
};

// words[0, kBlocks * 16): each block's flag, 128 bytes apart; words[kBlocks * 16]: the count.
template <Ending kEnding>
__global__ void __launch_bounds__(kThreads) copy_then_end(int4* out, const int4* in, uint64_t* words) {
  constexpr int kVectors = kRowBytes / 16;
  for (int v = threadIdx.x; v < kVectors; v += blockDim.x) {
    out[blockIdx.x * kVectors + v] = in[blockIdx.x * kVectors + v];
  }
  if (kEnding == kNothing) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint64_t* flag = words + blockIdx.x * 16;
  uint64_t* count = words + kBlocks * 16;
  uint64_t before = 0;
  switch (kEnding) {
    case kReleaseGpu:
      asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(flag), "l"(1ull) : "memory");
      return;
    case kReleaseSys:
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(1ull) : "memory");
      return;
    case kFenceScSys:
      asm volatile("fence.sc.sys;" ::: "memory");
      asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(1ull) : "memory");
      return;
    case kRelaxedAdd:
      asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(count), "l"(1ull) : "memory");
      return;
    case kReduceReleaseSys:
      asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(flag), "l"(1ull) : "memory");
      return;
    case kCountSysThenReleaseSys:
      asm volatile("atom.acq_rel.sys.global.add.u64 %0, [%1], %2;" : "=l"(before) : "l"(count), "l"(1ull) : "memory");
      break;
    default:  // kCount, kCountThenReleaseSys, kCountThenFenceSys
      asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(before) : "l"(count), "l"(1ull) : "memory");
      break;
  }
  // The count only grows (kBlocks per launch): the block that completes a multiple is last.
  if (kEnding == kCount || (before + 1) % kBlocks != 0) return;
  if (kEnding == kCountThenFenceSys) {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(before) : "memory");
  } else {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(before) : "memory");
  }
}

using Kernel = void (*)(int4*, const int4*, uint64_t*);
constexpr Kernel kEndingKernels[kEndings] = {copy_then_end<kNothing>,
                                             copy_then_end<kReleaseGpu>,
                                             copy_then_end<kReleaseSys>,
                                             copy_then_end<kFenceScSys>,
                                             copy_then_end<kRelaxedAdd>,
                                             copy_then_end<kCount>,
                                             copy_then_end<kCountThenReleaseSys>,
                                             copy_then_end<kCountSysThenReleaseSys>,
                                             copy_then_end<kCountThenFenceSys>,
                                             copy_then_end<kReduceReleaseSys>};

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "epcomm-release-probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Owns what one ending's measurement makes.
struct GraphOf {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphOf() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

// The median of kReplays replays of kLaunchesPerGraph launches, per launch, in us; < 0 on error.
double time_ending(Kernel kernel, int4* out, const int4* in, uint64_t* words, cudaStream_t stream, cudaEvent_t start,
                   cudaEvent_t stop) {
  GraphOf g;
  if (!check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) return -1;
  for (int i = 0; i < kLaunchesPerGraph; ++i) kernel<<<kBlocks, kThreads, 0, stream>>>(out, in, words);
  if (!check(cudaStreamEndCapture(stream, &g.graph), "cudaStreamEndCapture") ||
      !check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate") ||
      !check(cudaGraphLaunch(g.exec, stream), "the uploading replay")) {
    return -1;
  }
  float us[kReplays];
  for (float& u : us) {
    float ms = 0;
    if (!check(cudaEventRecord(start, stream), "cudaEventRecord") ||
        !check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch") ||
        !check(cudaEventRecord(stop, stream), "cudaEventRecord") || !check(cudaEventSynchronize(stop), "the replay") ||
        !check(cudaEventElapsedTime(&ms, start, stop), "timing")) {
      return -1;
    }
    u = ms * 1000.0f / kLaunchesPerGraph;
  }
  std::sort(us, us + kReplays);
  return us[kReplays / 2];
}

// The buffers one table's launches store into, on `device` (read from this GPU's memory).
struct Buffers {
  int4* out = nullptr;
  uint64_t* words = nullptr;
  ~Buffers() {
    cudaFree(out);
    cudaFree(words);
  }
};

bool allocate_on(int device, size_t row_bytes, Buffers& b) {
  int current = 0;
  const size_t word_bytes = sizeof(uint64_t) * (kBlocks * 16 + 16);
  const bool ok =
      check(cudaGetDevice(&current), "cudaGetDevice") && check(cudaSetDevice(device), "cudaSetDevice") &&
      check(cudaMalloc(&b.out, row_bytes), "cudaMalloc") && check(cudaMalloc(&b.words, word_bytes), "cudaMalloc") &&
      check(cudaMemset(b.words, 0, word_bytes), "cudaMemset") && check(cudaDeviceSynchronize(), "the memset");
  return check(cudaSetDevice(current), "cudaSetDevice") && ok;
}

bool run_table(const char* where, const int4* in, const Buffers& b, cudaStream_t stream, cudaEvent_t start,
               cudaEvent_t stop) {
  for (int round = 0; round < kRounds; ++round) {
    for (int e = 0; e < kEndings; ++e) {
      const double us = time_ending(kEndingKernels[e], b.out, in, b.words, stream, start, stop);
      if (us < 0) return false;
      std::printf("%s round %d  %-42s %6.3f us per launch\n", where, round, kNames[e], us);
    }
  }
  return true;
}

}  // namespace

int main() {
  const size_t row_bytes = static_cast<size_t>(kBlocks) * kRowBytes;
  int4* in = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  int devices = 0, reachable = 0;
  bool ok = check(cudaSetDevice(0), "cudaSetDevice") && check(cudaMalloc(&in, row_bytes), "cudaMalloc") &&
            check(cudaMemset(in, 1, row_bytes), "cudaMemset") &&
            check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") &&
            check(cudaEventCreate(&start), "cudaEventCreate") && check(cudaEventCreate(&stop), "cudaEventCreate") &&
            check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  {
    Buffers local;
    ok = ok && allocate_on(0, row_bytes, local) && run_table("local", in, local, stream, start, stop);
  }
  if (ok && devices > 1) ok = check(cudaDeviceCanAccessPeer(&reachable, 0, 1), "cudaDeviceCanAccessPeer");
  if (ok && reachable != 0) {
    const cudaError_t enabled = cudaDeviceEnablePeerAccess(1, 0);
    if (enabled == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    Buffers peer;
    ok = (enabled == cudaErrorPeerAccessAlreadyEnabled || check(enabled, "cudaDeviceEnablePeerAccess")) &&
         allocate_on(1, row_bytes, peer) && run_table("peer ", in, peer, stream, start, stop);
  } else if (ok) {
    std::printf("no peer table: %s\n", devices > 1 ? "GPU 0 cannot reach GPU 1" : "one GPU visible");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(in);
  return ok ? 0 : 1;
}
