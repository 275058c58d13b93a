/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A runtime that loads epcomm by path, as an inference engine would: no link-time
 * dependency on libepcomm and no installed headers (it is compiled against a copy of
 * epcomm.h, which includes only <stdint.h> and <stddef.h>). It
 *   1. dlopens the library at the path it is given and resolves one symbol, epc_get_api;
 *   2. asks for the function table of the ABI major it was compiled for, and refuses a
 *      library of another major, or one whose table is shorter than the one it calls;
 *   3. runs one low-latency step on one rank (GPU 0): bootstrap a one-rank communicator,
 *      create a group and a routed handle, dispatch three tokens to four experts, combine
 *      the identity expert outputs back, and check both results exactly.
 *
 * Build: cc -std=c99 -I<epcomm>/capi/include -I<cuda>/include dlopen_ll_step.c \
 *           -L<cuda>/lib64 -lcudart -ldl
 * Run:   ./dlopen_ll_step /path/to/libepcomm.so.2
 * Exit status: 0 the step matched; 1 a call failed or a result differed; 2 usage;
 *              3 the library was refused (unknown ABI); 77 no GPU (after the ABI check).
 */
#define _POSIX_C_SOURCE 200809L

/* The CUDA headers use C11 anonymous unions, which -Wpedantic reports in C99. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <cuda_runtime_api.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "epcomm/epcomm.h"

enum { EXIT_MISMATCH = 1, EXIT_USAGE = 2, EXIT_REFUSED = 3, EXIT_NO_GPU = 77 };

/* The step's shape: one rank hosts every expert. */
enum { EXPERTS = 4, HIDDEN = 256, MAX_TOKENS = 4, TOKENS = 3, TOPK = 2 };
#define RANKS 1
#define ROWS_PER_EXPERT (RANKS * MAX_TOKENS) /* EXPERT_PADDED zones: C = R * T */

typedef EpcStatus (*GetApiFn)(uint32_t abi_major, EpcApi* out_api);

static EpcApi api;

/* Report a failed epcomm call with the library's thread-local message. */
static int failed(const char* what, EpcStatus status) {
  char message[512] = "";
  if (api.last_error(message, sizeof message, NULL) != EPC_OK) message[0] = '\0';
  fprintf(stderr, "%s: %s: %s\n", what, api.status_string(status), message);
  return 0;
}
#define EPC(call) ((status = (call)) == EPC_OK || failed(#call, status))

static int cuda_ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return 1;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  return 0;
}
#define CUDA(call) cuda_ok((call), #call)

/* bf16 of a float that bf16 represents exactly (small integers and quarters here). */
static uint16_t bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (uint16_t)(bits >> 16);
}

static EpcTensor tensor(void* data, EpcDtype dtype, int32_t ndim, int64_t d0, int64_t d1, int64_t d2) {
  EpcTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  return t;
}

/* Steps 1 and 2: the library at `path`, if it speaks this program's ABI. */
static int load(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void* symbol;
  GetApiFn get_api;
  EpcStatus status;
  uint32_t major, minor, patch;
  if (lib == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    return EXIT_MISMATCH;
  }
  symbol = dlsym(lib, "epc_get_api");
  if (symbol == NULL) {
    fprintf(stderr, "refused: %s has no epc_get_api; it is not an epcomm library of ABI 2 or later\n", path);
    return EXIT_REFUSED;
  }
  /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes match. */
  memcpy(&get_api, &symbol, sizeof get_api);

  memset(&api, 0, sizeof api);
  api.struct_size = (uint32_t)sizeof api;
  api.abi_version = EPC_ABI_VERSION;
  status = get_api(EPC_ABI_MAJOR, &api);
  if (status == EPC_ERR_ABI_MISMATCH) {
    fprintf(stderr, "refused: %s does not implement ABI major %d (epc_get_api returned %d)\n", path, EPC_ABI_MAJOR,
            (int)status);
    return EXIT_REFUSED;
  }
  if (status != EPC_OK) {
    fprintf(stderr, "refused: epc_get_api(%d) returned %d\n", EPC_ABI_MAJOR, (int)status);
    return EXIT_REFUSED;
  }
  /* Trust nothing: the table must say this major, and hold every entry called below. */
  if (api.abi_version / 10000 != EPC_ABI_MAJOR) {
    fprintf(stderr, "refused: the table is of ABI %u.%u.%u; this program knows major %d only\n",
            api.abi_version / 10000, api.abi_version / 100 % 100, api.abi_version % 100, EPC_ABI_MAJOR);
    return EXIT_REFUSED;
  }
  if (api.struct_size < offsetof(EpcApi, complete) + sizeof api.complete) {
    fprintf(stderr, "refused: the library's table has %u bytes; this program calls entries up to %u\n", api.struct_size,
            (unsigned)(offsetof(EpcApi, complete) + sizeof api.complete));
    return EXIT_REFUSED;
  }
  if (!EPC(api.get_version(&major, &minor, &patch))) return EXIT_MISMATCH;
  printf("loaded %s: ABI %u.%u.%u (this program: %d.%d.%d), table of %u bytes\n", path, major, minor, patch,
         EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH, api.struct_size);
  return 0;
}

