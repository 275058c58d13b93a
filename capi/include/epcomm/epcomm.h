/* SPDX-License-Identifier: Apache-2.0 */
/*
 * epcomm: expert-parallel (Mixture-of-Experts) communication on NCCL's Device API.
 *
 * This is the library's only public header and its stable C ABI. It is plain C99, includes
 * only <stdint.h> and <stddef.h>, and compiles as C++ too.
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *
 *  - Every function returns an EpcStatus (0 = EPC_OK). On failure a detail message for the
 *    calling thread is available from epc_last_error(); every call except epc_last_error()
 *    and epc_status_string() clears it on entry.
 *  - Out-parameters are written only on success.
 *  - epc_*_destroy(NULL) is a no-op that returns EPC_OK.
 *  - CUDA streams cross this header as `void*` meaning `cudaStream_t`; NCCL communicators
 *    as `void*` meaning `ncclComm_t`.
 *  - Extensible structs start with `struct_size` and `abi_version`. Set `struct_size` to
 *    sizeof(the struct) and `abi_version` to EPC_ABI_VERSION (EPC_*_INIT does both). A zero
 *    in any other field means "default". A struct shorter than this header's (an older
 *    caller) gets defaults for the missing tail; a longer one (a newer caller) is accepted
 *    only if every byte past the end this library knows is zero, else EPC_ERR_ABI_MISMATCH.
 *  - The library never aborts, exits, prints to stdout or lets a C++ exception escape.
 *  - Threads: calls on different groups (and on their handles) may run at the same time
 *    from different threads; each thread has its own last-error message. Calls on one group
 *    or its handles must not overlap (but epc_group_query and epc_group_async_error, which
 *    may), and epc_group_create and epc_group_destroy, which are collective over the
 *    communicator, must not overlap other calls on that communicator.
 *  - Steps of different groups may also overlap on the GPU (different streams or threads).
 *    Their kernels wait for their peers while holding their SMs, so groups whose steps
 *    overlap must fit on the GPU together: keep the sum of their `num_sms` within the GPU's
 *    SM count (the defaults, 132 for low-latency and 24 for high-throughput groups, add up
 *    to more than an H100 or H200 has); a step whose kernels cannot all get SMs may wait
 *    until the group's timeout and fail with EPC_ERR_TIMEOUT.
 *
 * Each declaration says whether it is collective (every rank of the communicator must call
 * it, in the same order) or local; blocking or stream-ordered; whether it may be captured in
 * a CUDA graph; whether it is thread-safe; and how long borrowed pointers must live.
 */
#ifndef EPCOMM_EPCOMM_H
#define EPCOMM_EPCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define EPC_API
#else
#define EPC_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------- */

/* The ABI version: the single source of truth (the build reads these three lines).
 * Within one major version every change is additive. */
#define EPC_ABI_MAJOR 1
#define EPC_ABI_MINOR 3
#define EPC_ABI_PATCH 0
#define EPC_ABI_VERSION ((uint32_t)(EPC_ABI_MAJOR * 10000 + EPC_ABI_MINOR * 100 + EPC_ABI_PATCH))

/* ---------------------------------------------------------------------------------------
 * Status codes (stable values; new codes may be added, so treat unknown ones as errors)
 * ------------------------------------------------------------------------------------- */

typedef int32_t EpcStatus;
#define EPC_OK 0
#define EPC_ERR_INVALID_ARGUMENT 1 /* a null pointer, a value out of range, a bad shape */
#define EPC_ERR_ABI_MISMATCH 2     /* struct_size/abi_version not compatible with this build */
#define EPC_ERR_UNSUPPORTED 3      /* valid request this build or machine cannot serve */
#define EPC_ERR_OUT_OF_MEMORY 4    /* host or device allocation failed */
#define EPC_ERR_CUDA 5             /* a CUDA runtime call failed */
#define EPC_ERR_NCCL 6             /* an NCCL call failed or the NCCL found is too old */
#define EPC_ERR_TIMEOUT 7          /* a device-side wait expired; the group is unusable */
#define EPC_ERR_NO_DEVICE 8        /* no CUDA device is present */
#define EPC_ERR_BUFFER_TOO_SMALL 9 /* a caller buffer was too small; see the call's doc */
#define EPC_ERR_INTERNAL 10        /* a bug in epcomm: please report it */

/* A static English string naming `status` ("unknown status" for codes this build does not
 * know). Never NULL. Local, thread-safe, does not touch the last-error message. */
EPC_API const char* epc_status_string(EpcStatus status);

