// SPDX-License-Identifier: Apache-2.0
// A low-latency dispatch's messages as line records (kernels/wire/ll_message.hpp): in a line
// step (a step of few tokens per rank in a one-node group, ll_dispatch_line_steps) every rank
// writes its messages to the others and its count tables as line words (line_words.cuh), every
// 4 bytes at twice their offset beside the step's epoch, and stores its step signal first,
// relaxed. A receiver polls each word it reads until it carries the epoch, instead of waiting
// for a signal released behind the messages: the release, and the count of sending blocks
// before it, are what a small step spent most of its time on
// (bench/results/ll_session30_2xh200.md). The rule depends on the group and on the step's bound
// that every rank is given alike (LlCommon::step_tokens), so every rank's host picks the same
// kernels (LineDispatchParts, ll_dispatch_lines.cu), and other steps' kernels carry none of this
// code. A line step's signal carries line_step_epoch, which a rank expecting records never
// takes for its step's: ranks given different bounds time out rather than read what nobody
// wrote.
#pragma once

#include <cstdint>

#include "kernels/device/line_await.cuh"
#include "kernels/device/register_pick.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ll/ll_line_scales.cuh"
#include "kernels/ll/ll_own_messages.cuh"
#include "kernels/ll/ll_row_stores.cuh"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// Whether a dispatch moves as line records: in a line step (ll_dispatch_line_steps) of a group
// of several ranks, but for passthrough rows (whose scale bytes need not fill 4-byte words),
// which go as records there too. The host tests it to pick the kernels (ll_dispatch.cu), with
// the same outcome on every rank of a step, since every rank is given the same step_tokens. A
// rank alone in its group sends itself nothing in a fused launch, and a split step's halves
// through its own window gain nothing from line records (docs/tuning.md, "Line steps").
__host__ __device__ __forceinline__ bool dispatch_lines(const LlCommon& c, LlPayload payload) {
  return c.transport.one_node && c.geo.nranks > kLlAloneRanks && payload != LlPayload::kPassthrough &&
         c.geo.dispatch_line_tokens > 0 && c.step_tokens <= c.geo.dispatch_line_tokens;
}

// The word of a line record that holds the message's 4 bytes at `offset` (4-byte aligned).
__device__ __forceinline__ uint64_t* line_word_at(char* line, uint64_t offset) {
  return reinterpret_cast<uint64_t*>(line + 2 * offset);
}
__device__ __forceinline__ const uint64_t* line_word_at(const char* line, uint64_t offset) {
  return reinterpret_cast<const uint64_t*>(line + 2 * offset);
}

// Called by the lane writing it: the header of a message as a line record (the header's two
// words lie in one 16-byte line).
__device__ __forceinline__ void store_line_header(char* line, const LlMessageHeader& h, uint32_t epoch) {
  static_assert(sizeof(LlMessageHeader) == 8, "a header is one 16-byte line");
  store_line_words(line_word_at(line, 0), line_word(static_cast<uint32_t>(h.place), epoch),
                   line_word(static_cast<uint32_t>(h.entries), epoch));
}

// Entry i of a message as a line record (its three words).
__device__ __forceinline__ void store_line_entry(char* line, int i, const LlMessageEntry& e, uint32_t epoch) {
  static_assert(sizeof(LlMessageEntry) == 12, "an entry is three words");
  uint64_t* at = line_word_at(line, sizeof(LlMessageHeader) + static_cast<uint64_t>(i) * sizeof(LlMessageEntry));
  store_line_word(at, line_word(static_cast<uint32_t>(e.local_expert), epoch));
  store_line_word(at + 1, line_word(static_cast<uint32_t>(e.position), epoch));
  store_line_word(at + 2, line_word(__float_as_uint(e.weight), epoch));
}

// What a receiver's first warp read of a message that came as a line record
// (warp_await_line_message): stored_message's view, and whether every word it awaited came.
struct LineMessageView {
  MessageView view;
  bool ok;
};

