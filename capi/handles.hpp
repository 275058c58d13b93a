// What the ABI's opaque handles are. A magic word lets calls reject a pointer that is not a
// live handle of the expected type (a destroyed one, or another object) with a message
// instead of undefined behaviour in the common cases.
#pragma once

#include <cstdint>
#include <memory>

#include "core/group.hpp"
#include "core/ll_handle.hpp"

struct EpcGroup {
  static constexpr uint64_t kLiveMagic = 0x70757247435045ull;  // "EPCGrup"
  uint64_t magic = kLiveMagic;
  std::unique_ptr<epc::Group> group;
};

struct EpcHandle {
  static constexpr uint64_t kLiveMagic = 0x6c646e6148435045ull;  // "EPCHandl"
  uint64_t magic = kLiveMagic;
  std::unique_ptr<epc::LlHandle> handle;
};

namespace epc::capi {

// Throws EPC_ERR_INVALID_ARGUMENT for NULL or a pointer without the live magic word.
epc::Group& group_of(const EpcGroup* handle);

// The same for handles.
epc::LlHandle& handle_of(const EpcHandle* handle);

}  // namespace epc::capi
