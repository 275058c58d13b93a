// SPDX-License-Identifier: Apache-2.0
// Waiting for line words (line_words.cuh) to carry a step's epoch, bounded by the group's
// timeout: a late word is polled again at the pace of every other wait (peer_wait.cuh).
#pragma once

#include <cstdint>

#include "kernels/device/line_words.cuh"
#include "kernels/device/peer_wait.cuh"

namespace epc::kernels {

// Who waits and whom for, as a timeout reports it: the phase, this rank, the rank that sends.
struct LineWait {
  uint64_t timeout_ns;
  DeviceError* error;
  uint32_t phase;
  int rank;
  int peer;
};

// Polls the line vector at `at` until every word carries `epoch`, then stores its data in
// `*data`. False on a timeout or a failed group (recorded in `w.error`).
__device__ __forceinline__ bool await_line_vector(const int4* at, uint32_t epoch, const LineWait& w, int4* data) {
  LineVector line;
  const bool ok =
      poll_until([at] { return load_line_vector(at); }, [epoch](const LineVector& v) { return line_arrived(v, epoch); },
                 &line, w.timeout_ns, w.error, w.phase, w.rank, w.peer);
  *data = line_data(line);
  return ok;
}

// The same for the one word at `at`.
__device__ __forceinline__ bool await_line_word(const uint64_t* at, uint32_t epoch, const LineWait& w, uint32_t* data) {
  uint64_t word = 0;
  const bool ok =
      poll_until([at] { return load_line_word(at); }, [epoch](uint64_t v) { return word_arrived(v, epoch); }, &word,
                 w.timeout_ns, w.error, w.phase, w.rank, w.peer);
  *data = word_data(word);
  return ok;
}

}  // namespace epc::kernels
