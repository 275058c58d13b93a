/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dlopen path of the C ABI, as a runtime without a link-time dependency would use it:
 * open the library by its SONAME file (libepcomm.so.<EPC_ABI_MAJOR>, next to the built
 * library), resolve the single symbol epc_get_api, ask for the table of this header's
 * major, and do everything else through the table. Only CPU-side calls are made, so no GPU
 * is needed.
 *
 * Usage: dlopen_test /path/to/libepcomm.so.<major>[.<minor>.<patch>]
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "epcomm/epcomm.h"

typedef EpcStatus (*GetApiFn)(uint32_t abi_major, EpcApi* out_api);

static int failures = 0;

static void expect(int ok, const char* what) {
  printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) failures++;
}

/* The thread's last error message through the table ("" if it cannot be read). */
static void last_error(const EpcApi* api, char* buf, size_t size) {
  buf[0] = '\0';
  if (api->last_error(buf, size, NULL) != EPC_OK) buf[0] = '\0';
}

/* Every entry of the table: its offset and the exported function it must point at. */
struct Entry {
  size_t offset;
  const char* symbol;
};
#define EPC_ENTRY(field) {offsetof(EpcApi, field), "epc_" #field}
static const struct Entry kEntries[] = {
    EPC_ENTRY(status_string), EPC_ENTRY(last_error),    EPC_ENTRY(get_version),   EPC_ENTRY(unique_id_create),
    EPC_ENTRY(comm_init),     EPC_ENTRY(comm_destroy),  EPC_ENTRY(plan_query),    EPC_ENTRY(group_create),
    EPC_ENTRY(group_destroy), EPC_ENTRY(group_query),   EPC_ENTRY(group_barrier), EPC_ENTRY(group_async_error),
    EPC_ENTRY(handle_create), EPC_ENTRY(handle_update), EPC_ENTRY(handle_query),  EPC_ENTRY(handle_destroy),
    EPC_ENTRY(dispatch),      EPC_ENTRY(combine),       EPC_ENTRY(complete),      EPC_ENTRY(comm_init_config),
};
#define NUM_ENTRIES (sizeof kEntries / sizeof kEntries[0])

