// SPDX-License-Identifier: Apache-2.0
// The calls that need no GPU, CUDA or NCCL: the version and the plan. Argument checks and
// marshalling only; the work is in core/. Kept apart from the GPU calls so the fuzz targets
// (tests/fuzz) can build them with clang and libFuzzer without the CUDA toolkit.
#include <cstring>

#include "capi/call_guard.hpp"
#include "core/config.hpp"
#include "core/planner.hpp"
#include "core/versioned_struct.hpp"

namespace epc::capi {
namespace {

EpcPlan to_c_plan(const Plan& plan) {
  EpcPlan out;
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.abi_version = EPC_ABI_VERSION;
  out.mode = plan.mode;
  out.num_slots = plan.num_slots;
  out.symmetric_bytes = plan.symmetric_bytes;
  out.workspace_bytes = plan.workspace_bytes;
  out.num_sms = plan.num_sms;
  out.warps_per_block = plan.warps_per_block;
  out.lsa_barriers = plan.lsa_barriers;
  out.gin_contexts = plan.gin_contexts;
  out.gin_signals = plan.gin_signals;
  out.handle_bytes = plan.handle_bytes;
  out.recv_capacity = plan.recv_capacity;
  out.message_bytes = plan.message_bytes;
  out.max_token_bytes = plan.max_token_bytes;
  out.max_pending_steps = plan.max_pending_steps;
  out.num_regions = static_cast<uint32_t>(plan.regions.size());
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const Region& r = plan.regions[i];
    EpcPlanRegion& o = out.regions[i];
    o.kind = r.kind;
    o.slot = r.slot;
    o.offset = r.offset;
    o.size = r.size;
    std::strncpy(o.name, r.name.c_str(), sizeof o.name - 1);
  }
  return out;
}

}  // namespace
}  // namespace epc::capi

using epc::capi::guarded;

extern "C" {

EpcStatus epc_get_version(uint32_t* out_major, uint32_t* out_minor, uint32_t* out_patch) {
  return guarded([&] {
    if (out_major != nullptr) *out_major = EPC_ABI_MAJOR;
    if (out_minor != nullptr) *out_minor = EPC_ABI_MINOR;
    if (out_patch != nullptr) *out_patch = EPC_ABI_PATCH;
  });
}

EpcStatus epc_plan_query(const EpcGroupConfig* config, int32_t nranks, int32_t lsa_size, int32_t num_nodes,
                         EpcPlan* out_plan) {
  return guarded([&] {
    epc::check_output_struct(out_plan, "EpcPlan");
    epc::GroupConfig resolved = epc::resolve_config(config);
    epc::Plan plan = epc::make_plan(resolved, epc::Topology{nranks, lsa_size, num_nodes});
    epc::write_versioned(epc::capi::to_c_plan(plan), out_plan, "EpcPlan");
  });
}

}  // extern "C"
