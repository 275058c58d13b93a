// SPDX-License-Identifier: Apache-2.0
// The NCCL objects a group owns, each by a type: the symmetric window's memory, its
// registration as an NCCL window, and the NCCL device communicator. Each releases what it
// holds when destroyed; close() does the same earlier and says what failed, for a caller
// that must report it (Group::destroy). Releasing them in the right order, after the GPU
// and the network are done with them, is the owner's business (core/group.cpp).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <string>

#include "core/deadline.hpp"
#include "epcomm/epcomm.h"

namespace epc {

// A failure met while releasing: "" when there was none.
struct CloseFailure {
  EpcStatus status = EPC_OK;
  std::string message;
};

// Memory for a window: from ncclMemAlloc, or from the caller's allocator (alloc_fn/free_fn
// of EpcGroupConfig).
class WindowMemory {
 public:
  WindowMemory() = default;
  ~WindowMemory() { close(); }
  WindowMemory(const WindowMemory&) = delete;
  WindowMemory& operator=(const WindowMemory&) = delete;

  // Throws epc::Error (EPC_ERR_OUT_OF_MEMORY, EPC_ERR_NCCL) when no memory was given.
  void allocate(ncclComm_t comm, size_t bytes, EpcAllocFn alloc_fn, EpcFreeFn free_fn, void* alloc_ctx);
  void* get() const { return ptr_; }
  CloseFailure close() noexcept;

 private:
  void* ptr_ = nullptr;
  EpcFreeFn free_fn_ = nullptr;
  void* alloc_ctx_ = nullptr;
};

// A registration of memory as a symmetric NCCL window (collective).
class WindowRegistration {
 public:
  WindowRegistration() = default;
  ~WindowRegistration() { close(); }
  WindowRegistration(const WindowRegistration&) = delete;
  WindowRegistration& operator=(const WindowRegistration&) = delete;

  // Returns NCCL's result once NCCL has finished the registration; the window is owned only
  // on success. Throws StrandedCall (core/nccl_wait.hpp) when it has not by `deadline`.
  ncclResult_t register_window(ncclComm_t comm, void* memory, size_t bytes, const Deadline& deadline);
  ncclWindow_t get() const { return window_; }
  CloseFailure close() noexcept;

 private:
  ncclComm_t comm_ = nullptr;
  ncclWindow_t window_ = nullptr;
};

// An NCCL device communicator.
class DeviceCommunicator {
 public:
  DeviceCommunicator() = default;
  ~DeviceCommunicator() { close(); }
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  // Takes ownership of `dev_comm`, created on `comm` (ncclDevCommCreate or the GIN path).
  void adopt(ncclComm_t comm, const ncclDevComm& dev_comm);
  bool created() const { return comm_ != nullptr; }
  const ncclDevComm& get() const { return dev_comm_; }
  CloseFailure close() noexcept;

 private:
  ncclComm_t comm_ = nullptr;
  ncclDevComm dev_comm_{};
};

}  // namespace epc
