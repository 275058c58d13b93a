// SPDX-License-Identifier: Apache-2.0
// A line step's low-latency dispatch kernels (ll_dispatch_lines.cuh): 16-bit rows and the fp8
// cast (passthrough steps move as records even when small, through ll_dispatch.cu's kernels).
#include "kernels/ll/ll_dispatch_parts.cuh"

namespace epc::kernels {

namespace {

// Calls `launch` with the LineDispatchParts of p's layout and payload (never passthrough:
// dispatch_lines).
template <typename Launch>
cudaError_t with_line_parts(const LlDispatchParams& p, Launch&& launch) {
  const bool by_token = p.common.layout != LlLayout::kExpertPadded;
  if (p.payload == LlPayload::kFp8) {
    return by_token ? launch(LineDispatchParts<true, LlPayload::kFp8>{})
                    : launch(LineDispatchParts<false, LlPayload::kFp8>{});
  }
  return by_token ? launch(LineDispatchParts<true, LlPayload::kHalf>{})
                  : launch(LineDispatchParts<false, LlPayload::kHalf>{});
}

template <bool kByToken>
size_t local_bytes() {
  const size_t half = ll_step_local_bytes<LineDispatchParts<kByToken, LlPayload::kHalf>>();
  const size_t fp8 = ll_step_local_bytes<LineDispatchParts<kByToken, LlPayload::kFp8>>();
  return half > fp8 ? half : fp8;
}

}  // namespace

cudaError_t launch_ll_line_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return with_line_parts(params, [&](auto parts) { return launch_ll_send<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_line_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return with_line_parts(params,
                         [&](auto parts) { return launch_ll_receive<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_line_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks,
                                    cudaStream_t stream) {
  return with_line_parts(
      params, [&](auto parts) { return launch_ll_step<decltype(parts)>(params, send_blocks, recv_blocks, stream); });
}

size_t ll_line_dispatch_local_bytes() {
  const size_t padded = local_bytes<false>();
  const size_t tokens = local_bytes<true>();
  return padded > tokens ? padded : tokens;
}

}  // namespace epc::kernels
