// The small kernels a user without an EP library writes around NCCL's all-to-all: count
// tokens per expert, pack rows by destination, and sum the returned rows with the weights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace epc::bench {

// counts[e] = entries of `topk_idx` [n] equal to e, for e < experts (-1 entries skipped).
// `counts` is zeroed first.
cudaError_t launch_expert_histogram(const int32_t* topk_idx, int n, int experts, int32_t* counts,
                                    cudaStream_t stream);

// out[j] = x[src_token[j]] for j < rows; rows of `row_bytes` (a multiple of 16).
cudaError_t launch_gather_rows(const void* x, const int32_t* src_token, int rows, int row_bytes,
                               void* out, cudaStream_t stream);

// out[t] = bf16(sum over k of weights[t, k] * rows[pos[t, k]]) in fp32, for entries with
// pos >= 0; bf16 rows of `hidden` channels (a multiple of 8).
cudaError_t launch_weighted_sum(const uint16_t* rows, const int32_t* pos, const float* weights,
                                int tokens, int topk, int hidden, uint16_t* out,
                                cudaStream_t stream);

}  // namespace epc::bench
