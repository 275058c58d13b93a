// SPDX-License-Identifier: Apache-2.0
// The ABI's rules for extensible structs (see epcomm.h): every such struct begins with
// `uint32_t struct_size; uint32_t abi_version;`. An older caller passes a shorter struct and
// gets defaults (zeros) for the tail it does not know; a newer caller may pass a longer one
// only if every byte this library does not know is zero, because a non-zero unknown field
// is a request this build cannot honour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"

namespace epc {

struct VersionedHeader {
  uint32_t struct_size;
  uint32_t abi_version;
};

// Smallest struct_size accepted: the header itself.
constexpr uint32_t kMinStructSize = sizeof(VersionedHeader);
// Extensible structs hold 8-byte fields (pointers, uint64) at 8-byte offsets, and one of
// 4-byte fields only (EpcCommConfig) comes in pairs of them, so every release's size is a
// multiple of this: a size between ends inside such a field, and reading part of a pointer
// would give a wild one.
constexpr uint32_t kStructSizeGranule = 8;
template <typename T>
constexpr bool kInSizeSteps = alignof(T) <= kStructSizeGranule && sizeof(T) % kStructSizeGranule == 0;

// Checks `struct_size`/`abi_version` of a caller's struct named `name` (for messages) whose
// full size in this build is `known_size`. For inputs also checks the unknown tail is zero.
void check_versioned_header(const void* caller, size_t known_size, const char* name, bool is_input);

// Copies a caller's input struct into a T, applying the shorter/longer rules above.
template <typename T>
T read_versioned(const T* caller, const char* name) {
  static_assert(std::is_trivially_copyable<T>::value, "ABI structs are plain data");
  static_assert(kInSizeSteps<T>, "struct sizes come in 8-byte steps (check_versioned_header refuses others)");
  if (caller == nullptr) fail_argument(format("%s pointer is NULL", name));
  check_versioned_header(caller, sizeof(T), name, /*is_input=*/true);
  T value;
  std::memset(&value, 0, sizeof(T));
  size_t n = caller->struct_size < sizeof(T) ? caller->struct_size : sizeof(T);
  std::memcpy(&value, caller, n);
  return value;
}

// Writes `value` into a caller's output struct: only the first struct_size bytes the caller
// owns, with any tail this build does not know set to zero. Call only once the whole
// operation has succeeded (out-parameters are written only on success).
template <typename T>
void write_versioned(const T& value, T* caller, const char* name) {
  static_assert(std::is_trivially_copyable<T>::value, "ABI structs are plain data");
  uint32_t caller_size = caller->struct_size;
  uint32_t caller_version = caller->abi_version;
  size_t n = caller_size < sizeof(T) ? caller_size : sizeof(T);
  std::memcpy(caller, &value, n);
  if (caller_size > sizeof(T)) {
    std::memset(reinterpret_cast<unsigned char*>(caller) + sizeof(T), 0, caller_size - sizeof(T));
  }
  caller->struct_size = caller_size;
  caller->abi_version = caller_version;
  (void)name;
}

// Validates an output struct's header before any work, so a bad struct fails early.
template <typename T>
void check_output_struct(const T* caller, const char* name) {
  static_assert(kInSizeSteps<T>, "struct sizes come in 8-byte steps (check_versioned_header refuses others)");
  if (caller == nullptr) fail_argument(format("%s pointer is NULL", name));
  check_versioned_header(caller, sizeof(T), name, /*is_input=*/false);
}

}  // namespace epc
