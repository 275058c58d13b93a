// SPDX-License-Identifier: Apache-2.0
#include <cstring>

#include "capi/call_guard.hpp"

namespace epc::capi {

namespace {
thread_local char t_message[kMessageCapacity];
thread_local size_t t_length = 0;
}  // namespace

void clear_message() noexcept {
  t_message[0] = '\0';
  t_length = 0;
}

void set_message(const char* text) noexcept {
  size_t n = std::strlen(text);
  if (n >= kMessageCapacity) n = kMessageCapacity - 1;
  std::memcpy(t_message, text, n);
  t_message[n] = '\0';
  t_length = n;
}

const char* message() noexcept { return t_message; }
size_t message_length() noexcept { return t_length; }

}  // namespace epc::capi

extern "C" EpcStatus epc_last_error(char* buf, size_t buf_size, size_t* out_length) {
  // Deliberately not guarded(): reading the message must not clear it.
  if (buf == nullptr && buf_size != 0) return EPC_ERR_INVALID_ARGUMENT;
  size_t length = epc::capi::message_length();
  if (buf_size != 0) {
    size_t n = length < buf_size - 1 ? length : buf_size - 1;
    std::memcpy(buf, epc::capi::message(), n);
    buf[n] = '\0';
  }
  if (out_length != nullptr) *out_length = length;
  return EPC_OK;
}

extern "C" const char* epc_status_string(EpcStatus status) {
  switch (status) {
    case EPC_OK:
      return "success";
    case EPC_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case EPC_ERR_ABI_MISMATCH:
      return "ABI mismatch between caller and library";
    case EPC_ERR_UNSUPPORTED:
      return "unsupported by this build or machine";
    case EPC_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case EPC_ERR_CUDA:
      return "CUDA error";
    case EPC_ERR_NCCL:
      return "NCCL error";
    case EPC_ERR_TIMEOUT:
      return "timeout: a peer did not arrive";
    case EPC_ERR_NO_DEVICE:
      return "no CUDA device";
    case EPC_ERR_BUFFER_TOO_SMALL:
      return "buffer too small";
    case EPC_ERR_INTERNAL:
      return "internal error in epcomm";
    case EPC_ERR_CAPACITY:
      return "a step received more rows than the handle's capacity";
    case EPC_ERR_INVALID_USAGE:
      return "call out of order";
    default:
      return "unknown status";
  }
}
