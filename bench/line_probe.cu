// SPDX-License-Identifier: Apache-2.0
// epcomm-line-probe: the one-way latency of a message between the first two GPUs of a node
// (peer access over NVLink), measured by ping-pong, with two ways of telling the receiver that
// the message is there:
//   flag  what the LL step does today: every block stores its slice of the message into the
//         peer's buffer, counts itself with an acquire-release atomic, and the last block
//         stores the round's number into the peer's flag with a system-scope release; each
//         receiving block polls its own GPU's flag with an acquire load, then reads its slice.
//   line  each 8-byte word carries 4 bytes of the message and the round's number, stored
//         with st.volatile (relaxed, system scope: single-copy atomic at 8 bytes) as the LL
//         combine's line records are (kernels/device/line_words.cuh), so a word
//         that carries the number carries its data: each receiving block polls its own
//         slice's words until every one does, with no count and no fence.
// A block replies with its slice as soon as it has what it waits for (line: its slice; flag:
// the whole message). Every received word is checked against what was sent. The LL step's
// two-rank phase trace puts the count and the release at about a third of a half
// (bench/results/ll_session30_2xh200.md); this gives what a protocol without them would save.
// Prints one line per (protocol, bytes, blocks, repeat): the one-way latency in microseconds
// (kernel time on the first GPU over twice the rounds) and the words that arrived wrong.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/device/line_words.cuh"

namespace {

// Polls a wait makes before it gives up (a few seconds): the probe never hangs.
constexpr long long kMaxPolls = 1ll << 22;
constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t word_value(int round, int i) {
  return static_cast<uint32_t>(round) * 1000003u + static_cast<uint32_t>(i);
}

__device__ __forceinline__ uint4 load_words(const uint32_t* at) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(at)
               : "memory");
  return v;
}
__device__ __forceinline__ void store_release_sys(uint64_t* at, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(at), "l"(value) : "memory");
}
__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* at) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(at) : "memory");
  return value;
}

struct ProbeArgs {
  bool first;  // this GPU sends first in each round
  bool lines;  // the line protocol, else the flag
  int rounds;
  int words;              // 4-byte words of the message (each block's slice an even number)
  uint64_t* buffer;       // this GPU's receive buffer: words (flag) or 8-byte lines (line)
  uint64_t* peer_buffer;  // the peer's
  uint64_t* flag;         // this GPU's flag (flag protocol)
  uint64_t* peer_flag;
  unsigned* counter;  // this GPU's block count (flag protocol)
  unsigned long long* errors;
};

__device__ void send(const ProbeArgs& a, int round, int begin, int end) {
  if (a.lines) {
    const uint64_t tag = static_cast<uint64_t>(round) << 32;
    for (int w = begin + 2 * static_cast<int>(threadIdx.x); w < end; w += 2 * kThreads) {
      epc::kernels::store_line_words(a.peer_buffer + w, tag | word_value(round, w), tag | word_value(round, w + 1));
    }
    return;
  }
  uint32_t* words = reinterpret_cast<uint32_t*>(a.peer_buffer);
  for (int w = begin + 4 * static_cast<int>(threadIdx.x); w < end; w += 4 * kThreads) {
    *reinterpret_cast<uint4*>(words + w) =
        make_uint4(word_value(round, w), word_value(round, w + 1), word_value(round, w + 2), word_value(round, w + 3));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(a.counter) : "memory");
    if (before == gridDim.x - 1) {
      *a.counter = 0;
      store_release_sys(a.peer_flag, static_cast<uint64_t>(round));
    }
  }
}

// Returns false when a wait gave up.
__device__ bool receive(const ProbeArgs& a, int round, int begin, int end, unsigned long long* errors) {
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();
  if (a.lines) {
    for (int w = begin + 2 * static_cast<int>(threadIdx.x); w < end; w += 2 * kThreads) {
      uint64_t x = 0, y = 0;
      long long polls = 0;
      do {
        epc::kernels::load_line_words(a.buffer + w, x, y);
      } while (((x >> 32) != static_cast<uint64_t>(round) || (y >> 32) != static_cast<uint64_t>(round)) &&
               ++polls < kMaxPolls);
      if (polls >= kMaxPolls) gave_up = 1;
      *errors +=
          (static_cast<uint32_t>(x) != word_value(round, w)) + (static_cast<uint32_t>(y) != word_value(round, w + 1));
    }
  } else {
    if (threadIdx.x == 0) {
      long long polls = 0;
      while (load_acquire_sys(a.flag) < static_cast<uint64_t>(round) && ++polls < kMaxPolls) {
      }
      if (polls >= kMaxPolls) gave_up = 1;
    }
    __syncthreads();
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.buffer);
    for (int w = begin + 4 * static_cast<int>(threadIdx.x); w < end; w += 4 * kThreads) {
      const uint4 v = load_words(words + w);
      *errors += (v.x != word_value(round, w)) + (v.y != word_value(round, w + 1)) + (v.z != word_value(round, w + 2)) +
                 (v.w != word_value(round, w + 3));
    }
  }
  __syncthreads();
  return gave_up == 0;
}

