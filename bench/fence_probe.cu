// SPDX-License-Identifier: Apache-2.0
// epcomm-fence-probe: what one memory fence or release costs one thread on this GPU, in
// cycles (clock64), after 0 to 128 stores of its own, from one block or from every SM at
// once. The LL kernels' critical path at small batches is a chain of such operations (the
// last-block count's acquire-release atomic, the signal's system-scope release); this probe
// gives their fixed cost apart from the kernels (bench/results/ll_session13_fp8_1xh100.md),
// and what one poll's load of a word costs, with acquire or relaxed order.
// Prints one line per (operation, stores, blocks): the mean over the blocks of the last of
// 20 launches.
#include <cuda_runtime.h>

#include <cstdio>
#include <cuda/atomic>

namespace {

enum Operation {
  kFenceSys,
  kFenceGpu,
  kFenceScSys,
  kAtomicAcqRelGpu,
  kStoreReleaseSys,
  kLoadAcquireSys,
  kLoadRelaxedSys,
  kOperations
};
const char* const kNames[kOperations] = {"fence.acq_rel.sys", "fence.acq_rel.gpu", "fence.sc.sys",  "atom.acq_rel.gpu",
                                         "st.release.sys",    "ld.acquire.sys",    "ld.relaxed.sys"};
constexpr int kWords = 1 << 20;  // stores land in [0, kWords); the atomics' words after them

__global__ void probe(unsigned long long* cycles, int* words, int stores, int operation) {
  if (threadIdx.x != 0) return;
  for (int i = 0; i < stores; ++i) words[blockIdx.x * 4096 + i * 32] = i;
  const unsigned long long start = clock64();
  switch (operation) {
    case kFenceSys:
      asm volatile("fence.acq_rel.sys;" ::: "memory");
      break;
    case kFenceGpu:
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      break;
    case kFenceScSys:
      asm volatile("fence.sc.sys;" ::: "memory");
      break;
    case kAtomicAcqRelGpu: {
      cuda::atomic_ref<int, cuda::thread_scope_device> word(words[kWords]);
      word.fetch_add(1, cuda::memory_order_acq_rel);
      break;
    }
    case kStoreReleaseSys: {
      cuda::atomic_ref<int, cuda::thread_scope_system> word(words[kWords + 64]);
      word.store(1, cuda::memory_order_release);
      break;
    }
    default: {  // a poll's load, its value used (the time includes the round trip)
      cuda::atomic_ref<int, cuda::thread_scope_system> word(words[kWords + 96]);
      const int value =
          word.load(operation == kLoadAcquireSys ? cuda::memory_order_acquire : cuda::memory_order_relaxed);
      if (value == -12345) words[0] = value;  // never true: keeps the load
      break;
    }
  }
  cycles[blockIdx.x] = clock64() - start;
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "epcomm-fence-probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  if (!check(cudaGetDevice(&device), "cudaGetDevice") ||
      !check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute")) {
    return 1;
  }
  unsigned long long* cycles = nullptr;
  int* words = nullptr;
  if (!check(cudaMalloc(&cycles, sizeof(unsigned long long) * sms), "cudaMalloc") ||
      !check(cudaMalloc(&words, sizeof(int) * (kWords + 128)), "cudaMalloc")) {
    return 1;
  }
  unsigned long long host[1024];
  if (sms > 1024) sms = 1024;  // blocks of the all-SM run (one result each in `host`)
  for (int operation = 0; operation < kOperations; ++operation) {
    for (int stores : {0, 1, 16, 128}) {
      for (int blocks : {1, sms}) {
        for (int launch = 0; launch < 20; ++launch) probe<<<blocks, 32>>>(cycles, words, stores, operation);
        if (!check(cudaDeviceSynchronize(), "the probe kernel") ||
            !check(cudaMemcpy(host, cycles, sizeof(unsigned long long) * blocks, cudaMemcpyDeviceToHost),
                   "cudaMemcpy")) {
          return 1;
        }
        double mean = 0;
        for (int b = 0; b < blocks; ++b) mean += static_cast<double>(host[b]) / blocks;
        std::printf("%-18s stores %3d blocks %3d: %8.0f cycles\n", kNames[operation], stores, blocks, mean);
      }
    }
  }
  cudaFree(cycles);
  cudaFree(words);
  return 0;
}
