// Low-latency combine kernels: the sending part, the receiving part (ll_combine_parts.cuh),
// or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/common/kernel_stack.hpp"
#include "kernels/launch.hpp"
#include "kernels/ll/ll_combine_parts.cuh"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::kernels {

namespace {

template <bool kSend, bool kReceive>
__global__ void __launch_bounds__(kLlThreads) ll_combine_kernel(LlCombineParams p) {
  if (kSend) combine::send(p);
  if (kReceive) combine::receive(p);
}

size_t send_shared(const LlCombineParams& p) {
  return static_cast<size_t>(p.common.geo.nranks) * sizeof(uint32_t);
}

}  // namespace

cudaError_t launch_ll_combine_send(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  ll_combine_kernel<true, false><<<blocks, kLlThreads, send_shared(params), stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_combine_recv(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  ll_combine_kernel<false, true><<<blocks, kLlThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_combine(const LlCombineParams& params, int send_blocks, int recv_blocks,
                              cudaStream_t stream) {
  const int blocks = send_blocks > recv_blocks ? send_blocks : recv_blocks;
  static ResidentBlocks fused_capacity(kLlThreads);
  if (blocks <= fused_capacity.get(ll_combine_kernel<true, true>, send_shared(params))) {
    ll_combine_kernel<true, true><<<blocks, kLlThreads, send_shared(params), stream>>>(params);
    return cudaGetLastError();
  }
  const cudaError_t sent = launch_ll_combine_send(params, send_blocks, stream);
  return sent != cudaSuccess ? sent : launch_ll_combine_recv(params, recv_blocks, stream);
}

size_t ll_combine_local_bytes() {
  return max_local_bytes(ll_combine_kernel<true, true>, ll_combine_kernel<true, false>, ll_combine_kernel<false, true>);
}

}  // namespace epc::kernels