/* Copy the calling thread's last error message (NUL-terminated, possibly truncated) into
 * `buf` of `buf_size` bytes; `*out_length`, if not NULL, receives the full message length
 * without the NUL. An empty message means the last call succeeded. `buf` may be NULL when
 * `buf_size` is 0 (to ask for the length). Does not clear the message. Local, thread-safe
 * (the message is per thread). */
EPC_API EpcStatus epc_last_error(char* buf, size_t buf_size, size_t* out_length);

/* The ABI version of the loaded library. Compare `*out_major` with EPC_ABI_MAJOR before
 * using anything else. Any pointer may be NULL. Local, thread-safe. */
EPC_API EpcStatus epc_get_version(uint32_t* out_major, uint32_t* out_minor,
                                  uint32_t* out_patch);

/* ---------------------------------------------------------------------------------------
 * Tensor descriptor (fixed layout, not extensible)
 * ------------------------------------------------------------------------------------- */

typedef uint32_t EpcDtype;
#define EPC_DTYPE_INVALID 0
#define EPC_DTYPE_BF16 1
#define EPC_DTYPE_FP16 2
#define EPC_DTYPE_FP32 3
#define EPC_DTYPE_FP8_E4M3 4
#define EPC_DTYPE_INT32 5
#define EPC_DTYPE_INT64 6

#define EPC_TENSOR_MAX_DIMS 4

/* A strided view of device memory, with DLPack's meaning: `shape` and `strides` count
 * elements; all-zero `strides` means row-major contiguous. Entries past `ndim` must be 0. */
typedef struct EpcTensor {
  void* data;
  EpcDtype dtype;
  int32_t ndim;
  int64_t shape[EPC_TENSOR_MAX_DIMS];
  int64_t strides[EPC_TENSOR_MAX_DIMS];
} EpcTensor;

/* ---------------------------------------------------------------------------------------
 * Bootstrap: NCCL communicators for callers that have no NCCL binding of their own
 * ------------------------------------------------------------------------------------- */

#define EPC_UNIQUE_ID_BYTES 128
typedef struct EpcUniqueId {
  uint8_t bytes[EPC_UNIQUE_ID_BYTES];
} EpcUniqueId;

/* Create a unique id on one process and share its bytes with every rank (a file, a socket,
 * an environment variable in hex...). Local, blocking, thread-safe. */
EPC_API EpcStatus epc_unique_id_create(EpcUniqueId* out_id);

/* Create an NCCL communicator rank: `*out_comm` receives an `ncclComm_t`. Makes
 * `cuda_device` current on the calling thread (a negative value keeps the current device).
 * Collective over all `nranks` ranks, blocking; call it from one thread per rank. The
 * communicator belongs to the caller: destroy it with epc_comm_destroy() after every group
 * built on it is destroyed. */
EPC_API EpcStatus epc_comm_init(const EpcUniqueId* id, int32_t nranks, int32_t rank,
                                int32_t cuda_device, void** out_comm);

/* Destroy a communicator created by epc_comm_init(). Collective, blocking. NULL is a no-op. */
EPC_API EpcStatus epc_comm_destroy(void* comm);

/* ---------------------------------------------------------------------------------------
 * Group configuration and the plan (pure CPU: what a configuration costs)
 * ------------------------------------------------------------------------------------- */

typedef uint32_t EpcMode;
#define EPC_MODE_LOW_LATENCY 1     /* decode: direct all-to-all, double-buffered (default) */
#define EPC_MODE_HIGH_THROUGHPUT 2 /* prefill/training: flat layout, few SMs */

/* Caller-supplied symmetric-memory allocator. It must return memory that NCCL can register
 * as a window (memory from ncclMemAlloc or the CUDA VMM API); group creation checks and fails
 * with EPC_ERR_NCCL naming the allocator when it cannot. `ctx` is passed through untouched.
 * Called on the group's creating thread only. Returns 0 on success. */
typedef int32_t (*EpcAllocFn)(void* ctx, size_t bytes, void** out_ptr);
typedef void (*EpcFreeFn)(void* ctx, void* ptr);

