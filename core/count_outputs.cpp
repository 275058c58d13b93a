// SPDX-License-Identifier: Apache-2.0
#include "core/count_outputs.hpp"

#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/tensor_check.hpp"

namespace epc {

CountOutputs check_count_outputs(const EpcDispatchArgs& args, int64_t local_experts) {
  CountOutputs o;
  if (args.acc_expert_counts != nullptr) {
    check_tensor(args.acc_expert_counts, {"EpcDispatchArgs.acc_expert_counts", {EPC_DTYPE_INT64}, {local_experts}, 8});
    o.accumulated = static_cast<int64_t*>(args.acc_expert_counts->data);
  }
  if (args.out_expert_counts_host != nullptr) {
    check_tensor(args.out_expert_counts_host,
                 {"EpcDispatchArgs.out_expert_counts_host", {EPC_DTYPE_INT32}, {local_experts}, 4});
    cudaPointerAttributes attributes{};
    const cudaError_t e = cudaPointerGetAttributes(&attributes, args.out_expert_counts_host->data);
    if (e != cudaSuccess || attributes.type != cudaMemoryTypeHost) {
      cudaGetLastError();  // an unknown pointer leaves no error behind for the next call
      fail_argument(
          "EpcDispatchArgs.out_expert_counts_host must point to pinned host memory (cudaMallocHost, "
          "cudaHostAlloc or cudaHostRegister): a copy into pageable or device memory would not be stream-ordered");
    }
    o.host = static_cast<int32_t*>(args.out_expert_counts_host->data);
  }
  return o;
}

void copy_counts_to_host(const CountOutputs& outputs, const int32_t* counts, int64_t local_experts,
                         cudaStream_t stream) {
  if (outputs.host == nullptr) return;
  check_cuda(cudaMemcpyAsync(outputs.host, counts, static_cast<size_t>(local_experts) * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream),
             "copying the per-expert counts to pinned host memory");
}

}  // namespace epc