/* The routing: token 0 -> experts 0 and 1, token 1 -> expert 2 (second entry masked),
 * token 2 -> experts 1 and 3. Weights 0.75 and 0.25. */
static const int32_t kTopkIdx[TOKENS][TOPK] = {{0, 1}, {2, -1}, {1, 3}};
static const float kWeights[TOKENS][TOPK] = {{0.75f, 0.25f}, {0.75f, 0.0f}, {0.75f, 0.25f}};
/* What expert e receives, in (source rank, source token) order. */
static const int32_t kCounts[EXPERTS] = {1, 2, 1, 1};
static const int kReceived[EXPERTS][2] = {{0, -1}, {0, 2}, {1, -1}, {2, -1}};

static float x_value(int token, int channel) { return (float)(channel % 16 - 8 + token); }

/* Step 3, on GPU 0. */
static int run_step(void) {
  static uint16_t x[TOKENS][HIDDEN], out[TOKENS][HIDDEN], out_x[EXPERTS][ROWS_PER_EXPERT][HIDDEN];
  int32_t counts[EXPERTS];
  EpcStatus status;
  EpcUniqueId id;
  void* comm = NULL;
  EpcGroup* group = NULL;
  EpcHandle* handle = NULL;
  cudaStream_t stream = NULL;
  void *d_idx = NULL, *d_weights = NULL, *d_x = NULL, *d_out_x = NULL, *d_counts = NULL, *d_out = NULL;
  EpcGroupConfig config = EPC_GROUP_CONFIG_INIT;
  EpcRouting routing = EPC_ROUTING_INIT;
  EpcDispatchArgs dispatch = EPC_DISPATCH_ARGS_INIT;
  EpcCombineArgs combine = EPC_COMBINE_ARGS_INIT;
  EpcTensor t_idx, t_weights, t_x, t_out_x, t_counts, t_out;
  int ok = 0, bad = 0, t, e, r, c;

  for (t = 0; t < TOKENS; t++)
    for (c = 0; c < HIDDEN; c++) x[t][c] = bf16(x_value(t, c));

  if (!CUDA(cudaSetDevice(0)) || !CUDA(cudaStreamCreate(&stream)) || !CUDA(cudaMalloc(&d_idx, sizeof kTopkIdx)) ||
      !CUDA(cudaMalloc(&d_weights, sizeof kWeights)) || !CUDA(cudaMalloc(&d_x, sizeof x)) ||
      !CUDA(cudaMalloc(&d_out_x, sizeof out_x)) || !CUDA(cudaMalloc(&d_counts, sizeof counts)) ||
      !CUDA(cudaMalloc(&d_out, sizeof out)) ||
      !CUDA(cudaMemcpy(d_idx, kTopkIdx, sizeof kTopkIdx, cudaMemcpyHostToDevice)) ||
      !CUDA(cudaMemcpy(d_weights, kWeights, sizeof kWeights, cudaMemcpyHostToDevice)) ||
      !CUDA(cudaMemcpy(d_x, x, sizeof x, cudaMemcpyHostToDevice)))
    goto done;

  /* A one-rank communicator; with more ranks, share id's bytes and call comm_init on each. */
  if (!EPC(api.unique_id_create(&id)) || !EPC(api.comm_init(&id, RANKS, 0, 0, &comm))) goto done;
  config.mode = EPC_MODE_LOW_LATENCY;
  config.num_experts = EXPERTS;
  config.hidden = HIDDEN;
  config.max_tokens_per_rank = MAX_TOKENS;
  config.max_topk = TOPK;
  if (!EPC(api.group_create(comm, &config, &group))) goto done;

  t_idx = tensor(d_idx, EPC_DTYPE_INT32, 2, TOKENS, TOPK, 0);
  routing.topk_idx = &t_idx;
  if (!EPC(api.handle_create(group, NULL, &routing, stream, &handle))) goto done;

  t_x = tensor(d_x, EPC_DTYPE_BF16, 2, TOKENS, HIDDEN, 0);
  t_weights = tensor(d_weights, EPC_DTYPE_FP32, 2, TOKENS, TOPK, 0);
  t_out_x = tensor(d_out_x, EPC_DTYPE_BF16, 3, EXPERTS, ROWS_PER_EXPERT, HIDDEN);
  t_counts = tensor(d_counts, EPC_DTYPE_INT32, 1, EXPERTS, 0, 0);
  dispatch.x = &t_x;
  dispatch.topk_weights = &t_weights; /* the default (SENDER) weighting of combine needs them */
  dispatch.out_x = &t_out_x;
  dispatch.out_expert_counts = &t_counts;
  if (!EPC(api.dispatch(handle, &dispatch, stream))) goto done;

  /* The identity expert: combine sends out_x back as the expert outputs, so each token
   * comes back as the sum of its weights times itself. */
  t_out = tensor(d_out, EPC_DTYPE_BF16, 2, TOKENS, HIDDEN, 0);
  combine.x = &t_out_x;
  combine.out = &t_out;
  if (!EPC(api.combine(handle, &combine, stream))) goto done;
  if (!CUDA(cudaStreamSynchronize(stream)) || !EPC(api.group_async_error(group))) goto done;

  if (!CUDA(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost)) ||
      !CUDA(cudaMemcpy(out_x, d_out_x, sizeof out_x, cudaMemcpyDeviceToHost)) ||
      !CUDA(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost)))
    goto done;
  for (e = 0; e < EXPERTS; e++) {
    if (counts[e] != kCounts[e]) {
      fprintf(stderr, "expert %d received %d rows, expected %d\n", e, counts[e], kCounts[e]);
      bad++;
      continue;
    }
    for (r = 0; r < counts[e]; r++)
      if (memcmp(out_x[e][r], x[kReceived[e][r]], sizeof x[0]) != 0) {
        fprintf(stderr, "expert %d row %d is not token %d\n", e, r, kReceived[e][r]);
        bad++;
      }
  }
  for (t = 0; t < TOKENS; t++)
    for (c = 0; c < HIDDEN; c++) {
      uint16_t want = bf16((kWeights[t][0] + kWeights[t][1]) * x_value(t, c));
      if (out[t][c] != want) {
        fprintf(stderr, "combined token %d channel %d: bf16 0x%04x, expected 0x%04x\n", t, c, out[t][c], want);
        bad++;
        break;
      }
    }
  if (bad == 0) {
    printf("one LL step on 1 rank: dispatch counts {%d, %d, %d, %d} and %d combined tokens matched\n", counts[0],
           counts[1], counts[2], counts[3], TOKENS);
    ok = 1;
  }

done:
  /* Destroy in reverse order; each destroy accepts NULL. */
  if (handle != NULL && !EPC(api.handle_destroy(handle))) ok = 0;
  if (group != NULL && !EPC(api.group_destroy(group))) ok = 0;
  if (comm != NULL && !EPC(api.comm_destroy(comm))) ok = 0;
  cudaFree(d_idx);
  cudaFree(d_weights);
  cudaFree(d_x);
  cudaFree(d_out_x);
  cudaFree(d_counts);
  cudaFree(d_out);
  if (stream != NULL) cudaStreamDestroy(stream);
  return ok ? 0 : EXIT_MISMATCH;
}

int main(int argc, char** argv) {
  int devices = 0, code;
  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libepcomm.so.%d\n", argv[0], EPC_ABI_MAJOR);
    return EXIT_USAGE;
  }
  code = load(argv[1]);
  if (code != 0) return code;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no GPU visible: stopping after the ABI check\n");
    return EXIT_NO_GPU;
  }
  return run_step();
}
