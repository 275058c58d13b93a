// SPDX-License-Identifier: Apache-2.0
// The messages a low-latency receive half walks: record [source][index] for every message
// each source sent in the step (ll_message_index.cuh), numbered 0.. in (source, index) order
// so warps can share them out.
#pragma once

#include <cstdint>

namespace epc::kernels {

struct ReceivedMessage {
  int source;
  int in_source;  // among the source's messages here: its token's place here, or this
                  // rank's own token (ll_message_index.cuh)
  int index;      // slot number: source * max_tokens + in_source
  int number;     // i: its place in (source, in_source) order, which indexes the handle's records
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
  int in_source = i;
  while (s < nranks - 1 && in_source >= static_cast<int>(tokens_from[s])) {
    in_source -= static_cast<int>(tokens_from[s]);
    ++s;
  }
  return {s, in_source, s * max_tokens + in_source, i};
}

}  // namespace epc::kernels