typedef struct EpcGroupConfig {
  uint32_t struct_size; /* sizeof(EpcGroupConfig) */
  uint32_t abi_version; /* EPC_ABI_VERSION */
  EpcMode mode;         /* 0: EPC_MODE_LOW_LATENCY */
  uint32_t num_experts; /* required: total experts, divisible by the rank count */
  uint32_t hidden;      /* required: channels per token; a bf16 row must be a multiple of
                           16 bytes, i.e. hidden % 8 == 0 */
  uint32_t max_tokens_per_rank; /* 0: 128 (LL) or 4096 (HT); at most 1024 (LL), 65536 (HT) */
  uint32_t max_topk;            /* 0: 8; at most 32 */
  EpcDtype dtype;       /* token payload the group carries; 0: EPC_DTYPE_BF16. BF16 and
                           FP16 size buffers for 2-byte rows (FP8 traffic fits in them too);
                           FP8_E4M3 sizes them for fp8 rows + scales only (hidden % 128 == 0).
                           Other dtypes: EPC_ERR_UNSUPPORTED. */
  uint32_t num_sms;     /* SM budget for the kernels; 0: mode default (LL 132, HT 24) */
  uint32_t timeout_ms;  /* bound on every device-side wait; 0: 10000 ms */
  uint32_t flags;       /* reserved, must be 0 */
  uint32_t virtual_node_size; /* a testing and tuning aid (ABI 1.3; reserved0 before, which
                           had to be 0). 0: a node is an NVLink (LSA) team. Otherwise every LSA
                           team is split into virtual nodes of this many consecutive ranks (it
                           must divide the team size): ranks in different virtual nodes then
                           exchange data only through the network transport (between virtual
                           nodes an NVLink-backed stand-in with the network's ordering rules),
                           never through direct NVLink stores. */
  EpcAllocFn alloc_fn;  /* NULL: ncclMemAlloc. Set both or neither of alloc_fn/free_fn. */
  EpcFreeFn free_fn;
  void* alloc_ctx; /* passed to alloc_fn/free_fn */
} EpcGroupConfig;

#define EPC_GROUP_CONFIG_INIT \
  { sizeof(EpcGroupConfig), EPC_ABI_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL }

/* What a region of the symmetric window holds. */
typedef uint32_t EpcRegionKind;
#define EPC_REGION_CONTROL 1        /* barrier epochs, one per rank */
#define EPC_REGION_DISPATCH_RECV 2  /* incoming dispatch messages (LL: one per slot) */
#define EPC_REGION_DISPATCH_SIGNAL 3 /* per-source-rank arrival counters */
#define EPC_REGION_COMBINE_RECV 4   /* incoming combine rows */
#define EPC_REGION_COMBINE_SIGNAL 5 /* per-source-rank arrival counters for combine */
#define EPC_REGION_LAYOUT 6         /* HT: per-rank token and expert counts exchanged */
#define EPC_REGION_NET_STAGING 7    /* what is bound for ranks in other nodes, staged here
                                       until the network transport puts it (ABI 1.3) */
#define EPC_REGION_RAIL_RECV 8      /* HT across nodes: tokens from this rank's rail peers
                                       (its local index in every other node), to be
                                       forwarded inside the node (ABI 1.3) */
#define EPC_REGION_RAIL_SIGNAL 9    /* HT across nodes: one flag per rail peer and chunk */

#define EPC_PLAN_MAX_REGIONS 16
#define EPC_SLOT_NONE 0xFFFFFFFFu

typedef struct EpcPlanRegion {
  EpcRegionKind kind;
  uint32_t slot;   /* double-buffer slot (0 or 1), EPC_SLOT_NONE if not per slot */
  uint64_t offset; /* bytes from the start of the group's symmetric window */
  uint64_t size;   /* bytes */
  char name[32];   /* NUL-terminated, e.g. "dispatch_recv[1]" */
} EpcPlanRegion;

typedef struct EpcPlan {
  uint32_t struct_size; /* set by the caller: sizeof(EpcPlan) */
  uint32_t abi_version; /* set by the caller: EPC_ABI_VERSION */
  EpcMode mode;
  uint32_t num_slots;        /* double-buffer depth: 2 for LL, 1 for HT */
  uint64_t symmetric_bytes;  /* per rank: the registered window (sum of regions, aligned) */
  uint64_t workspace_bytes;  /* per rank: ordinary device memory beside the window */
  uint32_t num_sms;          /* SM budget the kernels will use */
  uint32_t warps_per_block;  /* threads per block / 32 */
  uint32_t lsa_barriers;     /* NCCL LSA barriers requested in the device communicator */
  uint32_t gin_contexts;     /* GIN contexts requested (0 while every rank shares one LSA team) */
  uint32_t gin_signals;      /* GIN signals requested */
  uint32_t message_bytes;    /* bytes one token occupies in a dispatch receive buffer */
  EpcDtype dtype;            /* the payload dtype the buffers are sized for */
  uint32_t reserved1;
  uint32_t num_regions;
  uint32_t reserved0;
  EpcPlanRegion regions[EPC_PLAN_MAX_REGIONS];
} EpcPlan;

