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
//   get_version, status_string;
//   handle_create, handle_update, handle_query, dispatch, combine, complete: on a NULL group
//                or handle, or on bytes that are not a live one (zeros, the other type's
//                magic word, input bytes), with an EpcHandleConfig, EpcRouting,
//                EpcDispatchArgs, EpcCombineArgs or EpcHandleInfo of any struct_size and
//                bytes from the input (pointer fields NULL or pointing at tensor descriptors
//                whose bytes come from the input, their data pointers NULL), or NULL.
// Contracts checked on every call: the status is one of the documented codes and never
// EPC_ERR_INTERNAL; the thread's message is empty exactly when the call succeeded;
// out-parameters are untouched on failure; on success only struct_size bytes are written,
// the caller's header is kept, unknown tails are zeroed; a short EpcPlan gets exactly the
// prefix of the full one; the plan reports the group defaults the header states
// (max_token_bytes 2H or H + H/32, recv_capacity R * T, max_pending_steps 2 or as given, up to 3); epc_last_error
// copies a NUL-terminated prefix and never clears; no call on an object that is not a live
// group or handle succeeds or touches its outputs, whatever its structs hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
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

const uint32_t kVersions[] = {EPC_ABI_VERSION, 0,     10000, 10300, 19999, 20000,
                              20001,           20100, 29999, 30000, 9999,  0xFFFFFFFFu};
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

// The calls on groups and handles: here every object is NULL or dead, so the call fails
// with INVALID_ARGUMENT (or ABI_MISMATCH for a struct checked first), and a message. The
// libFuzzer build has no GPU calls at all (gpu_calls_absent.cpp) and refuses them by name.
void check_refused(EpcStatus status) {
  const std::string text = message();
  FUZZ_CHECK(!text.empty());
  FUZZ_CHECK(status == EPC_ERR_INVALID_ARGUMENT || status == EPC_ERR_ABI_MISMATCH ||
             (status == EPC_ERR_UNSUPPORTED && text.find("not part of the fuzz build") != std::string::npos));
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

  // The group fields as the library reads them (a shorter struct: zeros past its end) and
  // what the header says the plan reports after defaults.
  EpcGroupConfig raw;
  std::memset(&raw, 0, sizeof raw);
  std::memcpy(&raw, config.bytes.get(), config_size < sizeof raw ? config_size : sizeof raw);
  FUZZ_CHECK(full.mode == (raw.mode == 0 ? EPC_MODE_LOW_LATENCY : raw.mode));
  const uint64_t h = raw.hidden;
  const uint64_t wide = 2 * h, narrow = h + h / 32;
  if (full.mode == EPC_MODE_HIGH_THROUGHPUT) {
    // HT slots hold max_token_bytes as given, up to kMaxTokenBytesPerChannel per channel.
    FUZZ_CHECK(full.max_token_bytes == (raw.max_token_bytes == 0 ? wide : raw.max_token_bytes));
    FUZZ_CHECK(full.max_token_bytes <= h * epc::limits::kMaxTokenBytesPerChannel);
  } else if (raw.max_token_bytes == 0 || raw.max_token_bytes >= wide) {
    FUZZ_CHECK(full.max_token_bytes == wide);
  } else {
    FUZZ_CHECK(h % 128 == 0 && raw.max_token_bytes >= narrow && full.max_token_bytes == narrow);
  }
  const uint64_t tokens = raw.max_tokens_per_rank != 0        ? raw.max_tokens_per_rank
                          : full.mode == EPC_MODE_LOW_LATENCY ? 128
                                                              : 4096;
  // recv_capacity: R * T by default; LL groups hold R * T by construction, HT groups (2.1)
  // any positive value up to it.
  const uint64_t worst = static_cast<uint64_t>(nranks) * tokens;
  FUZZ_CHECK(full.recv_capacity == (raw.recv_capacity == 0 ? worst : raw.recv_capacity));
  FUZZ_CHECK(full.recv_capacity > 0 && full.recv_capacity <= worst);
  FUZZ_CHECK(full.mode == EPC_MODE_HIGH_THROUGHPUT || full.recv_capacity == worst);
  FUZZ_CHECK(full.max_pending_steps == (raw.max_pending_steps == 0 ? 2u : raw.max_pending_steps));
  FUZZ_CHECK(full.max_pending_steps <= 3);
  FUZZ_CHECK(raw.overflow == EPC_OVERFLOW_FAIL || raw.overflow == EPC_OVERFLOW_DROP);
  // EPC_GROUP_COMBINE_PER_ENTRY, the one flag, in both modes (2.1).
  FUZZ_CHECK(raw.flags == 0 || raw.flags == EPC_GROUP_COMBINE_PER_ENTRY);
  FUZZ_CHECK(full.reserved0 == 0);
}

