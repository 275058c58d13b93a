// SPDX-License-Identifier: Apache-2.0
// A CPU model of high-throughput dispatch and combine across nodes over credit rings (issue
// 27, step C; docs/design.md "The staging map" says what remains): ranks are state machines
// (senders and forwarders, receivers, combine producers and consumers), rings use the
// arithmetic of kernels/wire/ht_ring.hpp, and a seeded random scheduler interleaves them,
// delivering each ring's counters to the other side late and in any order. A run ends when
// nothing can move: it finished (every stream drained) or it deadlocked.
//
// Streams, per channel g (tokens t with t % channels == g):
//   dispatch  source s -> its rail peer in every other node hosting the token (a rail ring),
//             which forwards into the NVLink ring of each destination in its node, beside
//             its own tokens (one producer per (writer, destination, channel)); a rail slot
//             is released only when every destination has taken it. Receivers place rows
//             at recv_base[source] + the header's row.
//   combine   rank d -> for a source s of its node, s itself; for a source s of another
//             node, s's rail peer p in d's node (NVLink rings, rows in key order
//             (token, source node)); p sums its node's rows for s's token in rank order and
//             puts the bf16 partial into the ring p -> s (across nodes); s adds its node's
//             rows and then the partials in node order: ref::ht_combine's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"

namespace epc::test {

struct RingModelShape {
  int nodes = 2;
  int node_size = 2;
  int channels = 1;
  uint32_t capacity = 1;  // slots of every ring
};

// What one step produced on every rank.
struct RingModelStep {
  std::vector<std::vector<uint16_t>> dispatched;  // per rank: [rows, H], in the reference's row order
  std::vector<std::vector<ref::TokenRef>> src;    // per rank: [rows]
  std::vector<std::vector<uint16_t>> combined;    // per rank: [B_r, H]
};

struct RingModelRun {
  bool deadlocked = false;
  std::string stuck;  // what was still pending when nothing could move
  std::vector<RingModelStep> steps;
  uint64_t moves = 0;              // scheduler moves that made progress
  uint32_t max_occupancy = 0;      // the most slots any ring held at once (tail - head)
  uint64_t slots_through_all = 0;  // slots every ring carried in all, over every step
};

struct RingModelOptions {
  uint64_t seed = 1;
  // Test-only: each forwarder drains its rail inputs one after the other, starting from the
  // next node's, instead of polling them all: the waits then form a cycle across three nodes,
  // which shows the model finds a deadlock where there is one.
  bool blocking_forwarder = false;
};

// Runs the problems' steps one after the other on one set of rings (counters carry over).
// combine_in[i][q]: step i's combine input on rank q, bf16 [rows of ref::ht_dispatch, H].
RingModelRun run_ring_model(const RingModelShape& shape, const std::vector<ref::Problem>& problems,
                            const std::vector<std::vector<std::vector<uint16_t>>>& combine_in,
                            const RingModelOptions& options);

}  // namespace epc::test
