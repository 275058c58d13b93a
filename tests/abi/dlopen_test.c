/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dlopen path of the C ABI, as a runtime without a link-time dependency would use it:
 * open the library, resolve the single symbol epc_get_api, and do everything else through
 * the returned function table. Only CPU-side calls are made, so no GPU is needed.
 *
 * Usage: dlopen_test /path/to/libepcomm.so
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

int main(int argc, char** argv) {
  void* lib;
  void* symbol;
  GetApiFn get_api;
  EpcApi api;
  EpcApi unused;
  char message[512];
  char what[640];
  size_t i;

  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libepcomm.so\n", argv[0]);
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("FAIL: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  symbol = dlsym(lib, "epc_get_api");
  expect(symbol != NULL, "dlsym(\"epc_get_api\") found the entry point");
  if (symbol == NULL) return 1;
  /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes match. */
  memcpy(&get_api, &symbol, sizeof get_api);

  /* The table. */
  memset(&api, 0, sizeof api);
  api.struct_size = (uint32_t)sizeof api;
  api.abi_version = EPC_ABI_VERSION;
  expect(get_api(EPC_ABI_MAJOR, &api) == EPC_OK, "epc_get_api(EPC_ABI_MAJOR) returns EPC_OK");
  expect(api.struct_size == sizeof(EpcApi), "table struct_size == sizeof(EpcApi)");
  expect(api.abi_version == EPC_ABI_VERSION, "table abi_version == EPC_ABI_VERSION");
  {
    /* Every entry this header knows must be filled; they are all function pointers after
     * the two uint32 header fields. */
    const unsigned char* bytes = (const unsigned char*)&api;
    int all_set = 1;
    for (i = offsetof(EpcApi, status_string); i < sizeof api; i += sizeof(void (*)(void))) {
      void (*entry)(void);
      memcpy(&entry, bytes + i, sizeof entry);
      if (entry == NULL) all_set = 0;
    }
    expect(all_set, "every function pointer in the table is non-NULL");
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
    text = api.status_string(EPC_ERR_TIMEOUT);
    snprintf(what, sizeof what, "status_string(EPC_ERR_TIMEOUT) = \"%s\"", text ? text : "(null)");
    expect(text != NULL && text[0] != '\0', what);
  }

  /* Plan of a valid configuration: pure CPU. */
  {
    EpcGroupConfig config = EPC_GROUP_CONFIG_INIT;
    EpcPlan plan;
    EpcStatus status;
    config.num_experts = 64;
    config.hidden = 2048;
    memset(&plan, 0, sizeof plan);
    plan.struct_size = (uint32_t)sizeof plan; /* the header's convention for every */
    plan.abi_version = EPC_ABI_VERSION;       /* extensible struct: set both */
    status = api.plan_query(&config, 4, 4, 1, &plan);
    last_error(&api, message, sizeof message);
    snprintf(what, sizeof what,
             "plan_query(64 experts, hidden 2048, 4 ranks, lsa 4, 1 node) "
             "= %d (%s) %s",
             (int)status, api.status_string(status), message);
    expect(status == EPC_OK, what);
    snprintf(what, sizeof what, "plan symmetric_bytes = %llu > 0", (unsigned long long)plan.symmetric_bytes);
    expect(status == EPC_OK && plan.symmetric_bytes > 0, what);
  }

  /* An invalid configuration: a stable error code and a detail message. */
  {
    EpcGroupConfig config = EPC_GROUP_CONFIG_INIT;
    EpcPlan plan;
    EpcStatus status;
    config.num_experts = 64;
    config.hidden = 0;
    memset(&plan, 0, sizeof plan);
    plan.struct_size = (uint32_t)sizeof plan; /* the header's convention for every */
    plan.abi_version = EPC_ABI_VERSION;       /* extensible struct: set both */
    status = api.plan_query(&config, 4, 4, 1, &plan);
    snprintf(what, sizeof what, "plan_query(hidden 0) = %d (%s), expected EPC_ERR_INVALID_ARGUMENT", (int)status,
             api.status_string(status));
    expect(status == EPC_ERR_INVALID_ARGUMENT, what);
    last_error(&api, message, sizeof message);
    snprintf(what, sizeof what, "last_error after it is non-empty: \"%s\"", message);
    expect(message[0] != '\0', what);
  }

  /* The ABI 1.3 entry: the last one of the table, refusing a NULL group like every group
   * call (no group can be created without a GPU). */
  {
    EpcStatus status;
    expect(offsetof(EpcApi, group_async_error) + sizeof api.group_async_error == sizeof(EpcApi),
           "group_async_error is the table's last entry");
    status = api.group_async_error(NULL);
    last_error(&api, message, sizeof message);
    snprintf(what, sizeof what,
             "group_async_error(NULL) = %d (%s) \"%s\", expected "
             "EPC_ERR_INVALID_ARGUMENT saying the group is NULL",
             (int)status, api.status_string(status), message);
    expect(status == EPC_ERR_INVALID_ARGUMENT && strstr(message, "group is NULL") != NULL, what);
  }

  /* A caller built for another major must be refused, not handed a table. */
  {
    EpcStatus status;
    memset(&unused, 0, sizeof unused);
    unused.struct_size = (uint32_t)sizeof unused;
    status = get_api(EPC_ABI_MAJOR + 1, &unused);
    snprintf(what, sizeof what,
             "epc_get_api(EPC_ABI_MAJOR + 1) = %d (%s), expected "
             "EPC_ERR_ABI_MISMATCH",
             (int)status, api.status_string(status));
    expect(status == EPC_ERR_ABI_MISMATCH, what);
    expect(unused.status_string == NULL, "the refused table was left untouched");
  }

  dlclose(lib);
  printf("%s: %d failure(s)\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
