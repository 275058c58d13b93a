// SPDX-License-Identifier: Apache-2.0
// Groups and bootstrap: argument checks and marshalling only; the work is in core/.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"
#include "core/bootstrap.hpp"
#include "core/config.hpp"
#include "core/versioned_struct.hpp"

namespace epc::capi {

epc::Group& group_of(const EpcGroup* handle) {
  if (handle == nullptr) fail_argument("group is NULL");
  if (handle->magic != EpcGroup::kLiveMagic || !handle->group) {
    fail_argument("group is not a live EpcGroup (already destroyed, or another object)");
  }
  return *handle->group;
}

epc::LlSteps& ll_steps_of(const EpcGroup* handle) {
  group_of(handle);
  if (!handle->ll_steps) fail_argument("the group is not in low-latency mode");
  return *handle->ll_steps;
}

epc::HtSteps& ht_steps_of(const EpcGroup* handle) {
  group_of(handle);
  if (!handle->ht_steps) fail_argument("the group is not in high-throughput mode");
  return *handle->ht_steps;
}

namespace {

template <typename T>
void require(const T* ptr, const char* name) {
  if (ptr == nullptr) fail_argument(format("%s is NULL", name));
}

}  // namespace
}  // namespace epc::capi

using epc::capi::guarded;
using epc::capi::require;

extern "C" {

EpcStatus epc_unique_id_create(EpcUniqueId* out_id) {
  return guarded([&] {
    require(out_id, "out_id");
    *out_id = epc::create_unique_id();
  });
}

EpcStatus epc_comm_init(const EpcUniqueId* id, int32_t nranks, int32_t rank, int32_t cuda_device, void** out_comm) {
  return guarded([&] {
    require(id, "id");
    require(out_comm, "out_comm");
    *out_comm = epc::init_comm(*id, nranks, rank, cuda_device, /*timeout_ms=*/0);
  });
}

EpcStatus epc_comm_init_config(const EpcUniqueId* id, int32_t nranks, int32_t rank, int32_t cuda_device,
                               const EpcCommConfig* config, void** out_comm) {
  return guarded([&] {
    require(id, "id");
    require(out_comm, "out_comm");
    const EpcCommConfig options = epc::read_versioned(config, "EpcCommConfig");
    if (options.flags != 0) {
      epc::fail_argument(epc::format("EpcCommConfig.flags is 0x%x; no flags are defined, pass 0", options.flags));
    }
    *out_comm = epc::init_comm(*id, nranks, rank, cuda_device, options.timeout_ms);
  });
}

EpcStatus epc_comm_destroy(void* comm) {
  return guarded([&] {
    if (comm != nullptr) epc::destroy_comm(comm);
  });
}

EpcStatus epc_group_create(void* comm, const EpcGroupConfig* config, EpcGroup** out_group) {
  return guarded([&] {
    require(out_group, "out_group");
    epc::GroupConfig resolved = epc::resolve_config(config);
    auto handle = std::make_unique<EpcGroup>();
    handle->group = std::make_unique<epc::Group>(static_cast<ncclComm_t>(comm), resolved);
    if (resolved.mode == EPC_MODE_LOW_LATENCY) {
      handle->ll_steps = std::make_unique<epc::LlSteps>(*handle->group);
    } else {
      handle->ht_steps = std::make_unique<epc::HtSteps>(*handle->group);
    }
    *out_group = handle.release();
  });
}

EpcStatus epc_group_destroy(EpcGroup* group) {
  return guarded([&] {
    if (group == nullptr) return;
    epc::Group& g = epc::capi::group_of(group);
    if (!group->handles.empty()) {
      // Each handle refers to the group's memory, steps and window: refused before any
      // collective work (every rank destroys its handles first, as it makes the same calls).
      std::string names;
      for (const epc::HandleName& h : group->handles) names += (names.empty() ? "" : ", ") + h.text();
      epc::fail_usage(
          epc::format("epc_group_destroy: the group still has %zu live handle(s): %s; "
                      "epc_handle_destroy them first",
                      group->handles.size(), names.c_str()));
    }
    // The handle goes away even when releasing reported a failure: it cannot be retried.
    std::unique_ptr<EpcGroup> owned(group);
    owned->magic = 0;
    g.destroy();
  });
}

EpcStatus epc_group_query(const EpcGroup* group, EpcGroupInfo* out_info) {
  return guarded([&] {
    epc::Group& g = epc::capi::group_of(group);
    epc::check_output_struct(out_info, "EpcGroupInfo");
    epc::write_versioned(g.info(), out_info, "EpcGroupInfo");
  });
}

EpcStatus epc_group_barrier(EpcGroup* group, void* stream) {
  return guarded([&] { epc::capi::group_of(group).barrier(epc::capi::as_stream(stream)); });
}

EpcStatus epc_group_async_error(const EpcGroup* group) {
  return guarded([&] { epc::capi::group_of(group).check_async_error(); });
}

}  // extern "C"
