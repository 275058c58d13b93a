// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the C ABI's argument and versioned-struct handling, through the exported
// functions only (so the same file also runs, as a corpus replay, against the real
// libepcomm.so in the normal and ASan builds).
//
// An input is a short sequence of calls, each chosen by one byte:
//   plan_query   an EpcGroupConfig of any struct_size and abi_version whose bytes come from the
//                input (in a heap block of exactly struct_size bytes, so ASan sees any read
//                past it), any nranks / lsa_size / num_nodes, and an EpcPlan of any
//                struct_size (also exactly that large), or NULL for either;
//   get_api      any abi_major and any EpcApi.struct_size, or NULL;
//   last_error   any buffer size (a block of exactly that size, or NULL), length or NULL;
//   get_version, status_string.
// Contracts checked on every call: the status is one of the documented codes and never
// EPC_ERR_INTERNAL; the thread's message is empty exactly when the call succeeded;
// out-parameters are untouched on failure; on success only struct_size bytes are written,
// the caller's header is kept, unknown tails are zeroed; a short EpcPlan gets exactly the
// prefix of the full one; epc_last_error copies a NUL-terminated prefix and never clears.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using epc::fuzz::FuzzInput;

// A caller's struct: exactly `size` bytes on the heap (at least the 8-byte header, which
// every versioned struct has), so reading or writing past the caller's struct_size is an
// ASan finding.
struct CallerBlock {
  explicit CallerBlock(size_t size, uint8_t fill) : size(size < 8 ? 8 : size), bytes(new uint8_t[this->size]) {
    std::memset(bytes.get(), fill, this->size);
  }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(bytes.get());
  }
  void set_header(uint32_t struct_size, uint32_t abi_version) {
    std::memcpy(bytes.get(), &struct_size, 4);
    std::memcpy(bytes.get() + 4, &abi_version, 4);
  }
  size_t size;
  std::unique_ptr<uint8_t[]> bytes;
};

const uint32_t kVersions[] = {EPC_ABI_VERSION, 0, 10000, 10100, 10200, 10299, 19999, 20000, 9999, 0xFFFFFFFFu};
const int32_t kRanks[] = {1, 2, 3, 4, 8, 16, 72, 256, 65536, 65537, 0, -1, INT32_MIN, INT32_MAX};

std::string message() {
  size_t length = 0;
  FUZZ_CHECK(epc_last_error(nullptr, 0, &length) == EPC_OK);
  std::string text(length + 1, '\xEE');
  size_t again = 0;
  FUZZ_CHECK(epc_last_error(&text[0], text.size(), &again) == EPC_OK);
  FUZZ_CHECK(again == length && text[length] == '\0' && std::strlen(text.c_str()) == length);
  text.resize(length);
  return text;
}

// The status and message of any call: a documented code, never INTERNAL, and a message
// exactly when it failed. These calls need no GPU, so GPU failures cannot happen either.
void check_outcome(EpcStatus status) {
  FUZZ_CHECK(status == EPC_OK || status == EPC_ERR_INVALID_ARGUMENT || status == EPC_ERR_ABI_MISMATCH ||
             status == EPC_ERR_UNSUPPORTED);
  FUZZ_CHECK((status == EPC_OK) == message().empty());
}

uint32_t struct_size_for(FuzzInput& in, uint32_t known) {
  const uint8_t how = in.byte();
  switch (how % 6) {
    case 0:
      return known;
    case 1:
      return known - (in.byte() % known);  // an older caller (or less)
    case 2:
      return known + in.byte() % 64;  // a newer caller
    case 3:
      return in.byte() % 16;  // no header to speak of
    case 4:
      return 8 + 4 * (in.byte() % (known / 4 + 8));  // field boundaries
    default:
      return in.raw<uint16_t>() % 2048;
  }
}