__global__ void __launch_bounds__(kThreads) ping_pong(ProbeArgs a) {
  const int per_block = (a.words + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int begin = static_cast<int>(blockIdx.x) * per_block;
  const int end = min(a.words, begin + per_block);
  unsigned long long errors = 0;
  bool ok = true;
  for (int round = 1; round <= a.rounds && ok; ++round) {
    if (a.first) {
      send(a, round, begin, end);
      ok = receive(a, round, begin, end, &errors);
    } else {
      ok = receive(a, round, begin, end, &errors);
      if (ok) send(a, round, begin, end);
    }
  }
  if (errors != 0) atomicAdd(a.errors, errors);
  if (!ok && threadIdx.x == 0) atomicAdd(a.errors, 1ull << 40);  // a wait gave up
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "epcomm-line-probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// One GPU's buffers and stream, released with it.
struct Side {
  int device = -1;
  uint64_t* buffer = nullptr;
  uint64_t* flag = nullptr;
  unsigned* counter = nullptr;
  unsigned long long* errors = nullptr;
  cudaStream_t stream = nullptr;
  Side() = default;
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  ~Side() {
    if (device < 0 || cudaSetDevice(device) != cudaSuccess) return;
    if (stream != nullptr) cudaStreamDestroy(stream);
    cudaFree(buffer);
    cudaFree(flag);
    cudaFree(counter);
    cudaFree(errors);
  }
};

constexpr int kMaxWords = 1 << 20;

bool reset(Side& s, int device) {
  return check(cudaSetDevice(device), "cudaSetDevice") &&
         check(cudaMemset(s.buffer, 0, kMaxWords * sizeof(uint64_t)), "cudaMemset") &&
         check(cudaMemset(s.flag, 0, sizeof(uint64_t)), "cudaMemset") &&
         check(cudaMemset(s.counter, 0, sizeof(unsigned)), "cudaMemset") &&
         check(cudaMemset(s.errors, 0, sizeof(unsigned long long)), "cudaMemset") &&
         check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (rounds < 1) {
    std::fprintf(stderr, "usage: epcomm-line-probe [ROUNDS > 0]\n");
    return 2;
  }
  int devices = 0;
  if (!check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return 1;
  if (devices < 2) {
    std::printf("epcomm-line-probe: needs two GPUs with peer access; %d visible\n", devices);
    return 0;
  }
  Side side[2];
  for (int d = 0; d < 2; ++d) {
    int can = 0;
    if (!check(cudaSetDevice(d), "cudaSetDevice") ||
        !check(cudaDeviceCanAccessPeer(&can, d, 1 - d), "cudaDeviceCanAccessPeer")) {
      return 1;
    }
    if (!can) {
      std::printf("epcomm-line-probe: GPU %d cannot access GPU %d\n", d, 1 - d);
      return 0;
    }
    Side& s = side[d];
    s.device = d;
    if (!check(cudaDeviceEnablePeerAccess(1 - d, 0), "cudaDeviceEnablePeerAccess") ||
        !check(cudaMalloc(&s.buffer, kMaxWords * sizeof(uint64_t)), "cudaMalloc") ||
        !check(cudaMalloc(&s.flag, sizeof(uint64_t)), "cudaMalloc") ||
        !check(cudaMalloc(&s.counter, sizeof(unsigned)), "cudaMalloc") ||
        !check(cudaMalloc(&s.errors, sizeof(unsigned long long)), "cudaMalloc") ||
        !check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
      return 1;
    }
  }
  // A slice of a bf16 row of hidden 7168 (one block), a row in 8 slices (the LL step at 1
  // token), 4 rows (4 tokens) and 16 rows in 8 slices each.
  struct Case {
    int bytes, blocks;
  };
  const Case cases[] = {{1792, 1}, {14336, 8}, {57344, 32}, {229376, 128}};
  std::printf("protocol bytes blocks one_way_us wrong_words\n");
  for (bool lines : {false, true}) {
    for (const Case& k : cases) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        if (!reset(side[0], 0) || !reset(side[1], 1)) return 1;
        cudaEvent_t start = nullptr, stop = nullptr;
        if (!check(cudaSetDevice(0), "cudaSetDevice") || !check(cudaEventCreate(&start), "cudaEventCreate") ||
            !check(cudaEventCreate(&stop), "cudaEventCreate")) {
          return 1;
        }
        // The second GPU's kernel first: it waits for the first round.
        for (int d = 1; d >= 0; --d) {
          const Side& s = side[d];
          const Side& peer = side[1 - d];
          const ProbeArgs a{d == 0,      lines,  rounds,    k.bytes / 4, s.buffer,
                            peer.buffer, s.flag, peer.flag, s.counter,   s.errors};
          if (!check(cudaSetDevice(d), "cudaSetDevice")) return 1;
          if (d == 0 && !check(cudaEventRecord(start, s.stream), "cudaEventRecord")) return 1;
          ping_pong<<<k.blocks, kThreads, 0, s.stream>>>(a);
          if (!check(cudaGetLastError(), "ping_pong launch")) return 1;
          if (d == 0 && !check(cudaEventRecord(stop, s.stream), "cudaEventRecord")) return 1;
        }
        unsigned long long wrong[2] = {0, 0};
        for (int d = 0; d < 2; ++d) {
          if (!check(cudaSetDevice(d), "cudaSetDevice") || !check(cudaStreamSynchronize(side[d].stream), "ping_pong") ||
              !check(cudaMemcpy(&wrong[d], side[d].errors, sizeof wrong[d], cudaMemcpyDeviceToHost), "cudaMemcpy")) {
            return 1;
          }
        }
        float ms = 0;
        if (!check(cudaSetDevice(0), "cudaSetDevice") || !check(cudaEventElapsedTime(&ms, start, stop), "elapsed")) {
          return 1;
        }
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        const unsigned long long total = wrong[0] + wrong[1];
        if (total >= (1ull << 40)) {
          std::printf("%s %d %d gave-up -\n", lines ? "line" : "flag", k.bytes, k.blocks);
          return 1;
        }
        std::printf("%s %d %d %.3f %llu\n", lines ? "line" : "flag", k.bytes, k.blocks, ms * 1000.0 / (2.0 * rounds),
                    total);
      }
    }
  }
  return 0;
}