// ---- Groups and handles that are not live --------------------------------------------

// An object pointer that is not a live group or handle: NULL, zeros (a destroyed one), the
// other type's magic word, or input bytes. 64 bytes, more than the magic word a call reads.
// The magic words capi/handles.hpp gives live objects.
constexpr uint64_t kGroupMagic = 0x70757247435045ull;     // "EPCGrup"
constexpr uint64_t kHandleMagic = 0x6c646e6148435045ull;  // "EPCHandl"

struct DeadObject {
  explicit DeadObject(FuzzInput& in) {
    std::memset(words, 0, sizeof words);
    kind = in.byte() % 5;
    if (kind == 2) words[0] = kGroupMagic;  // and zeros: no group behind it
    if (kind == 3) words[0] = kHandleMagic;
    if (kind == 4) {
      in.bytes(words, sizeof words);
      // Input bytes never spell a live magic word: that object would be trusted as live.
      if (words[0] == kGroupMagic || words[0] == kHandleMagic) words[0] ^= 1;
    }
  }
  template <typename T>
  T* as() {
    return kind == 0 ? nullptr : reinterpret_cast<T*>(words);
  }
  uint8_t kind;
  uint64_t words[8];
};

// A versioned input struct from the input: any struct_size and abi_version (in a block of
// exactly that size), its pointer fields (at the offsets given) NULL or pointing at tensor
// descriptors whose bytes come from the input with a NULL data pointer, or NULL itself.
struct ArgStruct {
  ArgStruct(FuzzInput& in, uint32_t known, std::initializer_list<size_t> pointer_offsets)
      : size(struct_size_for(in, known)), block(size, 0), tensors(pointer_offsets.size()) {
    const uint8_t shape = in.byte();
    in.bytes(block.bytes.get(), block.size);
    block.set_header(size, (shape & 1) ? in.pick(kVersions) : EPC_ABI_VERSION);
    null = (shape & 2) != 0;
    size_t i = 0;
    for (size_t offset : pointer_offsets) {
      EpcTensor& t = tensors[i++];
      in.bytes(&t, sizeof t);
      t.data = nullptr;
      const EpcTensor* value = in.boolean() ? &t : nullptr;
      if (offset + sizeof value <= block.size) std::memcpy(block.bytes.get() + offset, &value, sizeof value);
    }
  }
  template <typename T>
  const T* as() {
    return null ? nullptr : block.as<T>();
  }
  uint32_t size;
  CallerBlock block;
  std::vector<EpcTensor> tensors;
  bool null = false;
};

void call_handle_create(FuzzInput& in) {
  DeadObject group(in);
  ArgStruct config(in, sizeof(EpcHandleConfig), {});
  ArgStruct routing(in, sizeof(EpcRouting), {offsetof(EpcRouting, topk_idx), offsetof(EpcRouting, num_tokens)});
  EpcHandle* const sentinel = reinterpret_cast<EpcHandle*>(&group.words[7]);
  EpcHandle* handle = sentinel;
  const bool null_out = in.boolean();
  const EpcStatus status = epc_handle_create(group.as<EpcGroup>(), config.as<EpcHandleConfig>(),
                                             routing.as<EpcRouting>(), nullptr, null_out ? nullptr : &handle);
  check_refused(status);
  FUZZ_CHECK(handle == sentinel);
}

