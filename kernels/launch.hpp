// The one narrow interface from core/ into kernels/: parameter structs (passed by value to
// the kernels) and launch functions returning the CUDA launch status. Nothing here blocks.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/device_error.hpp"

namespace epc::kernels {

// Every rank of the LSA team stores `epoch` into its own inbox slot in every peer's window,
// then waits until every peer's slot in its own window holds at least `epoch`.
struct GroupBarrierParams {
  ncclDevComm dev_comm;
  ncclWindow_t window;
  uint64_t inbox_offset;   // window offset of the [slots][lsa_size] uint64 inboxes
  uint32_t slot;           // which barrier (independent epoch sequences)
  uint32_t reserved;
  uint64_t epoch;          // strictly increasing per slot, identical on every rank
  uint64_t timeout_ns;
  DeviceError* error;      // device view of the group's error record
};

cudaError_t launch_group_barrier(const GroupBarrierParams& params, cudaStream_t stream);

}  // namespace epc::kernels
