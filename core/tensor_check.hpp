// SPDX-License-Identifier: Apache-2.0
// Checks of a caller's tensor descriptor against what a call needs, so a wrong shape, dtype,
// stride or alignment is rejected at the ABI with a message naming the tensor, before any
// launch.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "epcomm/epcomm.h"

namespace epc {

constexpr int64_t kAnyExtent = -1;

struct TensorRule {
  const char* name;                        // for messages, e.g. "x"
  std::initializer_list<EpcDtype> dtypes;  // accepted dtypes
  std::initializer_list<int64_t> shape;    // exact extents, kAnyExtent where free
  uint32_t alignment = 16;                 // required byte alignment of data
};

// Throws EPC_ERR_INVALID_ARGUMENT (or EPC_ERR_UNSUPPORTED for a valid but unsupported
// dtype or non-contiguous strides) naming the tensor and what is wrong.
void check_tensor(const EpcTensor* tensor, const TensorRule& rule);

// check_tensor for a tensor that may be strided: any strides under which no two elements
// share memory (all-zero strides: row-major), returned in `strides` (elements, ndim
// entries); a stride that makes elements overlap, or an extent of memory that 64 bits of
// bytes cannot address, is EPC_ERR_INVALID_ARGUMENT naming the tensor.
void check_strided_tensor(const EpcTensor* tensor, const TensorRule& rule, int64_t* strides);

// Whether the byte ranges of two contiguous tensors' data overlap.
bool tensors_overlap(const EpcTensor* a, const EpcTensor* b);

// Element size of a dtype in bytes.
size_t dtype_size(EpcDtype dtype);

}  // namespace epc
