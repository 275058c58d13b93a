#include <algorithm>

#include "kernels/launch.hpp"

namespace epc::kernels {

size_t max_kernel_local_bytes() {
  return std::max({ll_dispatch_local_bytes(), ll_combine_local_bytes(), ht_layout_local_bytes(),
                   ht_dispatch_local_bytes(), ht_combine_local_bytes()});
}

}  // namespace epc::kernels
