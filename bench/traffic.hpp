// SPDX-License-Identifier: Apache-2.0
// Bytes a benchmark point moves, counted from the routing of every rank (bench/JSON.md,
// "bytes"). Logical bytes follow DeepEP's rule: low-latency mode counts one row per (token,
// expert) selection, high-throughput mode one row per (token, destination rank), self
// included; payload only. Wire bytes are what leaves the GPU, that is what our kernels store
// into other GPUs' memory, following their message format (the WireFormat below: keep it in
// step with kernels/wire/ll_message.hpp, ll_dispatch_send.cuh and ll_combine_parts.cuh for LL, and
// kernels/wire/ht_message.hpp for HT). With virtual nodes (--virtual-node-size) the bytes for peers
// in other nodes go through the network transport instead (kernels/wire/transport.hpp): each
// message is staged in this rank's own window and put whole, slot padding included, so the
// network counts use the slot sizes below; signals, flags, acknowledgements, count tables and
// layout words travel the same way on either path. HT dispatch across nodes goes by rail
// (kernels/ht/ht_dispatch_rail.cuh, ht_dispatch_forward.cuh): a token crosses once per other
// node hosting its experts, into a rail slot of the rank with the source's local index
// there, which forwards it over NVLink into the dispatch slots of the ranks of its node.
// Pure CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/routing.hpp"

namespace epc::bench {

struct WireFormat {
  bool ht = false;                 // high-throughput traffic (else low-latency)
  int64_t dispatch_row_bytes = 0;  // payload: bf16 2H; fp8 H + 4 * H/128 (row and scales)
  int64_t combine_row_bytes = 0;   // 2H: combine is bf16
  // LL: every (token, remote rank hosting one of its entries) gets a message: a header (place
  // and entry count, then one (local expert, position, weight) entry per entry on that rank)
  // and the row (kernels/wire/ll_message.hpp); ranks without entries get nothing. Each dispatch also sends every peer a table of int32
  // entry counts, one per local expert of that peer.
  int64_t header_fixed_bytes = 8;
  int64_t header_entry_bytes = 12;
  int64_t count_entry_bytes = 4;
  int64_t signal_bytes = 8;  // LL: per peer per half, one release-stored uint64
  // LL on one node: a rank with at most this many tokens takes its combine rows back as line
  // records, twice the row, and no combine signal (kernels/wire/ll_message.hpp); 0: none.
  int64_t line_tokens = 0;
  // LL on one node: in a step of at most this many tokens per rank (a line step,
  // kernels/wire/ll_message.hpp: every step of a line group, or a step bounded so by
  // max_step_tokens), dispatch messages and count tables go as line records, twice their bytes
  // (the signal all the same); 0 where no step of the run is one, and for passthrough rows.
  int64_t dispatch_line_tokens = 0;
  // HT (kernels/wire/ht_message.hpp): a token goes once to every rank hosting one of its entries,
  // into a slot: the payload row (fp8: then its scales), K int32 local expert ids and K fp32
  // weights. Dispatch publishes every chunk of `ht_chunk_tokens` source tokens with one uint64
  // flag per peer, combine every chunk of returned rows with one flag, and each op writes one
  // uint64 acknowledgement per peer. Creating a handle sends every peer (2 + its local experts)
  // uint32 layout words and a uint64 signal. Across nodes, dispatch goes by rail instead: per
  // chunk one flag per rank of this node and one rail flag per other node (to the rail peer);
  // per (token, other node with entries) one rail slot; the rail peer forwards each token into
  // the slots of its node's ranks with entries and raises their flags for every chunk of the
  // source, each write the same as a direct one.
  int64_t ht_meta_bytes = 0;  // 8 * K: the slot's top-k ids and weights
  // Combine with EPC_WEIGHTING_HOME: a row per (token, entry) returns instead of one per (token,
  // rank); across nodes (HT) the rail peer forwards each entry row of its node unreduced.
  bool combine_per_entry = false;
  int64_t ht_chunk_tokens = 0;  // kernels::kHtChunkTokens
  int64_t ht_flag_bytes = 8;
  int64_t ht_ack_bytes = 8;
  int64_t ht_layout_header_words = 0;  // kernels::kHtLayoutHeaderWords
  // Through the network transport (a peer in another node) a message is put whole from its
  // staging copy: LL dispatch a message as the plan's message_bytes (header for K entries,
  // then the payload, padded to 16 B);
  // LL combine the bf16 row; HT combine its whole slot and HT dispatch a whole rail slot
  // (kernels/wire/ht_message.hpp: every dispatch slot has room for fp8 scales and both top-k
  // arrays, every combine slot for the backward weights; a rail slot is a dispatch slot and
  // one int32 per rank of the node and one per entry (max_topk), each padded to 16 B:
  // net_rail_slot_bytes).
  int64_t net_dispatch_message_bytes = 0;  // LL: a message; HT: a dispatch slot
  int64_t net_combine_row_bytes = 0;       // LL: the bf16 row; HT: a combine slot
  int64_t max_topk = 0;                    // the group's, which sizes the slots

