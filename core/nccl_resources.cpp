// SPDX-License-Identifier: Apache-2.0
#include "core/nccl_resources.hpp"

#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/nccl_wait.hpp"

namespace epc {

void WindowMemory::allocate(ncclComm_t comm, size_t bytes, EpcAllocFn alloc_fn, EpcFreeFn free_fn, void* alloc_ctx) {
  if (alloc_fn != nullptr) {
    void* ptr = nullptr;
    const int32_t rc = alloc_fn(alloc_ctx, bytes, &ptr);
    if (rc != 0 || ptr == nullptr) {
      fail(EPC_ERR_OUT_OF_MEMORY, format("EpcGroupConfig.alloc_fn returned %d and pointer %p "
                                         "for %zu bytes",
                                         rc, ptr, bytes));
    }
    ptr_ = ptr;
    free_fn_ = free_fn;
    alloc_ctx_ = alloc_ctx;
    return;
  }
  check_nccl(ncclMemAlloc(&ptr_, bytes), "ncclMemAlloc of the symmetric window", comm);
}

CloseFailure WindowMemory::close() noexcept {
  CloseFailure failure;
  if (ptr_ == nullptr) return failure;
  if (free_fn_ != nullptr) {
    free_fn_(alloc_ctx_, ptr_);
  } else {
    const ncclResult_t r = ncclMemFree(ptr_);
    if (r != ncclSuccess) failure = {EPC_ERR_NCCL, format_noexcept("ncclMemFree: %s", ncclGetErrorString(r))};
  }
  ptr_ = nullptr;
  return failure;
}

ncclResult_t WindowRegistration::register_window(ncclComm_t comm, void* memory, size_t bytes,
                                                 const Deadline& deadline) {
  ncclWindow_t window = nullptr;
  const ncclResult_t res =
      settle_nccl(comm, ncclCommWindowRegister(comm, memory, bytes, &window, NCCL_WIN_COLL_SYMMETRIC),
                  "ncclCommWindowRegister", deadline);
  if (res == ncclSuccess) {
    comm_ = comm;
    window_ = window;
  }
  return res;
}

CloseFailure WindowRegistration::close() noexcept {
  CloseFailure failure;
  if (window_ == nullptr) return failure;
  const ncclResult_t r = ncclCommWindowDeregister(comm_, window_);
  if (r != ncclSuccess)
    failure = {EPC_ERR_NCCL, format_noexcept("ncclCommWindowDeregister: %s", ncclGetErrorString(r))};
  window_ = nullptr;
  return failure;
}

void DeviceCommunicator::adopt(ncclComm_t comm, const ncclDevComm& dev_comm) {
  comm_ = comm;
  dev_comm_ = dev_comm;
}

CloseFailure DeviceCommunicator::close() noexcept {
  CloseFailure failure;
  if (comm_ == nullptr) return failure;
  const ncclResult_t r = ncclDevCommDestroy(comm_, &dev_comm_);
  if (r != ncclSuccess) failure = {EPC_ERR_NCCL, format_noexcept("ncclDevCommDestroy: %s", ncclGetErrorString(r))};
  comm_ = nullptr;
  return failure;
}

}  // namespace epc
