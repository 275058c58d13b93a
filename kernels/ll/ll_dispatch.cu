// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch kernels: the sending part (ll_dispatch_send.cuh), the receiving part
// (ll_dispatch_recv.cuh), or both in one launch (ll_step_kernel.cuh says when). A line step's
// are in ll_dispatch_lines.cu.
#include "kernels/launch.hpp"
#include "kernels/ll/ll_dispatch_parts.cuh"

namespace epc::kernels {

namespace {

// Calls `launch` with the DispatchParts of p's layout and payload.
template <typename Launch>
cudaError_t with_parts(const LlDispatchParams& p, Launch&& launch) {
  const bool by_token = p.common.layout != LlLayout::kExpertPadded;
  switch (p.payload) {
    case LlPayload::kFp8:
      return by_token ? launch(DispatchParts<true, LlPayload::kFp8>{})
                      : launch(DispatchParts<false, LlPayload::kFp8>{});
    case LlPayload::kPassthrough:
      return by_token ? launch(DispatchParts<true, LlPayload::kPassthrough>{})
                      : launch(DispatchParts<false, LlPayload::kPassthrough>{});
    default:
      return by_token ? launch(DispatchParts<true, LlPayload::kHalf>{})
                      : launch(DispatchParts<false, LlPayload::kHalf>{});
  }
}

template <bool kByToken>
size_t local_bytes() {
  const size_t half = ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kHalf>>();
  const size_t fp8 = ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kFp8>>();
  const size_t passthrough = ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kPassthrough>>();
  const size_t most = half > fp8 ? half : fp8;
  return most > passthrough ? most : passthrough;
}

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  if (dispatch_lines(params.common, params.payload)) return launch_ll_line_dispatch_send(params, blocks, stream);
  return with_parts(params, [&](auto parts) { return launch_ll_send<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  if (dispatch_lines(params.common, params.payload)) return launch_ll_line_dispatch_recv(params, blocks, stream);
  return with_parts(params, [&](auto parts) { return launch_ll_receive<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks, cudaStream_t stream) {
  if (dispatch_lines(params.common, params.payload)) {
    return launch_ll_line_dispatch(params, send_blocks, recv_blocks, stream);
  }
  return with_parts(
      params, [&](auto parts) { return launch_ll_step<decltype(parts)>(params, send_blocks, recv_blocks, stream); });
}

size_t ll_dispatch_local_bytes() {
  const size_t padded = local_bytes<false>();
  const size_t tokens = local_bytes<true>();
  const size_t records = padded > tokens ? padded : tokens;
  const size_t lines = ll_line_dispatch_local_bytes();
  return records > lines ? records : lines;
}

}  // namespace epc::kernels