  // `topk` is the group's max_topk (the bench creates its groups with --topk).
  static WireFormat for_dtype(int hidden, bool fp8, int topk);  // LL
  static WireFormat for_ht(int hidden, bool fp8, int topk);     // HT
  std::string describe() const;                                 // one line for the JSON record
  // HT: the rail slot (kernels::ht_rail_slot) for nodes of `node_size` ranks.
  int64_t net_rail_slot_bytes(int node_size) const;
  // The most one rank sends one peer in one op when every rank has `tokens` tokens with
  // `topk` entries (sizes the ceiling's window): payload, as dispatch_to / combine_to count
  // it. `nranks`, `node_size` as compute_traffic's (0 or nranks: one node, all NVLink).
  int64_t max_bytes_to_peer(int64_t tokens, int topk, int nranks = 1, int node_size = 0) const;
};

struct RankTraffic {
  int64_t selections = 0;       // unmasked (token, expert) entries of this rank's tokens
  int64_t token_ranks = 0;      // (token, destination rank) pairs of this rank's tokens, self included
  int64_t received_tokens = 0;  // (source rank, token) pairs with an entry here, self included
                                // (N of an HT handle)
  int64_t logical_dispatch_bytes = 0;
  int64_t logical_combine_bytes = 0;
  // What each op must read and write in this GPU's own memory at the least, whatever its
  // method: its input rows once and its output rows once (the roofline's device-memory
  // bytes; bench/JSON.md). Dispatch reads the rank's tokens (LL: bf16, cast in the kernel;
  // HT: the payload as given) and writes the rows it receives (LL: one per (token, entry)
  // received, capped like expected_counts; HT: one per received token); combine reads the
  // received rows (bf16) and writes the rank's tokens (bf16).
  int64_t memory_dispatch_bytes = 0;
  int64_t memory_combine_bytes = 0;
  // [R] payload bytes this rank sends rank d (0 for itself): stored through NVLink for a
  // peer in this rank's node, put by the network transport (whole slots) for a peer in
  // another node. HT dispatch across nodes: rail slots to the rail peers (none to the other
  // ranks of other nodes), and to the ranks of this node the slots of its own tokens plus
  // those it forwards for its rail peers.
  std::vector<int64_t> dispatch_to;
  std::vector<int64_t> combine_to;  // [R]
  int64_t wire_dispatch_bytes = 0;  // sum of dispatch_to plus signals (flags, acks, count tables)
  int64_t wire_combine_bytes = 0;
  int64_t wire_layout_bytes = 0;  // HT handle creation: the layout exchange (LL: 0, local)
  // The same three split by where the peer is, signals included: in this rank's node (NVLink
  // stores) or in another (the network transport). nvlink + network == wire_*; without
  // virtual nodes every peer is in the node and network is 0.
  int64_t wire_dispatch_nvlink_bytes = 0;
  int64_t wire_dispatch_network_bytes = 0;
  int64_t wire_combine_nvlink_bytes = 0;
  int64_t wire_combine_network_bytes = 0;
  int64_t wire_layout_nvlink_bytes = 0;
  int64_t wire_layout_network_bytes = 0;
  // The baseline's rows, grouped by destination (self included): LL one per selection, HT one
  // per (token, destination rank).
  std::vector<int64_t> baseline_rows_to;     // [R]
  std::vector<int64_t> baseline_rows_from;   // [R]
  int64_t baseline_wire_dispatch_bytes = 0;  // remote rows + the count exchange
  int64_t baseline_wire_combine_bytes = 0;
  std::vector<int32_t> expected_counts;  // [L] (token, entry) pairs received per local expert
};

// `all[r]` is rank r's [tokens, topk] routing; every rank has `tokens` tokens. Local experts
// are experts / nranks. `row_capacity` caps expected_counts (LL's out_x has R * max_tokens
// rows per expert; HT has no cap). `node_size`: ranks per node (rank r is in node
// r / node_size; it divides the rank count); 0 or the rank count: one node, all NVLink.
RankTraffic compute_traffic(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts,
                            const WireFormat& wire, int64_t row_capacity, int node_size = 0);

}  // namespace epc::bench