void call_handle_update(FuzzInput& in) {
  DeadObject handle(in);
  ArgStruct routing(in, sizeof(EpcRouting), {offsetof(EpcRouting, topk_idx), offsetof(EpcRouting, num_tokens)});
  check_refused(epc_handle_update(handle.as<EpcHandle>(), routing.as<EpcRouting>(), nullptr));
}

void call_handle_query(FuzzInput& in) {
  DeadObject handle(in);
  const uint32_t info_size = struct_size_for(in, sizeof(EpcHandleInfo));
  CallerBlock info(info_size, 0x6B);
  info.set_header(info_size, in.boolean() ? in.pick(kVersions) : EPC_ABI_VERSION);
  const std::vector<uint8_t> before(info.bytes.get(), info.bytes.get() + info.size);
  EpcHandleInfo* info_arg = in.boolean() ? nullptr : info.as<EpcHandleInfo>();
  check_refused(epc_handle_query(handle.as<EpcHandle>(), info_arg));
  FUZZ_CHECK(std::memcmp(info.bytes.get(), before.data(), info.size) == 0);
}

void call_dispatch(FuzzInput& in) {
  DeadObject handle(in);
  ArgStruct args(
      in, sizeof(EpcDispatchArgs),
      {offsetof(EpcDispatchArgs, x), offsetof(EpcDispatchArgs, x_scales), offsetof(EpcDispatchArgs, x_global_scale),
       offsetof(EpcDispatchArgs, topk_weights), offsetof(EpcDispatchArgs, out_x), offsetof(EpcDispatchArgs, out_scales),
       offsetof(EpcDispatchArgs, out_topk_idx), offsetof(EpcDispatchArgs, out_topk_weights),
       offsetof(EpcDispatchArgs, out_expert_counts), offsetof(EpcDispatchArgs, out_expert_offsets),
       offsetof(EpcDispatchArgs, out_rank_counts), offsetof(EpcDispatchArgs, out_num_recv),
       offsetof(EpcDispatchArgs, out_expert_counts_host), offsetof(EpcDispatchArgs, acc_expert_counts)});
  check_refused(epc_dispatch(handle.as<EpcHandle>(), args.as<EpcDispatchArgs>(), nullptr));
}

void call_combine(FuzzInput& in) {
  DeadObject handle(in);
  ArgStruct args(
      in, sizeof(EpcCombineArgs),
      {offsetof(EpcCombineArgs, x), offsetof(EpcCombineArgs, topk_weights), offsetof(EpcCombineArgs, home_topk_weights),
       offsetof(EpcCombineArgs, out), offsetof(EpcCombineArgs, out_topk_weights)});
  check_refused(epc_combine(handle.as<EpcHandle>(), args.as<EpcCombineArgs>(), nullptr));
}

void call_complete(FuzzInput& in) {
  DeadObject handle(in);
  const uint32_t flags = in.boolean() ? in.raw<uint32_t>() : 0;
  check_refused(epc_complete(handle.as<EpcHandle>(), flags, nullptr));
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
  const bool known = status >= EPC_OK && status <= EPC_ERR_INVALID_USAGE;
  FUZZ_CHECK(known == (std::strcmp(text, "unknown status") != 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  for (int call = 0; call < 8 && in.remaining() > 0; ++call) {
    switch (in.byte() % 11) {
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
      case 4:
        call_status_string(in);
        break;
      case 5:
        call_handle_create(in);
        break;
      case 6:
        call_handle_update(in);
        break;
      case 7:
        call_handle_query(in);
        break;
      case 8:
        call_dispatch(in);
        break;
      case 9:
        call_combine(in);
        break;
      default:
        call_complete(in);
        break;
    }
  }
  return 0;
}