int main(int argc, char** argv) {
  void* lib;
  void* symbol;
  GetApiFn get_api;
  EpcApi api = EPC_API_INIT;
  char path[4096];
  char message[512];
  char what[1024];
  const char* slash;
  size_t i;

  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libepcomm.so.%d\n", argv[0], EPC_ABI_MAJOR);
    return 2;
  }
  /* The SONAME file beside the given library: what the dynamic loader looks for. */
  slash = strrchr(argv[1], '/');
  snprintf(path, sizeof path, "%.*slibepcomm.so.%d", slash ? (int)(slash - argv[1] + 1) : 0, argv[1], EPC_ABI_MAJOR);
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("FAIL: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  printf("ok  : dlopen(%s)\n", path);
  symbol = dlsym(lib, "epc_get_api");
  expect(symbol != NULL, "dlsym(\"epc_get_api\") found the entry point");
  if (symbol == NULL) return 1;
  /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes match. */
  memcpy(&get_api, &symbol, sizeof get_api);

  /* The table of this header's major. */
  {
    EpcStatus status = get_api(EPC_ABI_MAJOR, &api);
    snprintf(what, sizeof what, "epc_get_api(%d, EPC_API_INIT) = %d", EPC_ABI_MAJOR, (int)status);
    expect(status == EPC_OK, what);
  }
  expect(api.struct_size == sizeof(EpcApi), "table struct_size == sizeof(EpcApi)");
  expect(api.abi_version == EPC_ABI_VERSION, "table abi_version == EPC_ABI_VERSION");
  {
    /* The list above covers the whole table, and each entry is the exported function. */
    size_t covered = offsetof(EpcApi, status_string);
    for (i = 0; i < NUM_ENTRIES; ++i) {
      void (*entry)(void);
      void* exported = dlsym(lib, kEntries[i].symbol);
      void* from_table;
      memcpy(&entry, (const unsigned char*)&api + kEntries[i].offset, sizeof entry);
      memcpy(&from_table, &entry, sizeof from_table);
      snprintf(what, sizeof what, "table entry at offset %u is %s", (unsigned)kEntries[i].offset, kEntries[i].symbol);
      expect(exported != NULL && from_table == exported, what);
      covered += sizeof entry;
    }
    snprintf(what, sizeof what, "the %u entries fill EpcApi (%u of %u bytes)", (unsigned)NUM_ENTRIES, (unsigned)covered,
             (unsigned)sizeof(EpcApi));
    expect(covered == sizeof(EpcApi), what);
    expect(dlsym(lib, "epc_ll_dispatch") == NULL && dlsym(lib, "epc_ht_dispatch") == NULL &&
               dlsym(lib, "epc_ht_handle_create") == NULL,
           "the 1.x step entry points are gone");
  }
  if (failures != 0) return 1;

  /* Version and status strings. */
  {
    uint32_t major = 99, minor = 99, patch = 99;
    const char* text;
    expect(api.get_version(&major, &minor, &patch) == EPC_OK, "get_version returns EPC_OK");
    snprintf(what, sizeof what, "get_version = %u.%u.%u equals the header's %d.%d.%d", (unsigned)major, (unsigned)minor,
             (unsigned)patch, EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH);
    expect(major == EPC_ABI_MAJOR && minor == EPC_ABI_MINOR && patch == EPC_ABI_PATCH, what);
    text = api.status_string(EPC_ERR_INVALID_USAGE);
    snprintf(what, sizeof what, "status_string(EPC_ERR_INVALID_USAGE) = \"%s\"", text ? text : "(null)");
    expect(text != NULL && text[0] != '\0' && strcmp(text, "unknown status") != 0, what);
  }

  /* Plan of a valid configuration, with the defaults the header states: pure CPU. */
  {
    EpcGroupConfig config = EPC_GROUP_CONFIG_INIT;
    EpcPlan plan = EPC_PLAN_INIT;
    EpcStatus status;
    config.num_experts = 64;
    config.hidden = 2048;
    status = api.plan_query(&config, 4, 4, 1, &plan);
    last_error(&api, message, sizeof message);
    snprintf(what, sizeof what, "plan_query(64 experts, hidden 2048, 4 ranks, lsa 4, 1 node) = %d (%s) %s", (int)status,
             api.status_string(status), message);
    expect(status == EPC_OK, what);
    snprintf(what, sizeof what, "plan symmetric_bytes = %llu > 0", (unsigned long long)plan.symmetric_bytes);
    expect(status == EPC_OK && plan.symmetric_bytes > 0, what);
    snprintf(what, sizeof what,
             "plan defaults: max_token_bytes %u (2 * H = 4096), recv_capacity %llu (R * T = 512), "
             "max_pending_steps %u (2)",
             (unsigned)plan.max_token_bytes, (unsigned long long)plan.recv_capacity, (unsigned)plan.max_pending_steps);
    expect(plan.max_token_bytes == 2 * 2048 && plan.recv_capacity == 4 * 128 && plan.max_pending_steps == 2, what);
  }

  /* An invalid configuration: a stable error code and a message naming the field. */
  {
    EpcGroupConfig config = EPC_GROUP_CONFIG_INIT;
    EpcPlan plan = EPC_PLAN_INIT;
    EpcStatus status;
    config.num_experts = 64;
    config.hidden = 0;
    status = api.plan_query(&config, 4, 4, 1, &plan);
    last_error(&api, message, sizeof message);
    snprintf(what, sizeof what,
             "plan_query(hidden 0) = %d (%s) \"%s\", expected EPC_ERR_INVALID_ARGUMENT naming hidden", (int)status,
             api.status_string(status), message);
    expect(status == EPC_ERR_INVALID_ARGUMENT && strstr(message, "hidden") != NULL, what);
  }

  /* The handle and step calls refuse a NULL object before anything else (no group can be
   * created without a GPU). */
  {
    EpcDispatchArgs dargs = EPC_DISPATCH_ARGS_INIT;
    EpcCombineArgs cargs = EPC_COMBINE_ARGS_INIT;
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    EpcHandle* handle = NULL;
    struct {
      const char* call;
      EpcStatus status;
    } calls[6];
    calls[0].call = "group_async_error(NULL)";
    calls[0].status = api.group_async_error(NULL);
    calls[1].call = "handle_create(NULL group)";
    calls[1].status = api.handle_create(NULL, NULL, NULL, NULL, &handle);
    calls[2].call = "handle_query(NULL)";
    calls[2].status = api.handle_query(NULL, &info);
    calls[3].call = "dispatch(NULL)";
    calls[3].status = api.dispatch(NULL, &dargs, NULL);
    calls[4].call = "combine(NULL)";
    calls[4].status = api.combine(NULL, &cargs, NULL);
    calls[5].call = "complete(NULL)";
    calls[5].status = api.complete(NULL, 0, NULL);
    for (i = 0; i < sizeof calls / sizeof calls[0]; ++i) {
      snprintf(what, sizeof what, "%s = %d (%s), expected EPC_ERR_INVALID_ARGUMENT", calls[i].call,
               (int)calls[i].status, api.status_string(calls[i].status));
      expect(calls[i].status == EPC_ERR_INVALID_ARGUMENT, what);
    }
    expect(handle == NULL, "handle_create left *out_handle untouched");
    expect(api.handle_destroy(NULL) == EPC_OK && api.group_destroy(NULL) == EPC_OK, "destroy(NULL) is a no-op");
  }

  /* A caller built for another major must be refused, not handed a table. */
  {
    uint32_t majors[2];
    majors[0] = EPC_ABI_MAJOR - 1;
    majors[1] = EPC_ABI_MAJOR + 1;
    for (i = 0; i < 2; ++i) {
      EpcApi other = EPC_API_INIT;
      EpcStatus status = get_api(majors[i], &other);
      snprintf(what, sizeof what, "epc_get_api(%u) = %d (%s), expected EPC_ERR_ABI_MISMATCH, table untouched",
               (unsigned)majors[i], (int)status, api.status_string(status));
      expect(status == EPC_ERR_ABI_MISMATCH && other.status_string == NULL && other.struct_size == sizeof other, what);
    }
  }

  /* An older caller's table (only the first three entries) gets exactly that prefix. */
  {
    unsigned char bytes[sizeof(EpcApi)];
    EpcApi* old = (EpcApi*)(void*)bytes;
    const uint32_t old_size = (uint32_t)offsetof(EpcApi, unique_id_create);
    memset(bytes, 0xEE, sizeof bytes);
    old->struct_size = old_size;
    old->abi_version = EPC_ABI_VERSION;
    expect(get_api(EPC_ABI_MAJOR, old) == EPC_OK, "epc_get_api with a three-entry table returns EPC_OK");
    expect(old->get_version == api.get_version, "its third entry is get_version");
    expect(bytes[old_size] == 0xEE && bytes[sizeof bytes - 1] == 0xEE, "nothing past its struct_size is written");
  }

  dlclose(lib);
  printf("%s: %d failure(s)\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