/* Compute the byte layout a configuration needs on `nranks` ranks whose NVLink (LSA)
 * domains hold `lsa_size` ranks each, on `num_nodes` nodes, without touching a GPU.
 * The caller sets `out_plan->struct_size` and `abi_version` (as for every extensible
 * struct); only that many bytes are written. Validates `config` exactly as
 * epc_group_create() does. Local, blocking (pure CPU), thread-safe; `config` is read
 * during the call only. */
EPC_API EpcStatus epc_plan_query(const EpcGroupConfig* config, int32_t nranks,
                                 int32_t lsa_size, int32_t num_nodes, EpcPlan* out_plan);

/* ---------------------------------------------------------------------------------------
 * Groups: the communicator, its symmetric window and its device communicator
 * ------------------------------------------------------------------------------------- */

typedef struct EpcGroup EpcGroup;

/* Create a group on `comm` (an ncclComm_t, which must outlive the group). Allocates the
 * symmetric window the plan describes, creates the NCCL device communicator, registers the
 * window with NCCL and proves every rank reachable with a barrier kernel (bounded by
 * `timeout_ms`). When the ranks span several NVLink (LSA) domains, the device communicator
 * gets NCCL's GPU-initiated networking (GIN), and creation fails with
 * EPC_ERR_UNSUPPORTED, quoting NCCL, where NCCL cannot provide it; each rank zeroes its GIN
 * signals before the (collective) window registration, so no peer's traffic can precede the
 * reset. (The GIN path has never run on network hardware; see the README.) Uses the CUDA device current on the calling thread, which must be the
 * communicator's device. Loads every epcomm kernel and, if the device's per-thread stack
 * limit (cudaLimitStackSize) is below what they need, raises it (a process-wide setting
 * that waits for the device), so that no later launch waits behind a running kernel.
 * Collective over every rank of `comm`; blocking; not graph-capturable; not thread-safe
 * with respect to other calls on the same communicator. `config` is read during the call. */
EPC_API EpcStatus epc_group_create(void* comm, const EpcGroupConfig* config,
                                   EpcGroup** out_group);

/* Release everything the group holds (device communicator, window, memory). Collective
 * (every rank must destroy its group, since window deregistration is collective); blocking
 * (waits for all work on the device, other groups' included); not thread-safe with other
 * calls on the group. Across LSA domains it first waits, up to the group's timeout, until
 * GIN has read the sources of this rank's puts; if that does not happen in time it returns
 * EPC_ERR_TIMEOUT and leaves the window and device communicator allocated (the network may
 * still touch them: leaked rather than freed under it).
 * NULL is a no-op. */
EPC_API EpcStatus epc_group_destroy(EpcGroup* group);

typedef struct EpcGroupInfo {
  uint32_t struct_size; /* set by the caller: sizeof(EpcGroupInfo) */
  uint32_t abi_version; /* set by the caller: EPC_ABI_VERSION */
  int32_t rank;          /* in the communicator */
  int32_t nranks;
  int32_t lsa_rank;      /* in this rank's NVLink (LSA) team */
  int32_t lsa_size;
  int32_t node;          /* index of this rank's node: its LSA team, or its virtual node
                            when EpcGroupConfig.virtual_node_size is set */
  int32_t num_nodes;     /* nodes as epcomm uses them (ranks / node size) */
  int32_t cuda_device;
  EpcMode mode;
  uint32_t num_experts;
  uint32_t local_experts; /* num_experts / nranks */
  uint32_t hidden;
  uint32_t max_tokens_per_rank;
  uint32_t max_topk;
  EpcDtype dtype;
  uint32_t num_sms;
  uint32_t timeout_ms;
  uint64_t symmetric_bytes; /* device memory held in the registered window */
  uint64_t workspace_bytes; /* other device memory held */
} EpcGroupInfo;

/* Describe a group: topology, configuration after defaults, bytes held. Only the first
 * `out_info->struct_size` bytes are written. Local, non-blocking, thread-safe. */
EPC_API EpcStatus epc_group_query(const EpcGroup* group, EpcGroupInfo* out_info);

/* Run the group's barrier kernel on `stream` (a cudaStream_t; NULL = legacy default
 * stream) and wait for it: every rank of the group arrives before any leaves (ranks of other
 * nodes are reached through the network transport). Proves the window and device
 * communicator work; also useful to fence phases. A peer that does not arrive within the
 * group's timeout makes this return EPC_ERR_TIMEOUT naming that peer, and the group stays
 * failed. Collective over every rank of the group; blocking; not graph-capturable;
 * thread-safe with other groups, not with other calls on the same group. */
