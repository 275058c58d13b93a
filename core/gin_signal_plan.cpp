// SPDX-License-Identifier: Apache-2.0
#include "core/gin_signal_plan.hpp"

#include "core/error.hpp"
#include "core/plan.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"

namespace epc {

namespace {

class MapBuilder {
 public:
  explicit MapBuilder(kernels::GinSignalMap& map) : map_(map) {}

  // Rows indexed by the writer's rank.
  void by_rank(uint64_t offset, uint32_t row_words, const Topology& t) {
    add(offset, static_cast<uint32_t>(t.nranks), row_words, static_cast<uint32_t>(t.node_size));
  }
  // Rows indexed by the writer's node.
  void by_node(uint64_t offset, uint32_t row_words, const Topology& t) {
    add(offset, static_cast<uint32_t>(t.nodes()), row_words, 1);
  }
  // Rows indexed by rank, of which only the reader's rail peers write across the network.
  void by_rail(uint64_t offset, uint32_t row_words, const Topology& t) {
    add(offset, static_cast<uint32_t>(t.nranks), row_words, static_cast<uint32_t>(t.node_size), 1);
  }

 private:
  void add(uint64_t offset, uint32_t rows, uint32_t row_words, uint32_t rows_per_node, uint32_t rail = 0) {
    if (map_.count == static_cast<uint32_t>(kernels::kMaxGinSignalArrays)) {
      fail(EPC_ERR_INTERNAL, "more GIN signal arrays than kernels::kMaxGinSignalArrays");
    }
    const kernels::GinSignalArray a{offset, rows, row_words, rows_per_node, static_cast<uint32_t>(total_), rail};
    if (total_ + a.ids() > kMaxGinSignalIds) {
      fail(EPC_ERR_UNSUPPORTED, format("the plan needs more than %llu GIN signals (one per flag or counter a rank of "
                                       "another node writes), more than NCCL can provide; use fewer tokens per rank "
                                       "or fewer ranks",
                                       static_cast<unsigned long long>(kMaxGinSignalIds)));
    }
    map_.arrays[map_.count++] = a;
    total_ += a.ids();
    map_.total_ids = static_cast<uint32_t>(total_);
  }

  kernels::GinSignalMap& map_;
  uint64_t total_ = 0;
};

}  // namespace

kernels::GinSignalMap plan_gin_signals(const GroupConfig& c, const Topology& t, const Plan& plan) {
  kernels::GinSignalMap map{};
  if (t.nodes() < 2) return map;
  MapBuilder b(map);
  // The group barrier: every rank signals its epoch into every rank's inbox.
  b.by_rank(plan.region(EPC_REGION_CONTROL).offset + plan.control.barrier_inbox_offset, 1, t);
  if (c.mode == EPC_MODE_LOW_LATENCY) {
    // Every rank signals every rank, in its own row of each slot's signal region: its step
    // signal and its credit (kernels/wire/ll_message.hpp).
    for (uint32_t s = 0; s < plan.num_slots; ++s) {
      b.by_rank(plan.region(EPC_REGION_DISPATCH_SIGNAL, s).offset, kernels::kLlSignalRowWords, t);
      b.by_rank(plan.region(EPC_REGION_COMBINE_SIGNAL, s).offset, kernels::kLlSignalRowWords, t);
    }
    return map;
  }
  const uint32_t chunks = static_cast<uint32_t>(kernels::ht_chunks(static_cast<int>(c.max_tokens_per_rank)));
  const uint64_t acks = ht_acks_offset(c, t.nranks);
  // Both rounds of each layout slot (kernels/ht/ht_layout.cu; round two, the kept counts
  // under a receive capacity, ht_layout_capacity.cuh).
  for (uint32_t s = 0; s < kHtLayoutSlots; ++s) {
    const uint64_t slot = plan.region(EPC_REGION_LAYOUT, s).offset;
    b.by_rank(slot, 1, t);
    b.by_rank(slot + ht_layout_round2_signals(t.nranks), 1, t);
  }
  // Dispatch chunk flags from other nodes are raised by this node's forwarders (the rail
  // scheme), so only the acknowledgements of the dispatch signal region cross the network.
  b.by_rank(plan.region(EPC_REGION_DISPATCH_SIGNAL).offset + acks, 1, t);
  // Combine chunk flags cross the network only as partials from the reader's rail peer in
  // every other node (rows of the other ranks there are returned by this node's ranks).
  b.by_rail(plan.region(EPC_REGION_COMBINE_SIGNAL).offset, chunks, t);
  b.by_rank(plan.region(EPC_REGION_COMBINE_SIGNAL).offset + acks, 1, t);
  b.by_node(plan.region(EPC_REGION_RAIL_SIGNAL).offset, chunks, t);
  return map;
}

}  // namespace epc
