// SPDX-License-Identifier: Apache-2.0
#include "core/versioned_struct.hpp"

namespace epc {

void check_versioned_header(const void* caller, size_t known_size, const char* name, bool is_input) {
  VersionedHeader header;
  std::memcpy(&header, caller, sizeof header);
  if (header.struct_size < kMinStructSize) {
    fail(EPC_ERR_ABI_MISMATCH, format("%s.struct_size is %u; set it to sizeof(%s) (%zu in this library)", name,
                                      header.struct_size, name, known_size));
  }
  if (header.struct_size % kStructSizeGranule != 0) {
    fail(EPC_ERR_ABI_MISMATCH,
         format("%s.struct_size is %u, which ends inside a field: every layout's size is a multiple of %u; set it "
                "to sizeof(%s) (%zu in this library)",
                name, header.struct_size, kStructSizeGranule, name, known_size));
  }
  uint32_t caller_major = header.abi_version / 10000;
  if (header.abi_version == 0 || caller_major != EPC_ABI_MAJOR) {
    fail(EPC_ERR_ABI_MISMATCH, format("%s.abi_version is %u (major %u); this library implements ABI major %d: "
                                      "set abi_version to EPC_ABI_VERSION",
                                      name, header.abi_version, caller_major, EPC_ABI_MAJOR));
  }
  if (!is_input || header.struct_size <= known_size) return;
  const unsigned char* bytes = static_cast<const unsigned char*>(caller);
  for (size_t offset = known_size; offset < header.struct_size; ++offset) {
    if (bytes[offset] != 0) {
      fail(EPC_ERR_ABI_MISMATCH, format("%s has struct_size %u but this library knows only %zu bytes of it, and "
                                        "byte %zu of the unknown tail is non-zero: the caller asks for a feature "
                                        "of a newer epcomm",
                                        name, header.struct_size, known_size, offset));
    }
  }
}

}  // namespace epc