EPC_API EpcStatus epc_group_barrier(EpcGroup* group, void* stream);

/* Ask whether the group has failed asynchronously, without waiting for anything.
 * Returns EPC_OK while no kernel of the group has recorded a failure (and no
 * epc_group_barrier has failed on the host); otherwise the status the group failed with,
 * and epc_last_error() gives the message that the group's next call will fail with, word
 * for word:
 *   EPC_ERR_TIMEOUT           a kernel gave up waiting for a peer: the phase, the waiting
 *                             rank, the peer that did not arrive, how long it waited;
 *   EPC_ERR_INVALID_ARGUMENT  the routing check found an expert id outside
 *                             [-1, num_experts) (or more entries for one expert than it has
 *                             rows): the phase and the rank;
 *   EPC_ERR_CUDA, ...         epc_group_barrier failed on the host (its kernel could not be
 *                             launched or waited for).
 * The failure is sticky: once reported, it is reported until the group is destroyed, and
 * every call on the group or its handles fails with it, but epc_group_query and the
 * destroy calls.
 * Never waits: it reads the group's error record, which kernels write in mapped host memory,
 * with no stream or device synchronisation and no CUDA call, so a failure of work still
 * queued is reported once its kernel has recorded it (a timeout: once the deadline has
 * passed on the device), and EPC_OK says nothing about work the GPU has not finished.
 * EPC_ERR_INVALID_ARGUMENT for NULL or a pointer that is not a live group (destroyed, or
 * another object), as for every group call.
 * Local; non-blocking; not stream-ordered (it sees what the GPU has done so far, not the
 * work queued before it on some stream). May be called during CUDA graph capture: it
 * launches nothing, and it reports failures of work that ran before, never of captured
 * work, which runs only when the graph is replayed. Thread-safe, an exception to the rule
 * that calls on one group must not overlap: it may run at any time from any thread, also
 * while another thread is inside a call on the same group or its handles (it records
 * nothing: it reads the group's failure and formats the message anew), but not during or
 * after epc_group_destroy of the group. `group` is read during the call only. Since ABI 1.3. */
EPC_API EpcStatus epc_group_async_error(const EpcGroup* group);

/* ---------------------------------------------------------------------------------------
 * Handles: the routing of one batch, reused by dispatch, combine and complete
 * ------------------------------------------------------------------------------------- */

typedef struct EpcHandle EpcHandle;

/* Create a handle holding the routing `topk_idx` [B, K] (int64 or int32, contiguous, on
 * the group's device; -1 masks an entry; B <= max_tokens_per_rank, K <= max_topk) and the
 * device state a low-latency step needs. The routing is copied on `stream`, so the caller
 * may reuse `topk_idx` once that stream has passed this point. Allocates device memory.
 * Local (no communication); stream-ordered; not graph-capturable (it allocates); not
 * thread-safe with other calls on the same group. Low-latency groups only: a
 * high-throughput group's handles come from epc_ht_handle_create. */
EPC_API EpcStatus epc_handle_create(EpcGroup* group, const EpcTensor* topk_idx, void* stream,
                                    EpcHandle** out_handle);

/* Replace the handle's routing with `topk_idx` (same rules as create; B may change, K may
 * not; int64 and int32 may alternate) for the next step; call it after the previous step's
 * combine. No allocation and no host synchronisation: graph-capturable, so a captured step
 * reads new routing from the same device buffer at every replay (B, a host-side shape, is
 * fixed at capture). Local; stream-ordered; not thread-safe with other calls on the group.
 * On a high-throughput handle (since ABI 1.2) it also recomputes the layout, which makes it
 * collective; only handles created with EPC_HT_SIZING_CAPACITY accept it (an EXACT handle's
 * row count would change: create a new handle instead). */
EPC_API EpcStatus epc_handle_update(EpcHandle* handle, const EpcTensor* topk_idx, void* stream);

/* Free the handle's device memory after the work queued on it has finished. Local;
 * blocking (waits for all work on the device, other groups' included); not thread-safe
 * with other calls on the group; NULL is a no-op. */
EPC_API EpcStatus epc_handle_destroy(EpcHandle* handle);

/* ---------------------------------------------------------------------------------------
 * Low-latency dispatch and combine
 * ------------------------------------------------------------------------------------- */

