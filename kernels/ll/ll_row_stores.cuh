// SPDX-License-Identifier: Apache-2.0
// A received row's 16-byte vectors stored into every output row the message feeds (its entries
// on this rank). A thread keeps the first rows' numbers in registers, loaded once per message,
// so that the stores of each vector wait for no shared-memory load.
#pragma once

#include <cstddef>

namespace epc::kernels {

// Rows of a message whose numbers a thread keeps in registers (top-k 8 fills them).
constexpr int kRowsInRegisters = 8;

// A message's output rows: out + row * row_bytes for each row number (negative: the entry did
// not fit, nothing is stored).
struct MessageRowStores {
  char* out;
  size_t row_bytes;
  int first[kRowsInRegisters];  // the first rows' numbers, -1 past the message's rows
  const int* rows_at;           // every row's number (shared), read for rows past the first ones
  int rows;
};

__device__ __forceinline__ MessageRowStores message_row_stores(void* out, size_t row_bytes, const int* rows_at,
                                                               int rows) {
  MessageRowStores s;
  s.out = static_cast<char*>(out);
  s.row_bytes = row_bytes;
#pragma unroll
  for (int j = 0; j < kRowsInRegisters; ++j) s.first[j] = j < rows ? rows_at[j] : -1;
  s.rows_at = rows_at;
  s.rows = rows;
  return s;
}

// `q` as vector v of every row.
__device__ __forceinline__ void store_to_rows(const MessageRowStores& s, int v, int4 q) {
#pragma unroll
  for (int j = 0; j < kRowsInRegisters; ++j) {
    if (s.first[j] >= 0) reinterpret_cast<int4*>(s.out + static_cast<size_t>(s.first[j]) * s.row_bytes)[v] = q;
  }
  // Any further rows, rolled: unrolled, the loop only made the kernels larger, and a launch's
  // time on few tokens is mostly the fetch of its code.
#pragma unroll 1
  for (int j = kRowsInRegisters; j < s.rows; ++j) {
    if (s.rows_at[j] >= 0) reinterpret_cast<int4*>(s.out + static_cast<size_t>(s.rows_at[j]) * s.row_bytes)[v] = q;
  }
}

}  // namespace epc::kernels