void call_plan_query(FuzzInput& in) {
  const uint8_t shape = in.byte();
  const uint32_t config_size = struct_size_for(in, sizeof(EpcGroupConfig));
  CallerBlock config(config_size, 0);
  in.bytes(config.bytes.get(), config.size);
  // struct_size is the block's true size (a caller's struct is as large as it says); the
  // version is any, or the current one.
  config.set_header(config_size, (shape & 1) ? in.pick(kVersions) : EPC_ABI_VERSION);
  const int32_t nranks = in.pick(kRanks);
  const int32_t lsa_size = (shape & 2) ? in.pick(kRanks) : nranks;
  const int32_t num_nodes = (shape & 4) ? in.pick(kRanks) : 1;
  const uint32_t plan_size = struct_size_for(in, sizeof(EpcPlan));
  CallerBlock plan(plan_size, 0xAB);
  plan.set_header(plan_size, (shape & 8) ? in.pick(kVersions) : EPC_ABI_VERSION);
  const std::vector<uint8_t> before(plan.bytes.get(), plan.bytes.get() + plan.size);

  const EpcGroupConfig* config_arg = (shape & 16) ? nullptr : config.as<EpcGroupConfig>();
  EpcPlan* plan_arg = (shape & 32) ? nullptr : plan.as<EpcPlan>();
  const EpcStatus status = epc_plan_query(config_arg, nranks, lsa_size, num_nodes, plan_arg);
  check_outcome(status);
  if (status != EPC_OK) {
    FUZZ_CHECK(std::memcmp(plan.bytes.get(), before.data(), plan.size) == 0);
    return;
  }
  FUZZ_CHECK(config_arg != nullptr && plan_arg != nullptr);
  FUZZ_CHECK(plan_size >= 8 && plan.size == plan_size);
  FUZZ_CHECK(std::memcmp(plan.bytes.get(), before.data(), 8) == 0);  // the caller's header
  // The same query into a full-size EpcPlan: the caller's bytes are exactly its prefix, and
  // zeros past the end this library knows.
  EpcPlan full;
  std::memset(&full, 0xCD, sizeof full);
  full.struct_size = sizeof full;
  full.abi_version = EPC_ABI_VERSION;
  FUZZ_CHECK(epc_plan_query(config_arg, nranks, lsa_size, num_nodes, &full) == EPC_OK);
  const size_t known = plan_size < sizeof full ? plan_size : sizeof full;
  FUZZ_CHECK(std::memcmp(plan.bytes.get() + 8, reinterpret_cast<const uint8_t*>(&full) + 8, known - 8) == 0);
  for (size_t i = sizeof full; i < plan_size; ++i) FUZZ_CHECK(plan.bytes[i] == 0);
  // The full plan itself: regions in range, named, NUL-terminated, unused entries zero.
  FUZZ_CHECK(full.num_regions >= 1 && full.num_regions <= EPC_PLAN_MAX_REGIONS);
  uint64_t end = 0;
  for (uint32_t r = 0; r < EPC_PLAN_MAX_REGIONS; ++r) {
    const EpcPlanRegion& region = full.regions[r];
    if (r >= full.num_regions) {
      const EpcPlanRegion zero{};
      FUZZ_CHECK(std::memcmp(&region, &zero, sizeof zero) == 0);
      continue;
    }
    FUZZ_CHECK(std::memchr(region.name, '\0', sizeof region.name) != nullptr && region.name[0] != '\0');
    FUZZ_CHECK(region.offset == end && region.size > 0);
    end = region.offset + region.size;
  }
  FUZZ_CHECK(full.symmetric_bytes >= end);
  FUZZ_CHECK(full.mode == EPC_MODE_LOW_LATENCY || full.mode == EPC_MODE_HIGH_THROUGHPUT);
}

