// SPDX-License-Identifier: Apache-2.0
#include "bench/traffic.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <numeric>

#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"

namespace epc::bench {

WireFormat WireFormat::for_dtype(int hidden, bool fp8, int topk) {
  WireFormat w;
  const int64_t h = hidden;
  w.dispatch_row_bytes = fp8 ? h + h / 128 * 4 : 2 * h;
  w.combine_row_bytes = 2 * h;
  // The receive slot of a message (core/planner.cpp, plan_low_latency): a header with room for
  // max_topk entries, then the payload, padded to 16 bytes. The network puts all of it, to the
  // peers hosting an entry of the token only (kernels/ll/ll_dispatch_send.cuh).
  const int64_t header_bytes = static_cast<int64_t>(kernels::ll_message_header_bytes(static_cast<size_t>(topk)));
  w.net_dispatch_message_bytes =
      (header_bytes + w.dispatch_row_bytes + static_cast<int64_t>(kernels::kLlMessageAlignment) - 1) /
      static_cast<int64_t>(kernels::kLlMessageAlignment) * static_cast<int64_t>(kernels::kLlMessageAlignment);
  w.net_combine_row_bytes = w.combine_row_bytes;  // kernels/ll/ll_combine_parts.cuh commits the row
  return w;
}

WireFormat WireFormat::for_ht(int hidden, bool fp8, int topk) {
  WireFormat w = for_dtype(hidden, fp8, topk);
  w.ht = true;
  // What the send kernels write into a slot (kernels/ht/ht_dispatch_send.cuh): the payload, the
  // scales with fp8, and K int32 local ids and K fp32 weights (the handle's K, not max_topk).
  w.ht_meta_bytes = 8 * static_cast<int64_t>(topk);
  w.ht_chunk_tokens = kernels::kHtChunkTokens;
  w.ht_layout_header_words = kernels::kHtLayoutHeaderWords;
  // What the network puts: whole slots, as many as the chunk's rows (dispatch: whole rail
  // slots, net_rail_slot_bytes, built on the dispatch slot).
  const uint32_t h = static_cast<uint32_t>(hidden), k = static_cast<uint32_t>(topk);
  w.net_dispatch_message_bytes = kernels::ht_dispatch_slot(h, fp8 ? 1 : 2, k).bytes;
  w.net_combine_row_bytes = kernels::ht_combine_slot(h, k).bytes;
  w.max_topk = topk;
  return w;
}

std::string WireFormat::describe() const {
  char text[2048];
  if (ht) {
    std::snprintf(text, sizeof text,
                  "high-throughput: dispatch sends a %lld B payload (row, and scales with fp8) + "
                  "%lld B of top-k ids and weights per (token, remote rank with entries), a %lld B "
                  "flag per peer per %lld source tokens and a %lld B acknowledgement per peer; "
                  "combine returns a %lld B row per (token, remote rank), a %lld B flag per peer "
                  "per %lld rows and a %lld B acknowledgement per peer; creating a handle sends "
                  "each peer %lld + local experts uint32 layout words and a %lld B signal; to a "
                  "peer in another node the network transport puts whole slots instead: %lld B "
                  "per returned row; dispatch across nodes goes by rail: a token crosses once per "
                  "other node hosting its experts, as one rail slot (the %lld B dispatch slot + "
                  "4 B per rank of a node and 4 B per entry, each padded to 16 B) to the rank with the source's local "
                  "index there, which forwards it over NVLink into the slots of the ranks of its "
                  "node with entries and raises a flag at every rank of its node for every chunk "
                  "of the source; the source's own chunk flags then go only to the ranks of its "
                  "node, and one rail flag per chunk to each other node's rail peer; combine "
                  "across nodes returns a remote source's rows over NVLink to its rail peer in "
                  "this node, which puts one partial (a whole combine slot) per (token, node) "
                  "and a flag per chunk of tokens that had one",
                  static_cast<long long>(dispatch_row_bytes), static_cast<long long>(ht_meta_bytes),
                  static_cast<long long>(ht_flag_bytes), static_cast<long long>(ht_chunk_tokens),
                  static_cast<long long>(ht_ack_bytes), static_cast<long long>(combine_row_bytes),
                  static_cast<long long>(ht_flag_bytes), static_cast<long long>(ht_chunk_tokens),
                  static_cast<long long>(ht_ack_bytes), static_cast<long long>(ht_layout_header_words),
                  static_cast<long long>(signal_bytes), static_cast<long long>(net_combine_row_bytes),
                  static_cast<long long>(net_dispatch_message_bytes));
    return text;
  }
  // Line records only where the group has them, so that older records read the same.
  char lines[160] = "";
  if (line_tokens > 0) {
    std::snprintf(lines, sizeof lines,
                  ", twice that as line records and no signal to a rank of this node with at most %lld tokens",
                  static_cast<long long>(line_tokens));
  }
  char dispatch_lines[160] = "";
  if (dispatch_line_tokens > 0) {
    std::snprintf(dispatch_lines, sizeof dispatch_lines,
                  " (twice those and the count table as line records in a step of at most %lld tokens per rank)",
                  static_cast<long long>(dispatch_line_tokens));
  }
  std::snprintf(text, sizeof text,
                "dispatch: per (token, remote rank with entries) %lld B header + %lld B per entry "
                "there and a %lld B row%s; combine: a %lld B row per (token, remote rank with "
                "entries)%s; %lld B per local expert of each peer for the count table; %lld B signal "
                "per peer per half; to a peer in another node the network transport puts whole "
                "messages instead: %lld B each, and %lld B per combined row",
                static_cast<long long>(header_fixed_bytes), static_cast<long long>(header_entry_bytes),
                static_cast<long long>(dispatch_row_bytes), dispatch_lines, static_cast<long long>(combine_row_bytes),
                lines, static_cast<long long>(count_entry_bytes), static_cast<long long>(signal_bytes),
                static_cast<long long>(net_dispatch_message_bytes), static_cast<long long>(net_combine_row_bytes));
  return text;
}

int64_t WireFormat::net_rail_slot_bytes(int node_size) const {
  kernels::HtDispatchSlot dispatch{};
  dispatch.bytes = static_cast<uint32_t>(net_dispatch_message_bytes);
  return kernels::ht_rail_slot(dispatch, static_cast<uint32_t>(node_size), static_cast<uint32_t>(max_topk)).bytes;
}

int64_t WireFormat::max_bytes_to_peer(int64_t tokens, int topk, int nranks, int node_size) const {
  const int nodes = node_size > 0 && node_size < nranks ? nranks / node_size : 1;
  int64_t dispatch, combine;
  if (nodes == 1) {
    dispatch = ht ? tokens * (dispatch_row_bytes + ht_meta_bytes)
                  : tokens * (header_fixed_bytes + topk * header_entry_bytes + dispatch_row_bytes);
    combine = tokens * combine_row_bytes * (combine_per_entry ? topk : 1);
  } else if (ht) {
    // A rail peer gets a rail slot per token; another rank of this node (if any) a slot per
    // token from this rank, and one per token of each of the nodes - 1 sources this rank
    // forwards for.
    const int64_t in_node = node_size > 1 ? nodes * tokens * (dispatch_row_bytes + ht_meta_bytes) : 0;
    dispatch = std::max(tokens * net_rail_slot_bytes(node_size), in_node);
    // A rail peer gets one partial (a whole combine slot) per token; another rank of this node
    // (if any) a row per token from this rank for its own tokens and one per token of each of
    // the nodes - 1 sources it reduces for.
    // EPC_WEIGHTING_HOME: every entry's row instead of one per (token, rank or node).
    const int64_t rows = combine_per_entry ? topk : 1;
    combine =
        std::max(tokens * rows * net_combine_row_bytes, node_size > 1 ? nodes * tokens * rows * combine_row_bytes : 0);
  } else {
    dispatch = tokens * net_dispatch_message_bytes;  // at least the NVLink message
    combine = tokens * net_combine_row_bytes * (combine_per_entry ? topk : 1);
  }
  return std::max(dispatch, combine);
}

namespace {

int64_t chunks(int64_t items, int64_t per_chunk) { return (items + per_chunk - 1) / per_chunk; }

}  // namespace

RankTraffic compute_traffic(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts,
                            const WireFormat& wire, int64_t row_capacity, int node_size) {
  const int R = static_cast<int>(all.size());
  const int L = experts / R;
  const int per_node = node_size > 0 && node_size < R ? node_size : R;
  const int nodes = R / per_node, own_node = rank / per_node;
  // A peer in another node is reached only through the network transport.
  auto remote = [&](int peer) { return peer / per_node != own_node; };
  // Ranks of other nodes with this rank's local index are its rail peers: it sends them its
  // tokens for their nodes and forwards theirs into its own node (kernels/ht/ht_dispatch_rail.cuh,
  // ht_dispatch_forward.cuh).
  auto same_rail = [&](int peer) { return peer % per_node == rank % per_node; };
  // HT dispatch across nodes goes by rail: a rail slot once per (token, other node hosting
  // its experts) to the rail peer there, which forwards the token into the dispatch slots of
  // the ranks of its node, as a source there would.
  const bool rails = wire.ht && nodes > 1;
  const int64_t rail_slot = rails ? wire.net_rail_slot_bytes(per_node) : 0;
  const int64_t ht_slot = wire.dispatch_row_bytes + wire.ht_meta_bytes;  // what NVLink stores carry
  RankTraffic t;
  t.dispatch_to.assign(static_cast<size_t>(R), 0);
  t.combine_to.assign(static_cast<size_t>(R), 0);
  t.baseline_rows_to.assign(static_cast<size_t>(R), 0);
  t.baseline_rows_from.assign(static_cast<size_t>(R), 0);
  std::vector<int64_t> counts(static_cast<size_t>(L), 0);
  std::vector<int> entries_on(static_cast<size_t>(R));

  // Whether rank d takes its LL combine rows back as line records (every rank has `tokens`).
  auto takes_lines = [&](int d) {
    return !wire.ht && !remote(d) && !wire.combine_per_entry && wire.line_tokens > 0 && tokens <= wire.line_tokens;
  };
  // Whether this rank sends its LL dispatch to rank d as line records, twice the bytes.
  const auto sends_lines = [&](int d) {
    return !wire.ht && !remote(d) && wire.dispatch_line_tokens > 0 && tokens <= wire.dispatch_line_tokens;
  };
  // The rank of this node with r's local index: where HT combine returns r's rows across nodes.
  auto rail_here = [&](int r) { return own_node * per_node + r % per_node; };
  std::vector<int64_t> combine_flags_to(static_cast<size_t>(R), 0);  // HT chunk flags

  for (int s = 0; s < R; ++s) {
    const Routing& routing = all[static_cast<size_t>(s)];
    int last_partial_chunk = -1;
    for (int tok = 0; tok < tokens; ++tok) {
      std::fill(entries_on.begin(), entries_on.end(), 0);
      for (int k = 0; k < topk; ++k) {
        const int64_t e = routing[static_cast<size_t>(tok) * topk + k];
        if (e < 0) continue;
        const int d = static_cast<int>(e / L);
        entries_on[static_cast<size_t>(d)]++;
        if (d == rank) counts[static_cast<size_t>(e % L)]++;
      }
      if (rails && s == rank) {
        // This rank's token crosses once to every other node it has entries in.
        for (int m = 0; m < nodes; ++m) {
          if (m == own_node) continue;
          const auto first = entries_on.begin() + static_cast<std::ptrdiff_t>(m) * per_node;
          if (std::any_of(first, first + per_node, [](int n) { return n > 0; })) {
            t.dispatch_to[static_cast<size_t>(m * per_node + rank % per_node)] += rail_slot;
          }
        }
      } else if (rails && remote(s) && same_rail(s)) {
        // This rank is s's rail peer here: it forwards the token to the other ranks of its
        // node that host its experts (into its own window for itself: not wire bytes), and
        // in combine returns the node's one partial row for it (EPC_WEIGHTING_HOME: each of
        // the node's entry rows, unreduced), a flag per chunk that had one.
        bool came = false;
        int64_t entries_here = 0;
        for (int d = own_node * per_node; d < (own_node + 1) * per_node; ++d) {
          if (entries_on[static_cast<size_t>(d)] == 0) continue;
          came = true;
          entries_here += entries_on[static_cast<size_t>(d)];
          if (d != rank) t.dispatch_to[static_cast<size_t>(d)] += ht_slot;
        }
        if (came) {
          t.combine_to[static_cast<size_t>(s)] +=
              (wire.combine_per_entry ? entries_here : 1) * wire.net_combine_row_bytes;
          const int chunk = tok / wire.ht_chunk_tokens;
          if (chunk != last_partial_chunk) combine_flags_to[static_cast<size_t>(s)]++;
          last_partial_chunk = chunk;
        }
      }
      for (int d = 0; d < R; ++d) {
        const int n = entries_on[static_cast<size_t>(d)];
        if (s == rank) {
          t.selections += n;
          if (n > 0) t.token_ranks++;
          // LL's baseline sends a row per selection, HT's one per (token, destination).
          t.baseline_rows_to[static_cast<size_t>(d)] += wire.ht ? (n > 0 ? 1 : 0) : n;
          if (d != rank && !(rails && remote(d))) {  // HT across nodes: the rail slots above
            int64_t bytes;
            if (remote(d)) {  // the whole staged message
              bytes = n > 0 ? wire.net_dispatch_message_bytes : 0;
            } else if (wire.ht) {
              bytes = n > 0 ? ht_slot : 0;
            } else {
              bytes = n > 0 ? wire.header_fixed_bytes + n * wire.header_entry_bytes + wire.dispatch_row_bytes : 0;
              if (sends_lines(d)) bytes *= 2;
            }
            t.dispatch_to[static_cast<size_t>(d)] += bytes;
          }
        }
        if (d == rank) {
          if (n > 0) t.received_tokens++;
          t.baseline_rows_from[static_cast<size_t>(s)] += wire.ht ? (n > 0 ? 1 : 0) : n;
          // Combine returns one (pre-reduced, in LL) row per token that had entries here; HT
          // across nodes returns a remote source's rows to its rail peer in this node (none
          // when that is this rank: read in place), which reduces them (below).
          if (s != rank && n > 0) {
            if (!rails || !remote(s)) {
              // EPC_WEIGHTING_HOME: one row per entry here, over NVLink or (LL) the network,
              // which puts every entry row (kernels/ll/ll_combine_home.cuh put_entry_rows).
              const int64_t rows = wire.combine_per_entry ? n : 1;
              t.combine_to[static_cast<size_t>(s)] +=
                  rows * (remote(s) ? wire.net_combine_row_bytes : wire.combine_row_bytes * (takes_lines(s) ? 2 : 1));
            } else if (rail_here(s) != rank) {
              t.combine_to[static_cast<size_t>(rail_here(s))] +=
                  (wire.combine_per_entry ? n : 1) * wire.combine_row_bytes;
            }
          }
        }
      }
    }
  }

  // Logical bytes (DeepEP's rule): LL one row per selection, HT one per (token, destination).
  const int64_t logical_rows = wire.ht ? t.token_ranks : t.selections;
  t.logical_dispatch_bytes = logical_rows * wire.dispatch_row_bytes;
  t.logical_combine_bytes = logical_rows * wire.combine_row_bytes;
  // The baseline exchanges counts first: LL one per local expert of the peer, HT one per peer.
  // Its rows: LL bf16 whatever --dtype says; HT the payload (fp8 with its scales) and the
  // token's top-k ids and weights.
  const int64_t counts_per_peer = wire.ht ? 1 : L;
  // HT combine flags: one per chunk of the rows returned, at the rank they were returned to.
  for (int s = 0; s < R && wire.ht; ++s) {
    const int target = rails && remote(s) ? rail_here(s) : s;
    if (s != rank && target != rank) {
      combine_flags_to[static_cast<size_t>(target)] +=
          chunks(t.baseline_rows_from[static_cast<size_t>(s)], wire.ht_chunk_tokens);
    }
  }
  const int64_t baseline_row = wire.ht ? wire.dispatch_row_bytes + wire.ht_meta_bytes : wire.combine_row_bytes;
  for (int d = 0; d < R; ++d) {
    if (d == rank) continue;
    const size_t i = static_cast<size_t>(d);
    // Per peer: the payload, then what each op signals there (the same on either path).
    int64_t dispatch = t.dispatch_to[i], combine = t.combine_to[i], layout = 0;
    if (wire.ht) {
      // Dispatch chunk flags: one per chunk of source tokens to every rank of this node; by
      // rail, as many again for each of the nodes - 1 sources this rank forwards for, one rail
      // flag per chunk to each rail peer, none to the other ranks of other nodes.
      int64_t flags = chunks(tokens, wire.ht_chunk_tokens);
      if (rails) flags *= !remote(d) ? nodes : same_rail(d) ? 1 : 0;
      dispatch += flags * wire.ht_flag_bytes + wire.ht_ack_bytes;
      combine += combine_flags_to[i] * wire.ht_flag_bytes + wire.ht_ack_bytes;
      layout = (wire.ht_layout_header_words + L) * 4 + wire.signal_bytes;
    } else {
      dispatch += wire.signal_bytes + static_cast<int64_t>(L) * wire.count_entry_bytes * (sends_lines(d) ? 2 : 1);
      if (!takes_lines(d)) combine += wire.signal_bytes;
    }
    const bool net = remote(d);
    (net ? t.wire_dispatch_network_bytes : t.wire_dispatch_nvlink_bytes) += dispatch;
    (net ? t.wire_combine_network_bytes : t.wire_combine_nvlink_bytes) += combine;
    (net ? t.wire_layout_network_bytes : t.wire_layout_nvlink_bytes) += layout;
    t.baseline_wire_dispatch_bytes += t.baseline_rows_to[i] * baseline_row + counts_per_peer * wire.count_entry_bytes;
    t.baseline_wire_combine_bytes += t.baseline_rows_from[i] * wire.combine_row_bytes;
  }
  t.wire_dispatch_bytes = t.wire_dispatch_nvlink_bytes + t.wire_dispatch_network_bytes;
  t.wire_combine_bytes = t.wire_combine_nvlink_bytes + t.wire_combine_network_bytes;
  t.wire_layout_bytes = t.wire_layout_nvlink_bytes + t.wire_layout_network_bytes;
  for (int64_t c : counts) t.expected_counts.push_back(static_cast<int32_t>(std::min(c, row_capacity)));
  const int64_t received_rows =
      wire.ht ? t.received_tokens : std::accumulate(t.expected_counts.begin(), t.expected_counts.end(), int64_t{0});
  const int64_t input_row = wire.ht ? wire.dispatch_row_bytes : wire.combine_row_bytes;  // LL casts in the kernel
  t.memory_dispatch_bytes = tokens * input_row + received_rows * wire.dispatch_row_bytes;
  t.memory_combine_bytes = (received_rows + tokens) * wire.combine_row_bytes;
  return t;
}

}  // namespace epc::bench
