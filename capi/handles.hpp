// SPDX-License-Identifier: Apache-2.0
// What the ABI's opaque handles are. A magic word lets calls reject a pointer that is not a
// live handle of the expected type (a destroyed one, or another object) with a message
// instead of undefined behaviour in the common cases.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/group.hpp"
#include "core/ht/ht_handle.hpp"
#include "core/ht/ht_steps.hpp"
#include "core/ll/ll_handle.hpp"
#include "core/ll/ll_steps.hpp"

struct EpcGroup {
  static constexpr uint64_t kLiveMagic = 0x70757247435045ull;  // "EPCGrup"
  uint64_t magic = kLiveMagic;
  std::unique_ptr<epc::Group> group;
  // What the handles of the group's mode share; exactly one is set.
  std::unique_ptr<epc::LlSteps> ll_steps;
  std::unique_ptr<epc::HtSteps> ht_steps;
  // The group's live handles, which refer to it: epc_group_destroy refuses while any is.
  std::vector<epc::HandleName> handles;
};

// One handle type for both modes; exactly one of the two is set: the mode of its group.
// Destroying it takes it off its group's list (GroupEntry).
struct EpcHandle {
  static constexpr uint64_t kLiveMagic = 0x6c646e6148435045ull;  // "EPCHandl"
  // An EpcHandle's entry in its group's list, for as long as the EpcHandle lives.
  class GroupEntry {
   public:
    GroupEntry() = default;
    GroupEntry(const GroupEntry&) = delete;
    GroupEntry& operator=(const GroupEntry&) = delete;
    ~GroupEntry() {
      if (group_ == nullptr) return;
      auto& list = group_->handles;
      list.erase(std::remove(list.begin(), list.end(), name_), list.end());
    }
    void enter(EpcGroup* group, epc::HandleName name) {
      group->handles.push_back(name);
      group_ = group;
      name_ = name;
    }

   private:
    EpcGroup* group_ = nullptr;
    epc::HandleName name_;
  };

  uint64_t magic = kLiveMagic;
  GroupEntry entry;  // declared before ll and ht: leaves the list after their teardown
  std::unique_ptr<epc::LlHandle> ll;
  std::unique_ptr<epc::HtHandle> ht;
};

namespace epc::capi {

// Throws EPC_ERR_INVALID_ARGUMENT for NULL or a pointer without the live magic word.
epc::Group& group_of(const EpcGroup* handle);
// The same, with what its mode's handles share (the group must be of that mode).
epc::LlSteps& ll_steps_of(const EpcGroup* handle);
epc::HtSteps& ht_steps_of(const EpcGroup* handle);

// The same for handles.
EpcHandle& live_handle(const EpcHandle* handle);

// A stream as the ABI passes it (`void*` meaning cudaStream_t).
inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace epc::capi
