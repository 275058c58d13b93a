// SPDX-License-Identifier: Apache-2.0
// A group: one rank's share of an expert-parallel setup on an NCCL communicator. It owns
// the symmetric window the planner laid out, its NCCL registration, the NCCL device
// communicator, and the error record kernels report into. What one mode's handles share
// (step counters, the pending send-only step) lives beside it, in core/ll/ll_steps.hpp and
// core/ht/ht_steps.hpp.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/config.hpp"
#include "core/device_memory.hpp"
#include "core/nccl_resources.hpp"
#include "core/plan.hpp"
#include "core/topology.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/device_error.hpp"
#include "kernels/wire/transport.hpp"

namespace epc {

class Group {
 public:
  // Collective over `comm`. Throws epc::Error; on failure everything acquired is released.
  Group(ncclComm_t comm, const GroupConfig& config);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Collective over every rank of the group; blocks until the barrier kernel ends. Throws
  // EPC_ERR_TIMEOUT when a peer did not arrive, and the group stays failed.
  void barrier(cudaStream_t stream);

  // Throws the recorded asynchronous failure, if any (every call on a failed group does),
  // and keeps it as the group's sticky failure.
  void check_healthy();

  // Throws what check_healthy would throw now, with the same status and message, but
  // records nothing: it reads the sticky failure and the device error record only, so it
  // never waits and never makes a CUDA call. Safe while another thread makes any other
  // call on the group (but destroy): see failed_status_.
  void check_async_error() const;

  // Collective: releases everything; throws the first failure after releasing all of it.
  void destroy();

  EpcGroupInfo info() const;
  const Plan& plan() const { return plan_; }
  const GroupConfig& config() const { return config_; }
  const Topology& topology() const { return topo_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  // The device's SM count (a step's SM budget may not exceed it).
  int device_sms() const { return device_sms_; }
  const ncclDevComm& dev_comm() const;
  ncclWindow_t window() const { return owned_ ? owned_->registration.get() : nullptr; }
  // How this rank's kernels reach the others: NVLink stores inside its node, the network
  // transport to other nodes (kernels/wire/transport.hpp).
  kernels::PeerTransport transport() const;
  kernels::DeviceError* device_error() const { return error_device_; }
  uint64_t timeout_ns() const { return static_cast<uint64_t>(config_.timeout_ms) * 1000000ull; }
  // The id the group's next handle gets (EpcHandleInfo.id): 1, 2, ... in creation order.
  // Reading it takes nothing: only a handle that exists takes its id (take_handle_id), so a
  // failed creation leaves the numbering as it was.
  uint64_t next_handle_id() const { return handles_created_ + 1; }
  // Takes next_handle_id() for a handle now created.
  void take_handle_id() { ++handles_created_; }

 private:
  // Everything the group owns on the device and in NCCL. Declared in the order it is
  // released (the reverse of the declarations): the device communicator, the window's
  // registration, its memory, then the plain device and host memory.
  struct Owned {
    explicit Owned(int device) : device(device) {}
    PinnedHost<kernels::DeviceError> error_host;  // pinned, mapped
    DeviceAllocations device;                     // the error record's claim word; the GIN state
    WindowMemory memory;
    WindowRegistration registration;
    DeviceCommunicator dev_comm;
  };

  // Collective over the communicator: the rank-local steps (the kernels' stack reservation,
  // allocate_memory), then every rank learns whether all of them succeeded. Throws this rank's
  // own failure, or on the others the status of the lowest rank that failed, naming it.
  void prepare_locally();
  // The window's memory (zeroed) and the error record.
  void allocate_memory();
  // Collective; also the ordering point of creation (register_window says why).
  void register_window();
  // Asks NCCL where this node's windows are mapped (PeerTransport's node_base, node_stride
  // and local_base); fails with EPC_ERR_INTERNAL if they are not evenly spaced.
  void locate_windows();
  // Across LSA teams: zeroes the GIN signals NCCL gave this device communicator.
  void reset_gin_signals();
  // Also the GIN check when the ranks span LSA teams: throws EPC_ERR_UNSUPPORTED (or
  // EPC_ERR_NCCL) with what NCCL reported when GIN cannot carry the group.
  void create_device_comm();
  // Raises the device's per-thread stack limit to what epcomm's kernels need.
  void reserve_kernel_stack();
  // Ranks in several LSA teams: the network transport is GIN, not the stand-in.
  bool spans_lsa_teams() const { return topo_.num_nodes > 1; }
  // Releases everything (once the GPU, and the network, are done with it) in the order Owned
  // states; returns the first failure. When GIN could not flush within the timeout,
  // everything stays allocated (leaked): the network may still touch the window.
  CloseFailure shut_down() noexcept;
  // After a StrandedCall (core/nccl_wait.hpp): leaves everything allocated (leaked) and the
  // device unsynchronized, and marks the communicator stranded.
  void abandon() noexcept;
  // Waits, bounded by the group's timeout, until GIN has read the sources of this rank's
  // puts. False on a timeout (the flush kernel may still be running); `why` says what failed.
  bool flush_gin(std::string* why) noexcept;
  void raise_if_device_failed();
  // Keeps the first failure as the sticky one (later ones are dropped).
  void record_failure(EpcStatus status, std::string message);
  // The failure a kernel recorded in the error record, if any: its status and the message
  // every call reports for it. The record does not change once its status is set (the
  // claim word admits one writer), so every reader formats the same message.
  bool device_failure(EpcStatus* status, std::string* message) const;

  ncclComm_t comm_;
  GroupConfig config_;
  Topology topo_;
  int rank_ = -1;
  int lsa_rank_ = -1;
  int node_ = -1;
  int device_ = -1;
  int device_sms_ = 0;
  Plan plan_;

  std::unique_ptr<Owned> owned_;
  // The error record's host view (null once released).
  kernels::DeviceError* error_host() const { return owned_ ? owned_->error_host.get() : nullptr; }
  kernels::DeviceError* error_device_ = nullptr;  // its device view
  kernels::GinState* gin_state_ = nullptr;        // in owned_->device, when the ranks span LSA teams
  kernels::StagingMap* staging_map_ = nullptr;    // in owned_->device, with more than one node
  uint64_t barrier_epoch_ = 0;
  uint64_t node_base_ = 0;  // where world rank p of this node has its window: node_base_ + p * node_stride_
  uint64_t node_stride_ = 0;
  uint64_t local_base_ = 0;

  // Sticky failure: once set, every call on the group fails with it. Set once, by the
  // thread making a call on the group (calls on a group do not overlap): the message is
  // written first and never again, then the status is published with release order, so
  // check_async_error on another thread reads the message only after an acquire load has
  // seen a status, and never while it is being written.
  std::atomic<EpcStatus> failed_status_{EPC_OK};
  std::string failed_message_;
  std::atomic<uint64_t> handles_created_{0};
};

}  // namespace epc
