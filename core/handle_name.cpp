// SPDX-License-Identifier: Apache-2.0
#include "core/handle_name.hpp"

#include "core/error.hpp"

namespace epc {

std::string HandleName::text() const {
  return format("handle %llu (%p)", static_cast<unsigned long long>(number), handle);
}

}  // namespace epc
