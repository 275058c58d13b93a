// The limits that host code (configuration checks, planner, reference model, benchmark) and
// device code rely on alike, each defined once, here. Code that depends on a value says so
// with a static_assert beside it.
#pragma once

namespace epc::kernels {

// Top-k entries per token. Kernels give each entry of a token one lane of a warp.
constexpr int kMaxTopk = 32;

// Channels that share one fp8 scale (one fp32 scale per block of a row).
constexpr int kFp8BlockChannels = 128;

// Tokens per rank, per mode.
constexpr int kMaxLlTokens = 1024;
constexpr int kMaxHtTokens = 65536;

// High-throughput rows travel in chunks of this many, one flag per chunk.
constexpr int kHtChunkTokens = 2;

// Rows move in vectors of this many bytes, so every row is a multiple of it.
constexpr int kVectorBytes = 16;

static_assert(kFp8BlockChannels % (kVectorBytes / 2) == 0, "an fp8 block is whole 16-bit vectors");
static_assert(kMaxHtTokens % kHtChunkTokens == 0, "chunks tile the largest batch");

}  // namespace epc::kernels