void call_get_api(FuzzInput& in) {
  const uint8_t shape = in.byte();
  const uint32_t abi_major = (shape & 1) ? in.raw<uint32_t>() : EPC_ABI_MAJOR;
  const uint32_t api_size = struct_size_for(in, sizeof(EpcApi));
  CallerBlock api(api_size, 0x5A);
  api.set_header(api_size, in.raw<uint32_t>());
  const std::vector<uint8_t> before(api.bytes.get(), api.bytes.get() + api.size);
  EpcApi* api_arg = (shape & 2) ? nullptr : api.as<EpcApi>();
  const EpcStatus status = epc_get_api(abi_major, api_arg);
  check_outcome(status);
  if (status != EPC_OK) {
    FUZZ_CHECK(std::memcmp(api.bytes.get(), before.data(), api.size) == 0);
    return;
  }
  FUZZ_CHECK(abi_major == EPC_ABI_MAJOR && api_arg != nullptr && api_size >= 8);
  EpcApi head;
  std::memcpy(&head, api.bytes.get(), 8);
  FUZZ_CHECK(head.struct_size == sizeof(EpcApi));  // the library's size, not the caller's
  FUZZ_CHECK(head.abi_version == EPC_ABI_VERSION);
  // Every function pointer the caller has room for is set; the rest of its block is zero.
  const size_t known = api_size < sizeof(EpcApi) ? api_size : sizeof(EpcApi);
  for (size_t offset = 8; offset + sizeof(void*) <= known; offset += sizeof(void*)) {
    void* fn = nullptr;
    std::memcpy(&fn, api.bytes.get() + offset, sizeof fn);
    FUZZ_CHECK(fn != nullptr);
  }
  for (size_t i = sizeof(EpcApi); i < api_size; ++i) FUZZ_CHECK(api.bytes[i] == 0);
  if (api_size >= sizeof(EpcApi)) {  // the table really points at this library's functions
    EpcApi table;
    std::memcpy(&table, api.bytes.get(), sizeof table);
    FUZZ_CHECK(std::strcmp(table.status_string(EPC_OK), epc_status_string(EPC_OK)) == 0);
    uint32_t major = 0;
    FUZZ_CHECK(table.get_version(&major, nullptr, nullptr) == EPC_OK && major == EPC_ABI_MAJOR);
  }
}

void call_last_error(FuzzInput& in) {
  const std::string text = message();  // whatever the previous call left
  const uint8_t shape = in.byte();
  size_t buf_size = 0;
  switch (shape % 4) {
    case 0:
      buf_size = text.size() + 1;
      break;
    case 1:
      buf_size = in.byte() % (text.size() + 2);
      break;
    case 2:
      buf_size = in.raw<uint16_t>() % 8192;
      break;
    default:
      buf_size = 0;
      break;
  }
  const bool null_buf = (shape & 4) != 0;
  std::unique_ptr<char[]> buf(buf_size > 0 ? new char[buf_size] : nullptr);
  if (buf) std::memset(buf.get(), 0x7F, buf_size);
  size_t length = 0xDEAD;
  size_t* length_arg = (shape & 8) ? nullptr : &length;
  const EpcStatus status = epc_last_error(null_buf ? nullptr : buf.get(), buf_size, length_arg);
  if (null_buf && buf_size != 0) {
    FUZZ_CHECK(status == EPC_ERR_INVALID_ARGUMENT);
  } else {
    FUZZ_CHECK(status == EPC_OK);
    if (length_arg != nullptr) FUZZ_CHECK(length == text.size());
    if (buf_size > 0) {
      const size_t copied = text.size() < buf_size - 1 ? text.size() : buf_size - 1;
      FUZZ_CHECK(std::memcmp(buf.get(), text.data(), copied) == 0 && buf[copied] == '\0');
    }
  }
  FUZZ_CHECK(message() == text);  // reading never clears, whatever the arguments
}

void call_get_version(FuzzInput& in) {
  const uint8_t shape = in.byte();
  uint32_t major = 0, minor = 0, patch = 0;
  const EpcStatus status =
      epc_get_version((shape & 1) ? nullptr : &major, (shape & 2) ? nullptr : &minor, (shape & 4) ? nullptr : &patch);
  check_outcome(status);
  FUZZ_CHECK(status == EPC_OK);
  if (!(shape & 1)) FUZZ_CHECK(major == EPC_ABI_MAJOR);
}

void call_status_string(FuzzInput& in) {
  const EpcStatus status = in.raw<int32_t>();
  const char* text = epc_status_string(status);
  FUZZ_CHECK(text != nullptr && text[0] != '\0');
  const bool known = status >= EPC_OK && status <= EPC_ERR_INTERNAL;
  FUZZ_CHECK(known == (std::strcmp(text, "unknown status") != 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  for (int call = 0; call < 8 && in.remaining() > 0; ++call) {
    switch (in.byte() % 5) {
      case 0:
        call_plan_query(in);
        break;
      case 1:
        call_get_api(in);
        break;
      case 2:
        call_last_error(in);
        break;
      case 3:
        call_get_version(in);
        break;
      default:
        call_status_string(in);
        break;
    }
  }
  return 0;
}
