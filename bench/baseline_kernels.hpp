// SPDX-License-Identifier: Apache-2.0
// The small kernels a user without an EP library writes around NCCL's all-to-all: count
// tokens per expert or per destination, pack rows by destination, and sum the returned rows
// with the weights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace epc::bench {

// counts[v - first] = occurrences of v in [first, first + bins) among the first `per_row`
// values of each of `rows` rows of `values` (rows `row_stride` values apart); other values
// (-1 for masked entries, other ranks' experts) are skipped. `counts` is zeroed first.
cudaError_t launch_histogram(const int32_t* values, int rows, int per_row, int row_stride, int first, int bins,
                             int32_t* counts, cudaStream_t stream);

// out[j] = x[src_token[j]] for j < rows; rows of `row_bytes`, a multiple of 4 (moved in
// 16-byte vectors when it is a multiple of 16).
cudaError_t launch_gather_rows(const void* x, const int32_t* src_token, int rows, int row_bytes, void* out,
                               cudaStream_t stream);

// out[t] = bf16(sum over k of weights[t, k] * rows[pos[t, k]]) in fp32, in k order, for
// entries with pos >= 0; bf16 rows of `hidden` channels (a multiple of 8).
cudaError_t launch_weighted_sum(const uint16_t* rows, const int32_t* pos, const float* weights, int tokens, int topk,
                                int hidden, uint16_t* out, cudaStream_t stream);

}  // namespace epc::bench
