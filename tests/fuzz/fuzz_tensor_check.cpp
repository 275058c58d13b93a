// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the tensor descriptor checks every dispatch, combine and handle call runs on
// each caller tensor before anything is launched (core/tensor_check.cpp). Those calls need a
// live group, which needs GPUs, so the check is fuzzed directly, with the rules the calls use
// (exact extents, at most one free extent, dtype lists, 4- or 16-byte alignment) and any
// descriptor: any dtype, ndim, shape, strides and data address (never dereferenced).
//
// check_tensor either throws epc::Error (EPC_ERR_INVALID_ARGUMENT, or EPC_ERR_UNSUPPORTED for
// strides) with a message naming the tensor, or accepts a tensor that really is what the rule
// asks for: a listed dtype, the rule's rank and extents, zero entries past ndim, row-major
// contiguous, aligned, non-NULL data when it has elements, and a size in bytes that fits in
// int64 (so callers can compute addresses and byte counts without overflow).
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/tensor_check.hpp"
#include "epcomm/epcomm.h"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using epc::fuzz::FuzzInput;

const int64_t kExtents[] = {0,
                            1,
                            2,
                            7,
                            8,
                            16,
                            128,
                            1024,
                            4096,
                            7168,
                            65536,
                            int64_t{1} << 31,
                            int64_t{1} << 32,
                            int64_t{1} << 40,
                            int64_t{1} << 62,
                            std::numeric_limits<int64_t>::max(),
                            -1,
                            -2,
                            std::numeric_limits<int64_t>::min()};
const uint32_t kDtypes[] = {EPC_DTYPE_INVALID,  EPC_DTYPE_BF16,  EPC_DTYPE_FP16,  EPC_DTYPE_FP32,
                            EPC_DTYPE_FP8_E4M3, EPC_DTYPE_INT32, EPC_DTYPE_INT64, 7,
                            0xFFFFFFFFu};
const int32_t kRanks[] = {0, 1, 2, 3, 4, 5, -1, std::numeric_limits<int32_t>::max()};
const uint32_t kAlignments[] = {1, 2, 4, 8, 16};

// The rule's extents and dtypes live in initializer lists in the library's calls; here they
// are built from the input, so they are passed through these fixed-size holders.
struct RuleSpec {
  uint32_t dims = 1;
  int64_t shape[EPC_TENSOR_MAX_DIMS] = {};
  uint32_t dtype_count = 1;
  EpcDtype dtypes[3] = {};
  uint32_t alignment = 16;
};

template <typename Fn>
void with_rule(const RuleSpec& spec, Fn&& fn) {
  const int64_t* s = spec.shape;
  const EpcDtype* d = spec.dtypes;
  auto with_shape = [&](std::initializer_list<EpcDtype> dtypes) {
    switch (spec.dims) {
      case 1:
        fn(epc::TensorRule{"fuzzed", dtypes, {s[0]}, spec.alignment});
        break;
      case 2:
        fn(epc::TensorRule{"fuzzed", dtypes, {s[0], s[1]}, spec.alignment});
        break;
      case 3:
        fn(epc::TensorRule{"fuzzed", dtypes, {s[0], s[1], s[2]}, spec.alignment});
        break;
      default:
        fn(epc::TensorRule{"fuzzed", dtypes, {s[0], s[1], s[2], s[3]}, spec.alignment});
        break;
    }
  };
  switch (spec.dtype_count) {
    case 1:
      with_shape({d[0]});
      break;
    case 2:
      with_shape({d[0], d[1]});
      break;
    default:
      with_shape({d[0], d[1], d[2]});
      break;
  }
}