typedef uint32_t EpcFlags;
#define EPC_FLAG_SEND_ONLY 0x1u /* queue only the sending half; epc_complete() finishes it */
#define EPC_FLAG_FP8_POW2_SCALES 0x2u /* epc_ll_dispatch_fp8: round every scale up to a power
                                         of two (UE8M0-representable). Since ABI 1.1 */
#define EPC_FLAG_BACKWARD_WEIGHTS 0x4u /* epc_ht_combine: also carry a [rows, K] fp32 tensor
                                          back to the tokens' ranks. Since ABI 1.2 */

/* Send each of this rank's B tokens `x` [B, H] (bf16 or fp16, the group's dtype size; B may
 * be 0, and then NULL data is accepted) with
 * its `topk_weights` [B, K] (fp32) to every rank hosting one of its experts, once per rank,
 * and receive this rank's tokens expert-major into `out_x` [L, R*T, H] (same dtype as x),
 * with `out_counts` [L] (int32) rows per local expert, ordered by (source rank, source
 * token, top-k slot): the reference model's ll_dispatch. Double-buffered: consecutive steps
 * on one stream need no host synchronisation. With EPC_FLAG_SEND_ONLY only the send is
 * queued and `out_*` are written by epc_complete(), which must follow on the same stream
 * before any other dispatch or combine of the group (on any handle) starts. Duplicate expert
 * ids in a token's row are allowed and received once per entry. Steps of one group run in
 * the order they are queued: a dispatch's combine may follow other handles' steps. Collective
 * over the group's ranks (every rank dispatches each step); stream-ordered; graph-capturable;
 * not thread-safe with other calls on the group. Tensors must stay valid until the stream
 * passes the call (or its completion). On a group whose dtype is EPC_DTYPE_FP8_E4M3 use
 * epc_ll_dispatch_fp8 (the buffers hold fp8 rows only). */
EPC_API EpcStatus epc_ll_dispatch(EpcHandle* handle, const EpcTensor* x,
                                  const EpcTensor* topk_weights, const EpcTensor* out_x,
                                  const EpcTensor* out_counts, EpcFlags flags, void* stream);

/* epc_ll_dispatch with the payload cast to FP8 in the send kernel: each token row of `x`
 * (bf16 or fp16, [B, H], H % 128 == 0) travels as e4m3 bytes with one fp32 scale per 128
 * channels, scale = max(amax, 1e-4) / 448 (with EPC_FLAG_FP8_POW2_SCALES rounded up to a
 * power of two), e4m3 = saturate(x / scale): the reference model's ll_dispatch with
 * use_fp8. Receives `out_x` [L, R*T, H] EPC_DTYPE_FP8_E4M3 and `out_scales` [L, R*T, H/128]
 * fp32, in the same order and with the same rules (flags, completion, graphs) as
 * epc_ll_dispatch; combine on the handle takes bf16 expert outputs as usual. Works on
 * groups of any dtype. Collective; stream-ordered; graph-capturable. Since ABI 1.1. */
EPC_API EpcStatus epc_ll_dispatch_fp8(EpcHandle* handle, const EpcTensor* x,
                                      const EpcTensor* topk_weights, const EpcTensor* out_x,
                                      const EpcTensor* out_scales, const EpcTensor* out_counts,
                                      EpcFlags flags, void* stream);

/* Return the expert outputs `expert_out` [L, R*T, H] bf16 (the layout dispatch produced on
 * this handle) to their tokens' ranks and write `out` [B, H] bf16: for each token, the sum
 * over the ranks hosting its unmasked entries (ascending) of that rank's pre-reduced
 * partial (weighted sum over its local experts in top-k order, fp32, sent as bf16), in
 * fp32: the reference model's ll_combine with kPerRankPrereduce. Tokens with every entry
 * masked get zeros. `expert_out` must not overlap `out`. Same collective/stream/graph rules
 * and flags as dispatch. */
EPC_API EpcStatus epc_ll_combine(EpcHandle* handle, const EpcTensor* expert_out,
                                 const EpcTensor* out, EpcFlags flags, void* stream);

/* Finish the step whose dispatch or combine was queued with EPC_FLAG_SEND_ONLY: wait (on
 * the device) for every peer's data and write the outputs given to that call. Collective;
 * stream-ordered; graph-capturable; not thread-safe with other calls on the group. */
EPC_API EpcStatus epc_complete(EpcHandle* handle, void* stream);

/* ---------------------------------------------------------------------------------------
 * High-throughput dispatch and combine (prefill, training, and their backward pass). Since
 * ABI 1.2.
 * ------------------------------------------------------------------------------------- */

