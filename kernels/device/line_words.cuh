// SPDX-License-Identifier: Apache-2.0
// Line words: data that carries its own arrival. Each 8-byte word holds 4 bytes of data in
// its low half and a step's epoch in its high half, stored relaxed at system scope
// (st.volatile), which the PTX memory model makes single-copy atomic for an aligned 8-byte
// element: a word read with the awaited epoch holds the data stored with it, with no fence
// and no flag after the data. A 16-byte vector of data travels as two 16-byte stores of two
// words each (32 bytes). bench/line_probe.cu measures the protocol against a flag.
#pragma once

#include <cstdint>

namespace epc::kernels {

// Two words at `at` (16-byte aligned, in this GPU's memory or a peer's).
__device__ __forceinline__ void store_line_words(uint64_t* at, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void load_line_words(const uint64_t* at, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(at) : "memory");
}

// One word at `at` (8-byte aligned).
__device__ __forceinline__ void store_line_word(uint64_t* at, uint64_t w) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(at), "l"(w) : "memory");
}
__device__ __forceinline__ uint64_t load_line_word(const uint64_t* at) {
  uint64_t w;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(w) : "l"(at) : "memory");
  return w;
}

// A 16-byte vector's line: its four 4-byte words, each beside the epoch.
struct LineVector {
  uint64_t w[4];
};

__device__ __forceinline__ uint64_t line_word(uint32_t data, uint32_t epoch) {
  return static_cast<uint64_t>(epoch) << 32 | data;
}

// Stores vector `data` with `epoch` as the line at `line` (32 bytes, 16-byte aligned).
__device__ __forceinline__ void store_line_vector(int4* line, int4 data, uint32_t epoch) {
  uint64_t* at = reinterpret_cast<uint64_t*>(line);
  store_line_words(at, line_word(static_cast<uint32_t>(data.x), epoch),
                   line_word(static_cast<uint32_t>(data.y), epoch));
  store_line_words(at + 2, line_word(static_cast<uint32_t>(data.z), epoch),
                   line_word(static_cast<uint32_t>(data.w), epoch));
}

__device__ __forceinline__ LineVector load_line_vector(const int4* line) {
  const uint64_t* at = reinterpret_cast<const uint64_t*>(line);
  LineVector v;
  load_line_words(at, v.w[0], v.w[1]);
  load_line_words(at + 2, v.w[2], v.w[3]);
  return v;
}

// Whether every word of the line carries `epoch` (then its data is whole).
__device__ __forceinline__ bool line_arrived(const LineVector& v, uint32_t epoch) {
  const uint32_t e = epoch;
  return static_cast<uint32_t>(v.w[0] >> 32) == e && static_cast<uint32_t>(v.w[1] >> 32) == e &&
         static_cast<uint32_t>(v.w[2] >> 32) == e && static_cast<uint32_t>(v.w[3] >> 32) == e;
}

__device__ __forceinline__ bool word_arrived(uint64_t w, uint32_t epoch) {
  return static_cast<uint32_t>(w >> 32) == epoch;
}
__device__ __forceinline__ uint32_t word_data(uint64_t w) { return static_cast<uint32_t>(w); }

__device__ __forceinline__ int4 line_data(const LineVector& v) {
  return make_int4(static_cast<int>(static_cast<uint32_t>(v.w[0])), static_cast<int>(static_cast<uint32_t>(v.w[1])),
                   static_cast<int>(static_cast<uint32_t>(v.w[2])), static_cast<int>(static_cast<uint32_t>(v.w[3])));
}

}  // namespace epc::kernels
