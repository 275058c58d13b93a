// Low-latency dispatch kernels: the sending part (ll_dispatch_send.cuh), the receiving part
// (ll_dispatch_recv.cuh), or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/common/kernel_stack.hpp"
#include "kernels/launch.hpp"
#include "kernels/ll/ll_dispatch_recv.cuh"
#include "kernels/ll/ll_dispatch_send.cuh"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::kernels {

namespace {

template <bool kSend, bool kReceive>
__global__ void __launch_bounds__(kLlThreads) ll_dispatch_kernel(LlDispatchParams p) {
  if (kSend) dispatch_send::run(p);
  if (kReceive) dispatch_recv::run(p);
}

size_t receive_shared(const LlDispatchParams& p) {
  return static_cast<size_t>(p.common.geo.nranks) * sizeof(uint32_t);
}

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  ll_dispatch_kernel<true, false><<<blocks, kLlThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  ll_dispatch_kernel<false, true><<<blocks, kLlThreads, receive_shared(params), stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks,
                               cudaStream_t stream) {
  const int blocks = send_blocks > recv_blocks ? send_blocks : recv_blocks;
  static ResidentBlocks fused_capacity(kLlThreads);
  if (blocks <= fused_capacity.get(ll_dispatch_kernel<true, true>, receive_shared(params))) {
    ll_dispatch_kernel<true, true><<<blocks, kLlThreads, receive_shared(params), stream>>>(params);
    return cudaGetLastError();
  }
  const cudaError_t sent = launch_ll_dispatch_send(params, send_blocks, stream);
  return sent != cudaSuccess ? sent : launch_ll_dispatch_recv(params, recv_blocks, stream);
}

size_t ll_dispatch_local_bytes() {
  return max_local_bytes(ll_dispatch_kernel<true, true>, ll_dispatch_kernel<true, false>, ll_dispatch_kernel<false, true>);
}

}  // namespace epc::kernels
