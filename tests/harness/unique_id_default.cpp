// SPDX-License-Identifier: Apache-2.0
// The default unique-id creator. Kept apart from the rest of the harness because it is the
// only part that links against epcomm: the harness self-test injects its own creator and
// is built without this file.
#include <string>

#include "harness.hpp"
#include "hex.hpp"

namespace epc::harness {

bool make_unique_id_with_epcomm(std::string& hex, std::string& error) {
  EpcUniqueId id;
  const EpcStatus status = epc_unique_id_create(&id);
  if (status != EPC_OK) {
    char message[1024] = {0};
    epc_last_error(message, sizeof message, nullptr);
    error = std::string("epc_unique_id_create failed: ") + epc_status_string(status) +
            (message[0] != '\0' ? std::string(": ") + message : std::string());
    return false;
  }
  hex = hex_encode(id.bytes, EPC_UNIQUE_ID_BYTES);
  return true;
}

}  // namespace epc::harness
