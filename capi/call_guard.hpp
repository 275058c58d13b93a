// SPDX-License-Identifier: Apache-2.0
// The boundary between C callers and the C++ core: every exported function runs its body
// through guarded(), which clears the calling thread's message, turns any exception into a
// status plus message, and never lets one escape into C.
#pragma once

#include <cstddef>
#include <exception>
#include <new>

#include "core/error.hpp"
#include "epcomm/epcomm.h"

namespace epc::capi {

// The calling thread's last error message. Fixed storage: recording an error must not
// itself be able to fail.
constexpr size_t kMessageCapacity = 4096;

void clear_message() noexcept;
void set_message(const char* text) noexcept;
const char* message() noexcept;
size_t message_length() noexcept;

template <typename Body>
EpcStatus guarded(Body&& body) noexcept {
  clear_message();
  try {
    body();
    return EPC_OK;
  } catch (const Error& e) {
    set_message(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_message("out of host memory");
    return EPC_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_message(e.what());
    return EPC_ERR_INTERNAL;
  } catch (...) {
    set_message("unknown C++ exception inside epcomm");
    return EPC_ERR_INTERNAL;
  }
}

}  // namespace epc::capi