/* How a high-throughput handle sizes its received rows. */
typedef uint32_t EpcHtSizing;
#define EPC_HT_SIZING_EXACT 0u    /* rows = N, the tokens this rank receives; creating the
                                     handle waits once for the count exchange to learn N */
#define EPC_HT_SIZING_CAPACITY 1u /* rows = nranks * max_tokens_per_rank (the worst case); no
                                     host synchronisation, so creation, update, dispatch and
                                     combine are all graph-capturable. Rows at or past N are
                                     left unspecified; N is on the device (out_num_recv). */

/* Create a handle for a high-throughput group: copy the routing `topk_idx` [B, K] (int64 or
 * int32, -1 masks an entry; B <= max_tokens_per_rank, K <= max_topk), compute on the GPU
 * which tokens go to which rank and where they land there, and exchange those counts with
 * every rank. The handle keeps this layout: every dispatch and combine on it (forward and
 * backward) reuses it. `*out_rows` receives the row count of every [rows, ...] tensor the
 * handle's calls take: N with EPC_HT_SIZING_EXACT (this call then synchronises `stream`
 * once), nranks * max_tokens_per_rank with EPC_HT_SIZING_CAPACITY. Received rows are
 * ordered by (source rank, source token); a token is received once by each rank hosting at
 * least one of its unmasked entries.
 * Collective over the group's ranks; stream-ordered (blocking with EXACT sizing);
 * graph-capturable only with CAPACITY sizing and only through epc_handle_update (creation
 * allocates); not thread-safe with other calls on the group. Since ABI 1.2. */
EPC_API EpcStatus epc_ht_handle_create(EpcGroup* group, const EpcTensor* topk_idx,
                                       EpcHtSizing sizing, void* stream,
                                       EpcHandle** out_handle, int64_t* out_rows);

/* Send each of this rank's B tokens once to every rank hosting one of its unmasked
 * entries, and receive this rank's N tokens: the reference model's ht_dispatch.
 *   x               [B, H] in the group's 16-bit dtype (bf16 or fp16), or EPC_DTYPE_FP8_E4M3
 *                   with `x_scales` [B, H/128] fp32 (caller-quantized, copied unchanged;
 *                   H % 128 == 0). `x_scales` must be NULL for 16-bit x.
 *   topk_weights    [B, K] fp32, or NULL (then `out_topk_weights` must be NULL too).
 *   out_x           [rows, H] of x's dtype; out_scales [rows, H/128] fp32 with fp8 x, else NULL.
 *   out_topk_idx    [rows, K] int32 (optional): the local expert id of entry k where that
 *                   expert lives on this rank, else -1.
 *   out_topk_weights [rows, K] fp32 (optional): the weight of entry k where local, else 0.
 *   out_expert_counts [L] int32 (optional): received (token, entry) pairs per local expert.
 *   out_num_recv    [1] int32 (optional): N.
 * `rows` is what epc_ht_handle_create reported. The gradient of a combine is this call with
 * the combine's output gradient as `x`. No flags are defined yet (pass 0).
 * Collective; stream-ordered; graph-capturable; not thread-safe with other calls on the
 * group. Tensors must stay valid until the stream passes the call. Since ABI 1.2. */
EPC_API EpcStatus epc_ht_dispatch(EpcHandle* handle, const EpcTensor* x, const EpcTensor* x_scales,
                                  const EpcTensor* topk_weights, const EpcTensor* out_x,
                                  const EpcTensor* out_scales, const EpcTensor* out_topk_idx,
                                  const EpcTensor* out_topk_weights,
                                  const EpcTensor* out_expert_counts,
                                  const EpcTensor* out_num_recv, EpcFlags flags, void* stream);

/* Return the rows `x` [rows, H] bf16 (in dispatch's row order; the caller has already
 * weighted and summed its local experts' outputs) to their tokens' ranks and write `out`
 * [B, H] bf16: per token, the fp32 sum over the ranks that received it, in ascending rank
 * order, rounded once: the reference model's ht_combine. Tokens sent nowhere get zeros.
 * On a group of several nodes (EpcGroupInfo.num_nodes > 1) each other node's rows for a
 * token are first summed into one bf16 partial inside that node, which crosses once (the
 * reference model's node order), and the handle must have dispatched since its creation or
 * last update (else EPC_ERR_INVALID_ARGUMENT): combine reduces where dispatch forwarded.
 * With EPC_FLAG_BACKWARD_WEIGHTS also carries `topk_weights` [rows, K] fp32 back into
 * `out_topk_weights` [B, K] fp32: entry k of a token takes the value the rank hosting entry
 * k's expert holds for it (0 where masked); without the flag both must be NULL. The
 * gradient of a dispatch is this call with the row gradients as `x`. `x` must not overlap
 * `out`. Collective; stream-ordered; graph-capturable; not thread-safe with other calls on
 * the group. Since ABI 1.2. */
