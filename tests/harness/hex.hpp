// SPDX-License-Identifier: Apache-2.0
// Hex text for binary ids that travel through environment variables.
#ifndef EPC_TESTS_GPU_HARNESS_HEX_HPP
#define EPC_TESTS_GPU_HARNESS_HEX_HPP

#include <cstddef>
#include <cstdint>
#include <string>

namespace epc::harness {

// Lowercase, two digits per byte.
std::string hex_encode(const std::uint8_t* bytes, std::size_t size);

// Decodes exactly `size` bytes from 2 * `size` hex digits of either case. Returns false,
// leaving `out` unspecified, if `hex` has another length or a non-hex character.
bool hex_decode(const std::string& hex, std::uint8_t* out, std::size_t size);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_HEX_HPP
