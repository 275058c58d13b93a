// SPDX-License-Identifier: Apache-2.0
#include "core/tensor_check.hpp"

#include <string>

#include "core/config.hpp"
#include "core/error.hpp"

namespace epc {

size_t dtype_size(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_BF16:
    case EPC_DTYPE_FP16:
      return 2;
    case EPC_DTYPE_FP32:
    case EPC_DTYPE_INT32:
      return 4;
    case EPC_DTYPE_INT64:
      return 8;
    case EPC_DTYPE_FP8_E4M3:
    case EPC_DTYPE_UINT8:
    case EPC_DTYPE_FP8_E5M2:
    case EPC_DTYPE_E8M0:
    case EPC_DTYPE_FP4_E2M1X2:
      return 1;
    case EPC_DTYPE_E8M0X4:
      return 4;
    default:
      return 0;
  }
}

namespace {

std::string shape_text(const int64_t* shape, size_t ndim) {
  std::string out = "[";
  for (size_t i = 0; i < ndim; ++i) {
    if (i != 0) out += ", ";
    out += shape[i] == kAnyExtent ? std::string("*") : std::to_string(shape[i]);
  }
  return out + "]";
}

std::string dtypes_text(std::initializer_list<EpcDtype> dtypes) {
  std::string out;
  for (EpcDtype d : dtypes) {
    if (!out.empty()) out += " or ";
    out += dtype_name(d);
  }
  return out;
}

}  // namespace

namespace {

// Everything of check_tensor but the strides: NULL, dtype, shape, size, trailing dimensions.
void check_shape(const EpcTensor* t, const TensorRule& rule) {
  if (t == nullptr) fail_argument(format("tensor %s is NULL", rule.name));
  bool dtype_ok = false;
  for (EpcDtype d : rule.dtypes) dtype_ok = dtype_ok || t->dtype == d;
  if (!dtype_ok) {
    fail_argument(format("tensor %s has dtype %s; expected %s", rule.name, dtype_name(t->dtype),
                         dtypes_text(rule.dtypes).c_str()));
  }
  const size_t ndim = rule.shape.size();
  const int64_t* want = rule.shape.begin();
  if (t->ndim != static_cast<int32_t>(ndim)) {
    fail_argument(format("tensor %s has %d dimensions; expected %zu, shape %s", rule.name, t->ndim, ndim,
                         shape_text(want, ndim).c_str()));
  }
  bool empty = false;
  for (size_t i = 0; i < ndim; ++i) {
    if (t->shape[i] < 0 || (want[i] != kAnyExtent && t->shape[i] != want[i])) {
      fail_argument(format("tensor %s has shape %s; expected %s", rule.name, shape_text(t->shape, ndim).c_str(),
                           shape_text(want, ndim).c_str()));
    }
    empty = empty || t->shape[i] == 0;
  }
  // Callers turn extents into element counts, byte counts and addresses: a tensor with
  // elements must have a size in bytes that int64 holds (a free extent such as topk_idx's B
  // is otherwise unbounded until later checks).
  if (!empty) {
    int64_t bytes = static_cast<int64_t>(dtype_size(t->dtype));
    for (size_t i = 0; i < ndim; ++i) {
      if (__builtin_mul_overflow(bytes, t->shape[i], &bytes)) {
        fail_argument(format("tensor %s has shape %s: its size in bytes does not fit in 64 bits", rule.name,
                             shape_text(t->shape, ndim).c_str()));
      }
    }
  }
  for (size_t i = ndim; i < EPC_TENSOR_MAX_DIMS; ++i) {
    if (t->shape[i] != 0 || t->strides[i] != 0) {
      fail_argument(format("tensor %s: shape and strides past ndim must be 0", rule.name));
    }
  }
}

bool is_empty(const EpcTensor* t) {
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] == 0) return true;
  }
  return false;
}

