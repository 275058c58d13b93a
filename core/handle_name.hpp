// SPDX-License-Identifier: Apache-2.0
// How the library names a handle in its messages: by its number in its group (what
// epc_handle_query reports as EpcHandleInfo.id: 1 for the group's first handle, counting up,
// the same on every rank that creates the group's handles in one order) and by the caller's
// pointer. Handles compare by pointer.
#pragma once

#include <cstdint>
#include <string>

namespace epc {

struct HandleName {
  const void* handle = nullptr;  // the caller's EpcHandle*
  uint64_t number = 0;           // EpcHandleInfo.id

  explicit operator bool() const { return handle != nullptr; }
  bool operator==(const HandleName& other) const { return handle == other.handle; }
  bool operator!=(const HandleName& other) const { return handle != other.handle; }
  // "handle 3 (0x7f...)".
  std::string text() const;
};

}  // namespace epc
