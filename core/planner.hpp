// SPDX-License-Identifier: Apache-2.0
// The planner: a pure function from (configuration, topology) to the byte layout of a
// group's symmetric window and the device resources it needs. Group creation allocates
// exactly this; epc_plan_query shows it to users before they allocate anything.
//
// Layout of one rank's window (offsets from its start; every region 256-byte aligned):
//   control                      the group barrier's inbox: [nranks] uint64 epochs, one per
//                                rank of the group, signalled by that rank (across nodes
//                                through the network transport)
//   Low-latency mode, per double-buffer slot s in {0, 1}:
//     dispatch_recv[s]           [nranks][max_tokens][message_bytes]: token messages, one per
//                                (source rank, source token); a message is a header (token,
//                                entry count, then max_topk (local expert, position, weight)
//                                entries naming the token's experts on this rank), then the
//                                payload (kernels/wire/ll_message.hpp), padded to 16 bytes
//                                so every message starts 16-byte aligned; then the [nranks]
//                                [local_experts] int32 table of entries per source and expert
//     dispatch_signal[s]         [nranks] uint64 arrival words, one per source rank
//     combine_recv[s]            [nranks][max_tokens][hidden] bf16: each expert rank's
//                                pre-reduced partial sum for each of this rank's tokens;
//                                with EPC_GROUP_COMBINE_PER_ENTRY [nranks][max_tokens]
//                                [max_topk][hidden]: each entry's row (EPC_WEIGHTING_HOME)
//     combine_signal[s]          [nranks] uint64
//   High-throughput mode (kernels/wire/ht_message.hpp has the slot formats):
//     layout[s], s in {0, 1}     [nranks] uint64 signals and [nranks] of round two, then
//                                [nranks][ht_layout_words] int32 words from each source and
//                                [nranks][local_experts] of round two (core/plan.hpp);
//                                successive layouts alternate
//     dispatch_recv              [nranks][max_tokens] dispatch slots: row, fp8 scales, top-k
//     dispatch_signal            [nranks][max_tokens / kHtChunkTokens] uint64 chunk flags,
//                                then [nranks] uint64 acknowledgements (written by receivers)
//     combine_recv               [nranks][max_tokens] combine slots: row, top-k weights; with
//                                EPC_GROUP_COMBINE_PER_ENTRY [nranks][max_tokens * max_topk],
//                                slot [d][j * max_topk + k] holding entry k of d's row j
//     combine_signal             like dispatch_signal
//     rail_recv, rail_signal     with more than one node: [nodes][max_tokens] rail slots
//                                (tokens from the rail peer of each node, to forward inside
//                                this node) and [nodes][max_tokens / kHtChunkTokens] uint64
//                                chunk flags carrying which of the chunk's tokens came
//   net_staging                  with more than one node, last (so one-node windows keep every
//                                offset): what this rank sends to ranks of other nodes, its own
//                                row of each array it writes there, once per destination
//                                (core/staging_plan.hpp, kernels/wire/staging_map.hpp)
#pragma once

#include "core/config.hpp"
#include "core/plan.hpp"
#include "core/topology.hpp"

namespace epc {

// Throws epc::Error on an invalid configuration or topology. The node size comes from
// config.virtual_node_size (with_virtual_nodes); topo.node_size is ignored.
Plan make_plan(const GroupConfig& config, const Topology& topo);

}  // namespace epc
