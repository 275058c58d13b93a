// SPDX-License-Identifier: Apache-2.0
// Decoding a fuzzer's bytes into values, deterministically: the same bytes always give the
// same calls, so a crash reproduces from its input file alone (also in the GCC replay build,
// which has no <fuzzer/FuzzedDataProvider.h>). Reads past the end give zeros.
//
// Numbers come in two forms: raw (every bit from the input) and "picked" (a selector byte
// chooses among the values that matter to the checks: 0, 1, limits and limits +- 1, powers of
// two, the type's extremes), so short inputs reach both valid and boundary configurations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace epc::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - offset_; }

  // Copies up to `n` bytes into `out`, zero-filling what the input no longer has.
  void bytes(void* out, size_t n) {
    const size_t take = n < remaining() ? n : remaining();
    if (take > 0) std::memcpy(out, data_ + offset_, take);
    if (take < n) std::memset(static_cast<unsigned char*>(out) + take, 0, n - take);
    offset_ += take;
  }

  template <typename T>
  T raw() {
    T value;
    bytes(&value, sizeof value);
    return value;
  }

  uint8_t byte() { return raw<uint8_t>(); }
  bool boolean() { return (byte() & 1) != 0; }

  // A value from `table` (selected by one byte), or a raw value.
  template <typename T, size_t N>
  T pick(const T (&table)[N]) {
    const uint8_t selector = byte();
    if (selector < 2 * N) return table[selector % N];
    if (selector < 0xF0) return static_cast<T>(selector - 2 * N);  // small values
    return raw<T>();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

// The fuzzer's own invariant checks: a failure prints what broke and aborts, which libFuzzer
// (and the replay driver) report as a crash with the input that caused it.
[[noreturn]] inline void violated(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s\n", file, line, what);
  std::abort();
}

}  // namespace epc::fuzz

#define FUZZ_CHECK(condition)                                                \
  do {                                                                       \
    if (!(condition)) ::epc::fuzz::violated(__FILE__, __LINE__, #condition); \
  } while (0)