void check_accepted(const EpcTensor& t, const epc::TensorRule& rule) {
  bool listed = false;
  for (EpcDtype d : rule.dtypes) listed = listed || d == t.dtype;
  FUZZ_CHECK(listed);
  const size_t ndim = rule.shape.size();
  FUZZ_CHECK(t.ndim == static_cast<int32_t>(ndim));
  const int64_t* want = rule.shape.begin();
  int64_t bytes = static_cast<int64_t>(epc::dtype_size(t.dtype));
  FUZZ_CHECK(bytes > 0);
  bool empty = false;
  for (size_t i = 0; i < ndim; ++i) {
    FUZZ_CHECK(t.shape[i] >= 0);
    FUZZ_CHECK(want[i] == epc::kAnyExtent || t.shape[i] == want[i]);
    empty = empty || t.shape[i] == 0;
  }
  for (size_t i = 0; i < ndim && !empty; ++i) FUZZ_CHECK(!__builtin_mul_overflow(bytes, t.shape[i], &bytes));
  for (size_t i = ndim; i < EPC_TENSOR_MAX_DIMS; ++i) FUZZ_CHECK(t.shape[i] == 0 && t.strides[i] == 0);
  bool all_zero = true;
  for (size_t i = 0; i < ndim; ++i) all_zero = all_zero && t.strides[i] == 0;
  if (!all_zero && !empty) {
    int64_t expected = 1;
    for (size_t i = ndim; i-- > 0;) {
      FUZZ_CHECK(t.shape[i] <= 1 || t.strides[i] == expected);
      expected *= t.shape[i];  // cannot overflow: the byte count above did not
    }
  }
  if (!empty) FUZZ_CHECK(t.data != nullptr);
  FUZZ_CHECK(rule.alignment <= 1 || reinterpret_cast<uintptr_t>(t.data) % rule.alignment == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  RuleSpec spec;
  spec.dims = 1 + in.byte() % EPC_TENSOR_MAX_DIMS;
  const uint8_t free_dim = in.byte();  // at most one free extent, like the library's rules
  for (uint32_t i = 0; i < spec.dims; ++i) {
    spec.shape[i] = free_dim % 8 == i ? epc::kAnyExtent : in.pick(kExtents);
    if (spec.shape[i] < 0 && spec.shape[i] != epc::kAnyExtent) spec.shape[i] = 1;
  }
  spec.dtype_count = 1 + in.byte() % 3;
  for (uint32_t i = 0; i < spec.dtype_count; ++i) spec.dtypes[i] = 1 + in.byte() % 6;
  spec.alignment = in.pick(kAlignments);

  EpcTensor t;
  std::memset(&t, 0, sizeof t);
  const uint8_t how = in.byte();
  t.dtype = (how & 1) ? in.pick(kDtypes) : spec.dtypes[in.byte() % spec.dtype_count];
  t.ndim = (how & 2) ? in.pick(kRanks) : static_cast<int32_t>(spec.dims);
  for (int i = 0; i < EPC_TENSOR_MAX_DIMS; ++i) {
    if (how & 4) {  // anything anywhere
      t.shape[i] = in.pick(kExtents);
    } else if (i < static_cast<int>(spec.dims)) {  // the rule's extent; the input's where free
      t.shape[i] = spec.shape[i] != epc::kAnyExtent ? spec.shape[i] : in.pick(kExtents);
    }
  }
  if (how & 8) {
    for (int i = 0; i < EPC_TENSOR_MAX_DIMS; ++i) t.strides[i] = in.pick(kExtents);
  } else if (how & 16) {  // the row-major strides of this shape (wrapping, as a caller's might)
    uint64_t stride = 1;
    for (int i = static_cast<int>(spec.dims); i-- > 0;) {
      t.strides[i] = static_cast<int64_t>(stride);
      stride *= static_cast<uint64_t>(t.shape[i]);
    }
  }
  const uintptr_t addresses[] = {0, 0x7f0000000000u, 0x7f0000000004u, 0x7f0000000010u, 1};
  t.data = reinterpret_cast<void*>(in.pick(addresses));

  with_rule(spec, [&](const epc::TensorRule& rule) {
    try {
      epc::check_tensor(&t, rule);
      check_accepted(t, rule);
    } catch (const epc::Error& e) {
      FUZZ_CHECK(e.status() == EPC_ERR_INVALID_ARGUMENT || e.status() == EPC_ERR_UNSUPPORTED);
      FUZZ_CHECK(std::string(e.what()).find("fuzzed") != std::string::npos);
    }
  });
  // A NULL descriptor is refused by name.
  with_rule(spec, [&](const epc::TensorRule& rule) {
    try {
      epc::check_tensor(nullptr, rule);
      FUZZ_CHECK(false);
    } catch (const epc::Error& e) {
      FUZZ_CHECK(e.status() == EPC_ERR_INVALID_ARGUMENT);
    }
  });
  return 0;
}
