// SPDX-License-Identifier: Apache-2.0
#include <algorithm>

#include "kernels/launch.hpp"

namespace epc::kernels {

size_t max_kernel_local_bytes() {
  return std::max({group_barrier_local_bytes(), routing_copy_local_bytes(), gin_lifecycle_local_bytes(),
                   window_pointers_local_bytes(), ll_dispatch_local_bytes(), ll_combine_local_bytes(),
                   ht_layout_local_bytes(), ht_dispatch_local_bytes(), ht_combine_local_bytes()});
}

}  // namespace epc::kernels
