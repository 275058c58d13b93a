// SPDX-License-Identifier: Apache-2.0
// The limits that host code (configuration checks, planner, reference model, benchmark) and
// device code rely on alike, each defined once, here. Code that depends on a value says so
// with a static_assert beside it.
#pragma once

namespace epc::kernels {

// Top-k entries per token. Kernels give each entry of a token one lane of a warp.
constexpr int kMaxTopk = 32;

// fp8 (e4m3) payloads: channels that share one fp32 scale, the smallest amax a scale is
// computed from (so an all-zero block has a finite scale), and the largest finite e4m3.
constexpr int kFp8BlockChannels = 128;
constexpr float kFp8MinAmax = 1e-4f;
constexpr float kE4m3Max = 448.0f;

// Tokens per rank, per mode.
constexpr int kMaxLlTokens = 1024;
constexpr int kMaxHtTokens = 65536;

// A low-latency combine on a one-node group returns the partials of a rank with at most
// kLlLineTokens tokens in the step as line records (kernels/device/line_words.cuh), which carry
// their own arrival, so that rank waits for no signal; EPCOMM_LL_LINE_TOKENS sets the count
// (0 turns them off; core/plan.cpp). A line record is twice its row.
constexpr int kLlLineTokens = 16;
// And its dispatches move as line records when, besides, each rank's largest step is at most
// kLlLineGroupBytes of messages to one rank (max_tokens * message bytes): line records double
// the bytes, which pays while they cost less than the signal's release they spare
// (kernels/wire/ll_message.hpp ll_dispatch_line_group; docs/tuning.md).
constexpr uint64_t kLlLineGroupBytes = uint64_t{128} << 10;

// Low-latency receive slots per direction: a group has max(kLlMinSlots, max_pending_steps)
// of them, at most kLlMaxSlots; the host picks a step's slot (core/ll/ll_steps.hpp). Each
// slot is 4 plan regions (receive and signal, both directions): with the control region and
// the network staging, 3 slots fill 14 of EPC_PLAN_MAX_REGIONS (16). High-throughput layout
// slots: a double buffer, a step uses slot step % 2 (step & 1).
constexpr int kLlMinSlots = 2;
constexpr int kLlMaxSlots = 3;
constexpr int kHtLayoutSlots = 2;

// High-throughput rows travel in chunks of this many, one flag per chunk. Small chunks keep
// the tail short: the last chunk of every warp is what a step waits for (docs/tuning.md).
constexpr int kHtChunkTokens = 2;

// Rows move in vectors of this many bytes, so every row is a multiple of it; a vector holds
// this many channels of a 16-bit (bf16, fp16) row.
constexpr int kVectorBytes = 16;
constexpr int kHalfChannelsPerVector = kVectorBytes / 2;

static_assert(kFp8BlockChannels % kHalfChannelsPerVector == 0, "an fp8 block is whole 16-bit vectors");
static_assert(kLlLineTokens <= kMaxLlTokens, "line records serve a prefix of a source's messages");
static_assert(kMaxLlTokens < (1 << 16), "a dispatch signal's payload holds two token counts (ll_message.hpp)");
static_assert(kMaxHtTokens % kHtChunkTokens == 0, "chunks tile the largest batch");
static_assert(kLlMinSlots >= 2 && kLlMaxSlots >= kLlMinSlots, "every step-to-step rotation has a second slot");
static_assert(kHtLayoutSlots == 2, "high-throughput kernels pick a layout slot as step & 1");

}  // namespace epc::kernels