void check_data(const EpcTensor* t, const TensorRule& rule) {
  if (!is_empty(t) && t->data == nullptr) fail_argument(format("tensor %s has NULL data", rule.name));
  if (rule.alignment > 1 && reinterpret_cast<uintptr_t>(t->data) % rule.alignment != 0) {
    fail_argument(format("tensor %s data %p is not %u-byte aligned", rule.name, t->data, rule.alignment));
  }
}

}  // namespace

void check_strided_tensor(const EpcTensor* t, const TensorRule& rule, int64_t* strides) {
  check_shape(t, rule);
  const int ndim = t->ndim;
  bool all_zero = true;
  for (int i = 0; i < ndim; ++i) all_zero = all_zero && t->strides[i] == 0;
  int64_t row_major = 1;
  for (int i = ndim; i-- > 0;) {
    strides[i] = all_zero ? row_major : t->strides[i];
    row_major *= t->shape[i] > 0 ? t->shape[i] : 1;  // check_shape bounded the product
  }
  if (is_empty(t)) {
    check_data(t, rule);
    return;
  }
  // No two elements alias: in increasing stride order, each dimension of extent > 1 steps
  // past everything the dimensions before it span.
  int order[EPC_TENSOR_MAX_DIMS];
  for (int i = 0; i < ndim; ++i) {  // insertion sort of at most four dimensions by stride
    int j = i;
    for (; j > 0 && strides[order[j - 1]] > strides[i]; --j) order[j] = order[j - 1];
    order[j] = i;
  }
  int64_t span = 1;  // elements the dimensions so far reach together, in units of the element
  for (int j = 0; j < ndim; ++j) {
    const int i = order[j];
    if (t->shape[i] == 1) continue;
    if (strides[i] < span) {
      fail_argument(format("tensor %s: stride %lld of dimension %d makes elements overlap (at least %lld needed)",
                           rule.name, static_cast<long long>(strides[i]), i, static_cast<long long>(span)));
    }
    // This dimension's steps lie past what the earlier ones span, so it adds its reach to theirs.
    int64_t reach = 0, bytes = 0;
    if (__builtin_mul_overflow(strides[i], t->shape[i] - 1, &reach) || __builtin_add_overflow(span, reach, &span) ||
        __builtin_mul_overflow(span, static_cast<int64_t>(dtype_size(t->dtype)), &bytes)) {
      fail_argument(format("tensor %s: its strides reach past what 64 bits of bytes address", rule.name));
    }
  }
  check_data(t, rule);
}

void check_tensor(const EpcTensor* t, const TensorRule& rule) {
  check_shape(t, rule);
  const size_t ndim = rule.shape.size();
  // Contiguous: all-zero strides, or exactly the row-major strides.
  bool all_zero = true;
  for (size_t i = 0; i < ndim; ++i) all_zero = all_zero && t->strides[i] == 0;
  if (!all_zero) {
    int64_t expected = 1;
    for (size_t i = ndim; i-- > 0;) {
      if (t->shape[i] > 1 && t->strides[i] != expected) {
        fail(EPC_ERR_UNSUPPORTED,
             format("tensor %s is not contiguous (stride %lld in dimension "
                    "%zu, expected %lld); pass a contiguous tensor",
                    rule.name, static_cast<long long>(t->strides[i]), i, static_cast<long long>(expected)));
      }
      // Only an empty tensor's extents can overflow here (the size check above bounds the
      // rest); it addresses nothing, so the outer strides need no check.
      if (__builtin_mul_overflow(expected, t->shape[i], &expected)) break;
    }
  }
  check_data(t, rule);
}

bool tensors_overlap(const EpcTensor* a, const EpcTensor* b) {
  const auto bytes = [](const EpcTensor* t) {
    size_t n = dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
    return n;
  };
  const auto* a0 = static_cast<const char*>(a->data);
  const auto* b0 = static_cast<const char*>(b->data);
  const size_t an = bytes(a), bn = bytes(b);
  return an > 0 && bn > 0 && a0 < b0 + bn && b0 < a0 + an;
}

}  // namespace epc