// Called by one warp: the header and, lane i, entry i of the message whose line record is
// `line`, polled until they carry `epoch`; entries past the header's count are loaded with it
// but not awaited (nothing writes them). `ok` is false in every lane when a word did not come.
__device__ __forceinline__ LineMessageView warp_await_line_message(const char* line, uint32_t epoch, LineWait w) {
  struct HeaderWords {
    uint64_t x, y;
  };
  struct EntryWords {
    uint64_t w[3];
  };
  const int lane = lane_id();
  // The header and every lane's entry load at once, as stored_message's loads do; each is
  // polled again (one loop for the header, one for the entry's three words) only when late.
  const uint64_t* header_at = line_word_at(line, 0);
  const auto load_header = [header_at] {
    HeaderWords h;
    load_line_words(header_at, h.x, h.y);
    return h;
  };
  const uint64_t* entry_at =
      line_word_at(line, sizeof(LlMessageHeader) + static_cast<uint64_t>(lane) * sizeof(LlMessageEntry));
  const auto load_entry = [entry_at] {
    EntryWords e;
    for (int k = 0; k < 3; ++k) e.w[k] = load_line_word(entry_at + k);
    return e;
  };
  HeaderWords header = load_header();
  EntryWords entry{};
  if (lane < kMaxTopk) entry = load_entry();
  const auto header_came = [epoch](const HeaderWords& h) {
    return word_arrived(h.x, epoch) && word_arrived(h.y, epoch);
  };
  const auto entry_came = [epoch](const EntryWords& e) {
    return word_arrived(e.w[0], epoch) && word_arrived(e.w[1], epoch) && word_arrived(e.w[2], epoch);
  };
  bool ok = header_came(header) ||
            poll_until(load_header, header_came, &header, w.timeout_ns, w.error, w.phase, w.rank, w.peer);
  LineMessageView r{};
  r.view.header.place = static_cast<int32_t>(word_data(header.x));
  r.view.header.entries = ok ? static_cast<int32_t>(word_data(header.y)) : 0;
  if (lane < r.view.header.entries && lane < kMaxTopk) {
    ok =
        entry_came(entry) || poll_until(load_entry, entry_came, &entry, w.timeout_ns, w.error, w.phase, w.rank, w.peer);
    r.view.entry.local_expert = static_cast<int32_t>(word_data(entry.w[0]));
    r.view.entry.position = static_cast<int32_t>(word_data(entry.w[1]));
    r.view.entry.weight = __uint_as_float(word_data(entry.w[2]));
  }
  r.ok = __all_sync(0xffffffffu, ok);
  return r;
}

// The payload vectors of a line record that a receiving thread loads before the message is
// placed (rounds 0 and 1 of its slice, vector v at 2 v of `payload`), and which of them had
// not come: polled once the message is placed (store_line_message), because a message from
// this rank to itself may be a header alone (its own record of a token with no entry here),
// whose payload nobody writes.
struct LinePrefetch {
  int4 data[2];
  unsigned late;
};

__device__ __forceinline__ LinePrefetch prefetch_line_payload(const int4* payload, VectorSlice part, uint32_t epoch) {
  LinePrefetch f{};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int v = part.begin + static_cast<int>(threadIdx.x) + r * static_cast<int>(blockDim.x);
    if (v >= part.end) continue;
    const LineVector l = load_line_vector(payload + 2 * v);
    f.data[r] = line_data(l);
    if (!line_arrived(l, epoch)) f.late |= 1u << r;
  }
  return f;
}

// What a receiving block stores of a placed message that came as a line record: its slice
// `part` of the payload (at `payload`, `first` loaded before the placing) into every row
// `rows` names and, for the fp8 cast, its words `words` of the row's `scale_count` fp32 scales
// (at `scales`) into every row at scale_rows[0, entries) of `out_scales`.
struct LineMessageStores {
  const int4* payload;
  VectorSlice part;
  LinePrefetch first;
  MessageRowStores rows;
  const uint64_t* scales;  // null: the payload has no scales
  ScaleOutput out_scales;
  int scale_count;
  VectorSlice words;
  const int64_t* scale_rows;
  int entries;
  uint32_t epoch;
  LineWait wait;
};

// Called by every thread of the block; false when a word it awaited did not come.
__device__ __forceinline__ bool store_line_message(LineMessageStores s) {
  bool ok = true;
  int round = 0;
  for (int v = s.part.begin + static_cast<int>(threadIdx.x); v < s.part.end; v += blockDim.x, ++round) {
    int4 x = make_int4(0, 0, 0, 0);
    bool late = true;
    if (round < 2) {
      x = register_pick(s.first.data, round);
      late = (s.first.late >> round & 1u) != 0;
    }
    if (late && ok) ok = await_line_vector(s.payload + 2 * v, s.epoch, s.wait, &x);
    store_to_rows(s.rows, v, x);
  }
  if (s.scales != nullptr && ok) {
    ok = store_line_cast_scales(s.out_scales, s.scales, s.scale_count, s.words.begin, s.words.end, s.entries,
                                s.scale_rows, s.epoch, s.wait, ScaleThread::from_block_end());
  }
  return ok;
}

}  // namespace epc::kernels