EPC_API EpcStatus epc_ht_combine(EpcHandle* handle, const EpcTensor* x,
                                 const EpcTensor* topk_weights, const EpcTensor* out,
                                 const EpcTensor* out_topk_weights, EpcFlags flags,
                                 void* stream);

/* ---------------------------------------------------------------------------------------
 * Function table for dlopen users: dlsym("epc_get_api") is the only symbol needed.
 * ------------------------------------------------------------------------------------- */

/* Append-only: new entries go at the end; `struct_size` tells how many this library has. */
typedef struct EpcApi {
  uint32_t struct_size; /* sizeof(EpcApi) of the library that filled it */
  uint32_t abi_version; /* that library's EPC_ABI_VERSION */
  const char* (*status_string)(EpcStatus status);
  EpcStatus (*last_error)(char* buf, size_t buf_size, size_t* out_length);
  EpcStatus (*get_version)(uint32_t* out_major, uint32_t* out_minor, uint32_t* out_patch);
  EpcStatus (*unique_id_create)(EpcUniqueId* out_id);
  EpcStatus (*comm_init)(const EpcUniqueId* id, int32_t nranks, int32_t rank,
                         int32_t cuda_device, void** out_comm);
  EpcStatus (*comm_destroy)(void* comm);
  EpcStatus (*plan_query)(const EpcGroupConfig* config, int32_t nranks, int32_t lsa_size,
                          int32_t num_nodes, EpcPlan* out_plan);
  EpcStatus (*group_create)(void* comm, const EpcGroupConfig* config, EpcGroup** out_group);
  EpcStatus (*group_destroy)(EpcGroup* group);
  EpcStatus (*group_query)(const EpcGroup* group, EpcGroupInfo* out_info);
  EpcStatus (*group_barrier)(EpcGroup* group, void* stream);
  EpcStatus (*handle_create)(EpcGroup* group, const EpcTensor* topk_idx, void* stream,
                             EpcHandle** out_handle);
  EpcStatus (*handle_update)(EpcHandle* handle, const EpcTensor* topk_idx, void* stream);
  EpcStatus (*handle_destroy)(EpcHandle* handle);
  EpcStatus (*ll_dispatch)(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights,
                           const EpcTensor* out_x, const EpcTensor* out_counts, EpcFlags flags,
                           void* stream);
  EpcStatus (*ll_combine)(EpcHandle* handle, const EpcTensor* expert_out, const EpcTensor* out,
                          EpcFlags flags, void* stream);
  EpcStatus (*complete)(EpcHandle* handle, void* stream);
  /* ABI 1.1 */
  EpcStatus (*ll_dispatch_fp8)(EpcHandle* handle, const EpcTensor* x,
                               const EpcTensor* topk_weights, const EpcTensor* out_x,
                               const EpcTensor* out_scales, const EpcTensor* out_counts,
                               EpcFlags flags, void* stream);
  /* ABI 1.2 */
  EpcStatus (*ht_handle_create)(EpcGroup* group, const EpcTensor* topk_idx, EpcHtSizing sizing,
                                void* stream, EpcHandle** out_handle, int64_t* out_rows);
  EpcStatus (*ht_dispatch)(EpcHandle* handle, const EpcTensor* x, const EpcTensor* x_scales,
                           const EpcTensor* topk_weights, const EpcTensor* out_x,
                           const EpcTensor* out_scales, const EpcTensor* out_topk_idx,
                           const EpcTensor* out_topk_weights, const EpcTensor* out_expert_counts,
                           const EpcTensor* out_num_recv, EpcFlags flags, void* stream);
  EpcStatus (*ht_combine)(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights,
                          const EpcTensor* out, const EpcTensor* out_topk_weights,
                          EpcFlags flags, void* stream);
  /* ABI 1.3 */
  EpcStatus (*group_async_error)(const EpcGroup* group);
} EpcApi;

/* Fill `*out_api` with this library's function table if `abi_major` equals its
 * EPC_ABI_MAJOR (else EPC_ERR_ABI_MISMATCH). `out_api->struct_size` must be set by the
 * caller; only that many bytes are written, so an older caller gets the prefix it knows.
 * Local, thread-safe. */
EPC_API EpcStatus epc_get_api(uint32_t abi_major, EpcApi* out_api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EPCOMM_EPCOMM_H */
