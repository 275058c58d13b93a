// A group: one rank's share of an expert-parallel setup on an NCCL communicator. It owns
// the symmetric window the planner laid out, its NCCL registration, the NCCL device
// communicator, and the error record kernels report into.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "core/planner.hpp"
#include "core/topology.hpp"
#include "epcomm/epcomm.h"
#include "kernels/device_error.hpp"

namespace epc {

class Group {
 public:
  // Collective over `comm`. Throws epc::Error; on failure everything acquired is released.
  Group(ncclComm_t comm, const GroupConfig& config);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Collective over the LSA team; blocks until the barrier kernel ends. Throws
  // EPC_ERR_TIMEOUT when a peer did not arrive, and the group stays failed.
  void barrier(cudaStream_t stream);

  // Throws the recorded asynchronous failure, if any (every call on a failed group does).
  void check_healthy();

  // Collective: releases everything; throws the first failure after releasing all of it.
  void destroy();

  EpcGroupInfo info() const;
  const Plan& plan() const { return plan_; }

 private:
  void allocate_window();
  void create_device_comm();
  // Releases whatever was acquired; returns the first failure's message ("" if none).
  std::string release() noexcept;
  void raise_if_device_failed();

  ncclComm_t comm_;
  GroupConfig config_;
  Topology topo_;
  int rank_ = -1;
  int lsa_rank_ = -1;
  int node_ = -1;
  int device_ = -1;
  Plan plan_;

  void* window_memory_ = nullptr;
  ncclWindow_t window_ = nullptr;
  bool dev_comm_created_ = false;
  ncclDevComm dev_comm_{};
  kernels::DeviceError* error_host_ = nullptr;    // pinned, mapped
  kernels::DeviceError* error_device_ = nullptr;  // its device view
  uint64_t barrier_epoch_ = 0;

  // Sticky failure: once set, every call on the group fails with it.
  EpcStatus failed_status_ = EPC_OK;
  std::string failed_message_;
};

}  // namespace epc
