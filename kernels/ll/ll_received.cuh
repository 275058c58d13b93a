// SPDX-License-Identifier: Apache-2.0
// The messages a low-latency receive half walks: slot [source][token] for every token each
// source sent in the step, numbered 0.. in (source, token) order so warps can share them out.
#pragma once

#include <cstdint>

namespace epc::kernels {

struct ReceivedMessage {
  int source;
  int token;
  int index;   // slot number: source * max_tokens + token
  int number;  // i: its place in (source, token) order, which indexes the handle's records
};

__device__ __forceinline__ int received_messages(const uint32_t* tokens_from, int nranks) {
  int total = 0;
  for (int s = 0; s < nranks; ++s) total += static_cast<int>(tokens_from[s]);
  return total;
}

// The i-th message, 0 <= i < received_messages(...).
__device__ __forceinline__ ReceivedMessage received_message(int i, const uint32_t* tokens_from, int nranks,
                                                            int max_tokens) {
  int s = 0;
  int token = i;
  while (s < nranks - 1 && token >= static_cast<int>(tokens_from[s])) {
    token -= static_cast<int>(tokens_from[s]);
    ++s;
  }
  return {s, token, s * max_tokens + token, i};
}

}  // namespace epc::kernels
