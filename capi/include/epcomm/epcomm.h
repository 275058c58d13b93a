/* SPDX-License-Identifier: Apache-2.0 */
/*
 * epcomm 2: expert-parallel (Mixture-of-Experts) dispatch and combine on NCCL's Device API.
 *
 * The library's only public header and its stable C ABI: plain C99, includes only
 * <stdint.h> and <stddef.h>, compiles as C++.
 *
 * Objects and their lives:
 *   communicator  an ncclComm_t (yours, or from epc_comm_init[_config]); outlives its groups.
 *   EpcGroup      one mode (low latency or high throughput) on one communicator: the
 *                 symmetric window, the NCCL device communicator, the error record.
 *   EpcHandle     one batch's routing on a group and its receive layout; it runs steps.
 *   step          epc_dispatch, then epc_combine, on one handle. Either call can be split
 *                 into a send-only call and epc_complete (EPC_STEP_SEND_ONLY).
 *
 * Conventions (a declaration states only what differs):
 *  - Every function but epc_status_string returns an EpcStatus (0 = EPC_OK). On failure
 *    the calling thread's message is available from epc_last_error(); every call but
 *    epc_last_error and epc_status_string clears it on entry. A failing call changes
 *    nothing: out-parameters are written only on success, and a step that fails its checks
 *    queues no work. epc_*_destroy(NULL) is a no-op.
 *  - Status codes follow one rule. A field this ABI defines for the mode and layout but
 *    this library does not serve yet: EPC_ERR_UNSUPPORTED. A field meaningless for the mode
 *    or layout, a NULL required field, a wrong shape or dtype: EPC_ERR_INVALID_ARGUMENT.
 *    Calls in the wrong order: EPC_ERR_INVALID_USAGE. A struct from a newer header with a
 *    non-zero tail this library does not know: EPC_ERR_ABI_MISMATCH. Every message names
 *    the struct and the field.
 *  - Streams cross this header as `void*` meaning cudaStream_t (NULL: the legacy default
 *    stream); NCCL communicators as `void*` meaning ncclComm_t.
 *  - Extensible structs start with struct_size and abi_version; EPC_<STRUCT>_INIT sets
 *    both. In every other field zero means "default" and a NULL tensor pointer "absent".
 *    A shorter struct (an older caller) gets defaults for the missing tail; a longer one
 *    is accepted only if every byte past the end this library knows is zero. Every
 *    layout's size is a multiple of 8; a struct_size that is not ends inside a field
 *    (EPC_ERR_ABI_MISMATCH). A NULL pointer to an input struct means "all defaults".
 *  - Tensors are borrowed: the descriptor for the call, the memory until the stream has
 *    passed the work that uses it (after a send-only call: until its epc_complete).
 *  - Shape letters: B tokens this rank sends, K top-k entries per token, H channels
 *    (hidden), R ranks, T max_tokens_per_rank, L local experts (num_experts / R), C the
 *    handle's capacity, rows as epc_handle_query reports them.
 *  - The library never aborts, exits, prints, or lets a C++ exception escape.
 *  - Every function's comment lists its parameters (name, in/out, meaning) and ends with
 *      Kind: collective over <the group | the communicator> (every rank, same call order)
 *            | local.
 *      Order: stream-ordered (queues GPU work, never waits) | blocking | host-only.
 *      Graphs: capturable | not capturable | capturable if <condition>.
 *      Threads: group-exclusive (no overlap with other calls on the group or its handles)
 *            | any thread.
 *      Since: <ABI version>.
 *  - Groups whose steps overlap on the GPU must fit on it together: a step's kernels wait
 *    for their peers while holding their SMs, so keep the sum of the overlapping groups'
 *    num_sms within the GPU's SM count, or a step can wait for SMs until its timeout.
 *    CUDA may also hold every later launch on a device behind the kernels running there
 *    when a thread allocates device or page-locked memory, which epc_group_create and
 *    epc_handle_create do (and destroying frees): make those calls before the steps of
 *    other groups on the same GPU start, or while none of them runs, never while one may be
 *    waiting for its peers, or the groups can wait for each other until they time out.
 *    For the same reason, queue the steps of groups that overlap on a GPU in the same order
 *    on every rank (from one thread, or from threads that take turns in a fixed order), as
 *    with NCCL communicators: streams share the GPU's hardware queues, so a launch can wait
 *    behind another stream's kernel that waits for its peers, and two groups queued in
 *    different orders on two ranks can wait for each other until they time out.
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

/* ---- Versions --------------------------------------------------------------------------
 * The single source of truth (the build reads these three lines). The major version is
 * the SONAME (libepcomm.so.2); within it every change is additive: a minor appends fields,
 * symbols (symbol node EPCOMM_2.<minor>) and function-table entries, and never changes
 * what an earlier minor defined. */

#define EPC_ABI_MAJOR 2
#define EPC_ABI_MINOR 3
#define EPC_ABI_PATCH 0
#define EPC_ABI_VERSION ((uint32_t)(EPC_ABI_MAJOR * 10000 + EPC_ABI_MINOR * 100 + EPC_ABI_PATCH))

/* ---- Status codes (stable values; new ones may come, so treat unknown ones as errors) -- */

typedef int32_t EpcStatus;
#define EPC_OK 0
#define EPC_ERR_INVALID_ARGUMENT 1 /* a NULL required pointer, a value out of range, a bad
                                      shape or dtype, a field meaningless for the mode */
#define EPC_ERR_ABI_MISMATCH 2     /* struct_size/abi_version not compatible */
#define EPC_ERR_UNSUPPORTED 3      /* a request this ABI defines that this library or
                                      machine cannot serve */
#define EPC_ERR_OUT_OF_MEMORY 4    /* host or device allocation failed */
#define EPC_ERR_CUDA 5             /* a CUDA runtime call failed */
#define EPC_ERR_NCCL 6             /* an NCCL call failed, or the NCCL found is not the
                                      2.x series the library was built for, or older */
#define EPC_ERR_TIMEOUT 7          /* a wait for the peers expired; the group is unusable */
#define EPC_ERR_NO_DEVICE 8        /* no CUDA device is present */
#define EPC_ERR_BUFFER_TOO_SMALL 9 /* a caller buffer was too small: reserved, no call
                                      returns it (epc_last_error truncates) */
#define EPC_ERR_INTERNAL 10        /* a bug in epcomm: please report it */
#define EPC_ERR_CAPACITY 11        /* the handle's dispatch of its current routing
                                      overflowed a rank's capacity under
                                      EPC_OVERFLOW_FAIL (HT): returned by its steps until
                                      the next routing (EpcOverflow); not sticky */
#define EPC_ERR_INVALID_USAGE 12   /* a call out of order: epc_complete with nothing
                                      pending, a step or an update on a handle with one
                                      pending, more pending steps than max_pending_steps
                                      (HT: also a send-only step of the operation pending
                                      on another handle), a step on a handle without
                                      routing, a combine with no dispatch since the
                                      routing (LL handles since 2.2; HT EXPERT_PACKED
                                      handles and groups of several nodes) */

/* The static English name of a status.
 *   status  in  any value; unknown ones give "unknown status"
 * Returns the name, never NULL; does not touch the last-error message.
 * Kind: local. Order: host-only. Graphs: capturable. Threads: any thread. Since: 2.0. */
EPC_API const char* epc_status_string(EpcStatus status);

/* Copy the calling thread's last error message. Does not clear it.
 *   buf         out  NUL-terminated, truncated to buf_size; may be NULL when buf_size is 0
 *   buf_size    in   bytes at buf
 *   out_length  out  optional: the full length without the NUL (0: the last call succeeded)
 * Kind: local. Order: host-only. Graphs: capturable.
 * Threads: any thread (the message is per thread). Since: 2.0. */
EPC_API EpcStatus epc_last_error(char* buf, size_t buf_size, size_t* out_length);

/* The ABI version of the loaded library. Compare *out_major with EPC_ABI_MAJOR before
 * anything else.
 *   out_major  out  optional
 *   out_minor  out  optional
 *   out_patch  out  optional
 * Kind: local. Order: host-only. Graphs: capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_get_version(uint32_t* out_major, uint32_t* out_minor, uint32_t* out_patch);

/* ---- Tensors (fixed layout, not extensible) -------------------------------------------- */

typedef uint32_t EpcDtype;
#define EPC_DTYPE_INVALID 0
#define EPC_DTYPE_BF16 1
#define EPC_DTYPE_FP16 2
#define EPC_DTYPE_FP32 3
#define EPC_DTYPE_FP8_E4M3 4
#define EPC_DTYPE_INT32 5
#define EPC_DTYPE_INT64 6
#define EPC_DTYPE_UINT8 7       /* raw bytes (caller-defined scale formats) */
#define EPC_DTYPE_FP8_E5M2 8
#define EPC_DTYPE_E8M0 9        /* one power of two per byte (UE8M0): byte e is
                                   2^(e - 127) */
#define EPC_DTYPE_E8M0X4 10     /* four E8M0 in one 32-bit word: word w holds scale
                                   block 4 w + i in bits 8 i .. 8 i + 7 (block 4 w in
                                   the least significant byte) */
#define EPC_DTYPE_FP4_E2M1X2 11 /* two e2m1 values per byte, low nibble first; the last
                                   dimension counts bytes (H / 2) */

#define EPC_TENSOR_MAX_DIMS 4

/* A strided view of memory with DLPack's meaning: shape and strides count elements;
 * all-zero strides means row-major contiguous; entries past ndim must be 0. Device memory
 * of the group's GPU unless the field that holds it says otherwise. Extents are exactly
 * those the field states. Only LL dispatch's out_scales may be strided
 * (EPC_SCALES_STRIDED); every other tensor must be row-major contiguous (all-zero strides,
 * or the row-major ones; a dimension of extent 1 takes any stride), else
 * EPC_ERR_UNSUPPORTED. data must be aligned, else EPC_ERR_INVALID_ARGUMENT: 16 bytes for
 * x, out_x and combine's x and out; 8 for acc_expert_counts; 4 for every other int32,
 * int64 or fp32 tensor; x_scales and HT out_scales 4 when a row's scale bytes are a
 * multiple of 4, else their element size; LL out_scales their element size (E8M0X4: 4). */
typedef struct EpcTensor {
  void* data;
  EpcDtype dtype;
  int32_t ndim;
  int64_t shape[EPC_TENSOR_MAX_DIMS];
  int64_t strides[EPC_TENSOR_MAX_DIMS];
} EpcTensor;

/* ---- Bootstrap: NCCL communicators for callers without an NCCL binding ----------------- */

#define EPC_UNIQUE_ID_BYTES 128
typedef struct EpcUniqueId {
  uint8_t bytes[EPC_UNIQUE_ID_BYTES];
} EpcUniqueId;

/* Create a unique id on one process; share its bytes with every rank (a file, a socket,
 * an environment variable in hex...).
 *   out_id  out  the id
 * Kind: local. Order: blocking. Graphs: not capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_unique_id_create(EpcUniqueId* out_id);

/* Create one rank of an NCCL communicator; it belongs to the caller, who destroys it with
 * epc_comm_destroy after every group built on it.
 *   id           in   from epc_unique_id_create, the same bytes on every rank
 *   nranks       in   ranks in the communicator
 *   rank         in   this rank, in [0, nranks)
 *   cuda_device  in   made current on the calling thread; negative: keep the current one
 *   out_comm     out  an ncclComm_t
 * The communicator is blocking; this call waits, without a bound, until every rank has made
 * it. (A caller that needs a bound uses epc_comm_init_config, or creates the communicator
 * itself, non-blocking.)
 * Kind: collective over the communicator (one thread per rank). Order: blocking.
 * Graphs: not capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_comm_init(const EpcUniqueId* id, int32_t nranks, int32_t rank,
                                int32_t cuda_device, void** out_comm);

/* Options of epc_comm_init_config (since 2.3). EPC_COMM_CONFIG_INIT asks for what
 * epc_comm_init does. */
typedef struct EpcCommConfig {
  uint32_t struct_size;
  uint32_t abi_version;
  uint32_t timeout_ms; /* 0: wait without bound, as epc_comm_init. Otherwise the longest
                          this call waits for every rank to join, and the longest
                          epc_comm_destroy waits for NCCL to finalize the communicator
                          (then it aborts it); the communicator is then in NCCL's
                          non-blocking mode (ncclConfig_t.blocking = 0), so that
                          epc_group_create can bound its NCCL steps too (NCCL calls of
                          your own on it return ncclInProgress: see NCCL's docs) */
  uint32_t flags;      /* reserved, 0 */
} EpcCommConfig;

/* epc_comm_init with options: with EpcCommConfig.timeout_ms, a rank that never joins (it
 * died, or was given another id) makes every other rank's call return TIMEOUT instead of
 * waiting for good.
 *   id           in   from epc_unique_id_create, the same bytes on every rank
 *   nranks       in   ranks in the communicator
 *   rank         in   this rank, in [0, nranks)
 *   cuda_device  in   made current on the calling thread; negative: keep the current one
 *   config       in   required; read during the call
 *   out_comm     out  an ncclComm_t, destroyed with epc_comm_destroy
 * Errors: TIMEOUT when the communicator is not complete after timeout_ms (what NCCL made of
 * it is aborted: nothing is left to destroy); NCCL when NCCL fails; ABI_MISMATCH for a
 * config this library cannot read. A failing call leaves the current device as it was.
 * Kind: collective over the communicator (one thread per rank). Order: blocking, at most
 * timeout_ms when it is set. Graphs: not capturable. Threads: any thread. Since: 2.3. */
EPC_API EpcStatus epc_comm_init_config(const EpcUniqueId* id, int32_t nranks, int32_t rank,
                                       int32_t cuda_device, const EpcCommConfig* config,
                                       void** out_comm);

/* Destroy a communicator made by epc_comm_init or epc_comm_init_config. One that NCCL
 * reports failed, or on which epc_group_create timed out with NCCL's step in flight, is
 * aborted (ncclCommAbort; since 2.2), as finalizing it would wait for work no rank will
 * finish; so is one made with EpcCommConfig.timeout_ms whose finalizing takes longer than
 * that (since 2.3). Either way the communicator is gone, and the call returns OK unless
 * NCCL's abort itself fails.
 *   comm  in  NULL: no-op
 * Kind: collective over the communicator. Order: blocking. Graphs: not capturable.
 * Threads: no other call on the communicator. Since: 2.0. */
EPC_API EpcStatus epc_comm_destroy(void* comm);

/* ---- Groups ---------------------------------------------------------------------------- */

typedef uint32_t EpcMode;
#define EPC_MODE_LOW_LATENCY 1     /* decode: direct all-to-all between every pair of
                                      ranks, double-buffered */
#define EPC_MODE_HIGH_THROUGHPUT 2 /* prefill, training: hierarchical across nodes, few SMs,
                                      a backward pass */

/* What a step does when more rows arrive than the handle's capacity holds: HT groups only
 * (LL groups hold every token that can arrive). Neither policy is sticky: the next routing
 * starts afresh. Every rank learns every rank's overflow in the routing's count exchange
 * (epc_handle_update), so all ranks act alike; the host sees it, without synchronising,
 * once the GPU has run that exchange, and from the routing's dispatch on epc_handle_query
 * reports it, on every rank and under either policy. */
typedef uint32_t EpcOverflow;
#define EPC_OVERFLOW_FAIL 0 /* a step in which any rank overflows does nothing on the GPU of
                               any rank: its epc_dispatch returns EPC_OK and writes no device
                               output, acc_expert_counts included (out_expert_counts_host, a
                               host-queued copy, still receives the layout's counts of every
                               (token, entry) pair sent to this rank). Once the host sees
                               the overflow, every later epc_dispatch and epc_combine on
                               the handle returns EPC_ERR_CAPACITY naming the rank and the
                               rows, until its next epc_handle_update (before that, they
                               too return EPC_OK and do nothing on the GPU) */
#define EPC_OVERFLOW_DROP 1 /* rows past capacity, in row order, are dropped; counts describe
                               the rows written, out_num_recv the rows that arrived; combine
                               gets no contribution from a dropped row (HT FLAT: a rank
                               keeps its lowest (source rank, source token) rows) */

#define EPC_GROUP_COMBINE_PER_ENTRY 0x1u /* EpcGroupConfig.flags: size the combine window for
                               one row per (token, top-k entry), which EPC_WEIGHTING_HOME
                               needs (K rows per token instead of one per (token, rank)).
                               Served since 2.1: HT combine_recv holds R * T * max_topk
                               slots instead of R * T, each LL combine_recv[s] R * T *
                               max_topk bf16 rows instead of R * T (epc_plan_query), on
                               groups of one node or several, in both modes. Across nodes
                               (virtual ones included) NET_STAGING grows too: an HT rank
                               stages T * max_topk slots per other node beside its T
                               partials (each rail peer forwards the entries' rows its
                               node hosts, unreduced); an LL rank stages T * max_topk
                               entry rows per rank of another node instead of T partials */

/* Symmetric-memory allocator: must return memory NCCL can register as a window (from
 * ncclMemAlloc or the CUDA VMM API); group creation fails with EPC_ERR_NCCL naming the
 * allocator when NCCL cannot. Called on the creating thread only; returns 0 on success. */
typedef int32_t (*EpcAllocFn)(void* ctx, size_t bytes, void** out_ptr);
typedef void (*EpcFreeFn)(void* ctx, void* ptr);

typedef struct EpcGroupConfig {
  uint32_t struct_size;
  uint32_t abi_version;
  EpcMode mode;                 /* 0: EPC_MODE_LOW_LATENCY */
  uint32_t num_experts;         /* required: total experts, a multiple of the rank count */
  uint32_t hidden;              /* required: H, a multiple of 8 (16-byte bf16 rows) */
  uint32_t max_tokens_per_rank; /* T; 0: 128 (LL) or 4096 (HT); at most 1024 (LL), 65536
                                   (HT) */
  uint32_t max_topk;            /* bound on K; 0: 8; at most 32 */
  uint32_t max_token_bytes;     /* dispatch bytes per token the window holds, payload plus
                                   scales; 0: 2 * H (bf16 or fp16). Down to H + H / 32 (fp8
                                   with one fp32 scale per 128 channels; H a multiple of
                                   128): such a group carries fp8 payloads only. LL groups
                                   round values down to one of these two sizes (an LL
                                   passthrough row and its scales must fit it); HT groups
                                   hold the value as given (EPC_QUANT_PASSTHROUGH rows and
                                   scales up to it), at least these sizes and at most
                                   8 * H */
  uint64_t recv_capacity;       /* tokens per rank the receive window holds; 0: R * T, which
                                   never overflows; more: EPC_ERR_INVALID_ARGUMENT. Fewer:
                                   EPC_ERR_UNSUPPORTED in 2.0; since 2.1 served on HT groups
                                   of one node or of several (virtual ones included), whose
                                   dispatch window then holds recv_capacity rows, to FLAT
                                   handles (EXPERT_PACKED handles and LL groups:
                                   EPC_ERR_UNSUPPORTED). HT groups of several nodes at R * T
                                   run each step in parts of fewer tokens where the whole
                                   step's window would pass 688 MiB per rank (outputs
                                   unchanged; docs/design.md); below R * T, whole steps */
  EpcOverflow overflow;         /* 0: EPC_OVERFLOW_FAIL */
  uint32_t max_pending_steps;   /* send-only steps awaiting epc_complete at once over all
                                   the group's handles, at most one per handle; 0: the
                                   default, 2 since 2.1 (1 in 2.0). Up to 3 (more:
                                   EPC_ERR_UNSUPPORTED); on LL groups each one above 2
                                   adds a receive slot per direction to the window
                                   (epc_plan_query) */
  uint32_t num_sms;             /* SM budget; 0: 132 (LL), 24 (HT) */
  uint32_t timeout_ms;          /* bound on every device-side wait, and (since 2.2)
                                   on each of epc_group_create's NCCL steps that
                                   need every rank; 0: 10000 */
  uint32_t flags;               /* EPC_GROUP_* (EPC_GROUP_COMBINE_PER_ENTRY:
                                   EPC_ERR_UNSUPPORTED in 2.0; since 2.1 LL and HT
                                   groups of any split) */
  uint32_t virtual_node_size;   /* testing aid; 0: a node is an NVLink (LSA) team. Else
                                   every team is split into nodes of this many consecutive
                                   ranks (it must divide the team), which talk only through
                                   the network transport (between virtual nodes, an
                                   NVLink-backed stand-in with the network's ordering) */
  EpcAllocFn alloc_fn;          /* NULL: ncclMemAlloc; set both or neither */
  EpcFreeFn free_fn;
  void* alloc_ctx;              /* passed to alloc_fn and free_fn */
} EpcGroupConfig;

/* What a region of the symmetric window holds. */
typedef uint32_t EpcRegionKind;
#define EPC_REGION_CONTROL 1         /* barrier epochs, one per rank */
#define EPC_REGION_DISPATCH_RECV 2   /* incoming dispatch messages (LL: one per slot) */
#define EPC_REGION_DISPATCH_SIGNAL 3 /* per-source-rank arrival counters */
#define EPC_REGION_COMBINE_RECV 4    /* incoming combine rows */
#define EPC_REGION_COMBINE_SIGNAL 5  /* per-source-rank arrival counters for combine */
#define EPC_REGION_LAYOUT 6          /* HT: per-rank token and expert counts exchanged */
#define EPC_REGION_NET_STAGING 7     /* what is bound for ranks in other nodes, staged here
                                        until the network transport puts it */
#define EPC_REGION_RAIL_RECV 8       /* HT across nodes: tokens from this rank's rail peers
                                        (its local index in every other node), forwarded
                                        inside the node */
#define EPC_REGION_RAIL_SIGNAL 9     /* HT across nodes: one flag per rail peer and chunk */

#define EPC_PLAN_MAX_REGIONS 16
#define EPC_SLOT_NONE 0xFFFFFFFFu

typedef struct EpcPlanRegion {
  EpcRegionKind kind;
  uint32_t slot;   /* double-buffer slot, EPC_SLOT_NONE when not per slot */
  uint64_t offset; /* bytes from the start of the group's symmetric window */
  uint64_t size;   /* bytes */
  char name[32];   /* NUL-terminated, e.g. "dispatch_recv[1]" */
} EpcPlanRegion;

typedef struct EpcPlan {
  uint32_t struct_size;       /* set by the caller */
  uint32_t abi_version;       /* set by the caller */
  EpcMode mode;
  uint32_t num_slots;         /* buffer slots steps rotate through: LL the larger of 2
                                 and max_pending_steps, HT 1 */
  uint64_t symmetric_bytes;   /* per rank: the registered window (its regions, aligned) */
  uint64_t workspace_bytes;   /* per rank: other device memory the group holds */
  uint64_t handle_bytes;      /* device memory one handle with the default EpcHandleConfig
                                 holds: the mode's default layout only (the plan is per
                                 group, the layout per handle); an HT EXPERT_PACKED handle
                                 holds more: per-entry arrays of (2 * R + 5) * T *
                                 max_topk 4-byte words, [R, L] starts and a sort's
                                 scratch; an LL RANK_MAJOR or FLAT handle
                                 max_tokens_per_rank * R 4-byte words more (each
                                 token's place on every rank) */
  uint64_t recv_capacity;     /* after defaults */
  uint32_t num_sms;           /* SM budget the kernels use */
  uint32_t warps_per_block;   /* threads per block / 32 */
  uint32_t lsa_barriers;      /* NCCL LSA barriers requested in the device communicator */
  uint32_t gin_contexts;      /* GIN contexts requested (0 while every rank shares one LSA
                                 team) */
  uint32_t gin_signals;       /* GIN signals requested */
  uint32_t message_bytes;     /* bytes one token occupies in a dispatch receive buffer */
  uint32_t max_token_bytes;   /* after defaults (and, on LL groups, rounding) */
  uint32_t max_pending_steps; /* after defaults */
  uint32_t num_regions;
  uint32_t reserved0;
  EpcPlanRegion regions[EPC_PLAN_MAX_REGIONS];
} EpcPlan;

/* What a configuration costs, without touching a GPU.
 *   config     in   validated exactly as epc_group_create does; read during the call
 *   nranks     in   R
 *   lsa_size   in   ranks per NVLink (LSA) team; divides nranks
 *   num_nodes  in   NVLink teams: nranks / lsa_size, also when config's virtual_node_size
 *                   splits each team into nodes
 *   out_plan   out  the caller sets struct_size and abi_version; only that many bytes
 *                   are written
 * Errors: UNSUPPORTED (since 2.3) for a group whose kernels would need more shared
 * memory per block than they may take (8 bytes per rank: about 5120 ranks; HT steps in parts
 * 8 bytes per local expert besides), which epc_group_create refuses too.
 * Kind: local. Order: host-only. Graphs: capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_plan_query(const EpcGroupConfig* config, int32_t nranks, int32_t lsa_size,
                                 int32_t num_nodes, EpcPlan* out_plan);

typedef struct EpcGroup EpcGroup;

/* Create a group: allocate and register the window the plan describes, create the NCCL
 * device communicator (with GPU-initiated networking when the ranks span NVLink teams;
 * each rank zeroes its GIN signals before the collective window registration, so no
 * peer's traffic can precede the reset), load every kernel (raising the device's
 * per-thread stack limit, a process-wide setting, when it is below what they need), and
 * prove every peer reachable with a barrier bounded by timeout_ms.
 *   comm       in   an ncclComm_t that outlives the group; its device must be current
 *   config     in   required; read during the call
 *   out_group  out  the group
 * Errors: UNSUPPORTED quoting NCCL when the ranks span NVLink teams and NCCL cannot provide
 * GPU-initiated networking; TIMEOUT naming a peer that did not arrive. A rank whose own
 * steps fail before the collective ones (its memory, e.g. OUT_OF_MEMORY from alloc_fn)
 * returns its error, and since 2.2 every other rank returns the same status naming it,
 * instead of waiting for it in the next collective.
 * Communicators: blocking or (since 2.2) in NCCL's non-blocking mode (ncclConfig_t.blocking
 * = 0; one still being created is waited for). Since 2.2 each NCCL step that needs every
 * rank ends after timeout_ms with TIMEOUT when a rank has not taken part: NCCL then still
 * has the step in flight, what it was given is left allocated (leaked), and the
 * communicator must be aborted (ncclCommAbort; epc_comm_destroy aborts one from
 * epc_comm_init[_config]). The bound needs a non-blocking communicator (epc_comm_init_config
 * with a timeout_ms makes one), or a blocking one whose ranks have run a collective together
 * before: NCCL connects a blocking communicator's ranks inside its first collective's call,
 * which no caller can bound.
 * Kind: collective over the communicator. Order: blocking. Graphs: not capturable.
 * Threads: no other call on the communicator. Since: 2.0. */
EPC_API EpcStatus epc_group_create(void* comm, const EpcGroupConfig* config, EpcGroup** out_group);

/* Release everything the group holds, after all work queued on the device (other groups'
 * included). Across NVLink teams it first waits, up to the group's timeout, until the
 * network has read the sources of this rank's puts.
 *   group  in  NULL: no-op; its handles must be destroyed first
 * Errors: INVALID_USAGE, naming them, while handles of the group are alive (since 2.2;
 * nothing is released, the group goes on working); TIMEOUT when the network did not finish
 * in time; the window and the device communicator are then leaked, not freed under the
 * network.
 * Kind: collective over the group. Order: blocking. Graphs: not capturable.
 * Threads: group-exclusive. Since: 2.0. */
EPC_API EpcStatus epc_group_destroy(EpcGroup* group);

typedef struct EpcGroupInfo {
  uint32_t struct_size;         /* set by the caller */
  uint32_t abi_version;         /* set by the caller */
  int32_t rank;                 /* in the communicator */
  int32_t nranks;
  int32_t lsa_rank;             /* in this rank's NVLink (LSA) team */
  int32_t lsa_size;
  int32_t node;                 /* this rank's node: its LSA team, or its virtual node */
  int32_t num_nodes;
  int32_t cuda_device;
  EpcMode mode;
  uint32_t num_experts;
  uint32_t local_experts;       /* num_experts / nranks */
  uint32_t hidden;
  uint32_t max_tokens_per_rank; /* after defaults, as every field below */
  uint32_t max_topk;
  uint32_t max_token_bytes;
  uint64_t recv_capacity;
  EpcOverflow overflow;
  uint32_t max_pending_steps;
  uint32_t num_sms;
  uint32_t timeout_ms;
  uint32_t flags;
  uint32_t virtual_node_size;
  uint64_t symmetric_bytes;     /* device memory held in the registered window */
  uint64_t workspace_bytes;     /* other device memory the group holds */
} EpcGroupInfo;

/* Describe a group after defaults: topology, configuration, bytes held.
 *   group     in
 *   out_info  out  the caller sets struct_size and abi_version; only that many bytes are
 *                  written
 * Kind: local. Order: host-only. Graphs: capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_group_query(const EpcGroup* group, EpcGroupInfo* out_info);

/* Run the group's barrier kernel and wait for it: every rank arrives before any leaves
 * (ranks of other nodes through the network transport).
 *   group   in
 *   stream  in  where the barrier kernel runs
 * Errors: TIMEOUT naming the peer that did not arrive; the group stays failed.
 * Kind: collective over the group. Order: blocking. Graphs: not capturable.
 * Threads: group-exclusive. Since: 2.0. */
EPC_API EpcStatus epc_group_barrier(EpcGroup* group, void* stream);

/* Whether the group has failed, without waiting: EPC_OK, or the sticky status every later
 * call on the group and its handles returns (but epc_group_query, epc_handle_query and the
 * destroy calls),
 * with the same message in epc_last_error:
 *   EPC_ERR_TIMEOUT           a kernel gave up waiting for a peer: the phase, the waiting
 *                             rank, the peer that did not arrive, how long it waited;
 *   EPC_ERR_INVALID_ARGUMENT  the routing check found an expert id outside
 *                             [-1, num_experts), or (LL EXPERT_PADDED) more entries for
 *                             one expert than C, from duplicate ids, whose extra rows
 *                             were dropped: the phase and the rank;
 *   EPC_ERR_CUDA, ...         epc_group_barrier failed on the host.
 * It reads the error record kernels write in mapped host memory, with no CUDA call, so it
 * sees only work the GPU has finished (a timeout once its deadline has passed on the
 * device), never captured work that has not been replayed.
 *   group  in  a live group (not during or after its epc_group_destroy)
 * Kind: local. Order: host-only. Graphs: capturable (launches nothing).
 * Threads: any thread, also during other calls on the group. Since: 2.0. */
EPC_API EpcStatus epc_group_async_error(const EpcGroup* group);

/* ---- Handles --------------------------------------------------------------------------- */

/* How dispatch lays out what a rank receives, and so what combine takes. Rows of one
 * expert are ordered by (source rank, source token, top-k slot), rows of a flat layout by
 * (source rank, source token): identical inputs give bitwise identical outputs.
 *
 *   layout          out_x          out_scales   out_topk_idx / _weights  counts
 *   EXPERT_PADDED   [L, C, H]      [L, C, S]    - / [L, C]               out_expert_counts [L]
 *   EXPERT_PACKED   [rows, H]      [rows, S]    - / [rows]               out_expert_counts [L],
 *                                                                        out_expert_offsets [L+1],
 *                                                                        out_num_recv [1]
 *   RANK_MAJOR      [R, T, H]      [R, T, S]    [R, T, K] / [R, T, K]    out_rank_counts [R]
 *   FLAT            [rows, H]      [rows, S]    [rows, K] / [rows, K]    out_expert_counts [L],
 *                                                                        out_num_recv [1]
 *
 * S: scales per row. The fp8 cast: H / 128 scale blocks, one element each, but E8M0X4
 * out_scales hold ceil(S / 4) words of four blocks, their bytes past the last block 0;
 * PASSTHROUGH: x_scales' S. EXPERT_PADDED's out_topk_weights [L, C] is defined but not
 * served (EPC_ERR_UNSUPPORTED). An output a layout has no column for is meaningless there
 * (EPC_ERR_INVALID_ARGUMENT). combine's x has out_x's rows, each H bf16 values (out_x's
 * shape, but for FP4_E2M1X2 out_x, whose rows hold H / 2 bytes).
 * EXPERT_PADDED: zone l holds out_expert_counts[l] rows from its row 0; on LL groups more
 * entries for one expert than C (only duplicate expert ids can make them) lose the rows
 * past C and fail the group (epc_group_async_error). EXPERT_PACKED: zone l holds
 * out_expert_counts[l] rows from out_expert_offsets[l], then padding up to the next zone,
 * whose start is a multiple of expert_alignment; out_num_recv counts the zones' rows of
 * entries, padding excluded. out_expert_offsets[0] is 0, out_expert_offsets[l + 1] =
 * out_expert_offsets[l] + out_expert_counts[l] rounded up to a multiple of
 * expert_alignment (a zone without entries takes no rows), so out_expert_offsets[L] is the
 * rows the zones take, padding included; under EPC_SIZING_EXACT that is the handle's rows.
 * RANK_MAJOR and FLAT hold a token once per receiving rank, with its entries for that rank
 * (the others: id -1, weight 0).
 * RANK_MAJOR: zone r holds the tokens rank r sent here back to back from its row 0, in
 * source-token order, out_rank_counts[r] of them. FLAT: rows 0 .. out_num_recv - 1 hold
 * the received tokens ordered by (source rank, source token), but under EPC_OVERFLOW_DROP
 * only the first min(out_num_recv, rows) of them (out_num_recv counts the dropped ones
 * too); on LL groups rows = R * T.
 * In both, row i's out_topk_idx[i][k] / out_topk_weights[i][k] describe the token's top-k
 * slot k (a token naming one local expert twice is received once, both slots set), and
 * out_expert_counts (FLAT) counts (token, slot) pairs per local expert. Rows that receive
 * no token are not written, in any output: a zone's rows past its count (EXPERT_PACKED
 * padding: unless EPC_HANDLE_ZERO_PADDING), rows past the last EXPERT_PACKED zone, FLAT
 * rows from min(out_num_recv, rows) on. On LL groups every rank's handle of one step must
 * have the same layout, and acc_expert_counts and out_expert_counts_host (per-expert
 * statistics, not a layout column) serve every layout.
 * Served in 2.0: EXPERT_PADDED on LL groups (C = R * T), FLAT on HT groups; 2.1 adds
 * EXPERT_PACKED on HT groups whose recv_capacity is R * T (of one node or of several,
 * virtual ones included), and RANK_MAJOR and FLAT on LL groups; the others return
 * EPC_ERR_UNSUPPORTED. */
typedef uint32_t EpcLayout;
#define EPC_LAYOUT_DEFAULT 0       /* EXPERT_PADDED on LL groups, FLAT on HT groups */
#define EPC_LAYOUT_EXPERT_PADDED 1 /* one zone of C rows per local expert (a grouped GEMM
                                      masked by counts) */
#define EPC_LAYOUT_EXPERT_PACKED 2 /* expert zones back to back, aligned (a contiguous
                                      grouped GEMM by offsets) */
#define EPC_LAYOUT_RANK_MAJOR 3    /* one zone of T rows per source rank, its tokens
                                      from row 0 (a grouped GEMM masked by
                                      out_rank_counts) */
#define EPC_LAYOUT_FLAT 4          /* received tokens back to back, once per rank */

/* How the handle's row count is chosen. */
typedef uint32_t EpcSizing;
#define EPC_SIZING_CAPACITY 0 /* rows = capacity: no host synchronisation anywhere, so
                                 update, dispatch, combine and complete are capturable */
#define EPC_SIZING_EXACT 1    /* rows = what this rank receives: create (with routing) and
                                 update wait once for the count exchange. HT FLAT and
                                 EXPERT_PACKED only (EXPERT_PADDED and RANK_MAJOR:
                                 EPC_ERR_INVALID_ARGUMENT; LL FLAT: EPC_ERR_UNSUPPORTED) */

#define EPC_HANDLE_ZERO_PADDING 0x1u      /* dispatch zero-fills padding rows: their
                                             out_x, out_scales and out_topk_weights
                                             (EXPERT_PACKED; EPC_ERR_UNSUPPORTED in 2.0;
                                             other layouts: EPC_ERR_INVALID_ARGUMENT).
                                             Padding rows: a zone's rows past its count;
                                             without the flag they keep their bytes. Rows
                                             past the last zone are never written */
#define EPC_HANDLE_GLOBAL_EXPERT_IDS 0x2u /* out_topk_idx holds global expert ids
                                             (rank * L + local id); else local ids.
                                             Accepted on every layout; the expert
                                             layouts, which have no out_topk_idx, have
                                             nothing it changes */

typedef struct EpcHandleConfig {
  uint32_t struct_size;
  uint32_t abi_version;
  EpcLayout layout;          /* 0: EPC_LAYOUT_DEFAULT */
  EpcSizing sizing;          /* 0: EPC_SIZING_CAPACITY */
  uint64_t capacity;         /* C. EXPERT_PADDED: rows per expert zone, 0: R * T. FLAT:
                                rows, 0: recv_capacity; more: EPC_ERR_INVALID_ARGUMENT.
                                EXPERT_PACKED: rows, 0: the most that R * T tokens of
                                max_topk entries take in aligned zones, E + min(L, E) *
                                (a - 1) rounded down to a multiple of a (E = R * T *
                                max_topk, a = expert_alignment). RANK_MAJOR and EXACT
                                sizing: must be 0 (EPC_ERR_INVALID_ARGUMENT). In 2.0 only
                                the default is served; 2.1 serves FLAT capacities below it
                                on HT groups of one node or of several (virtual ones
                                included) whose steps run whole. Other values:
                                EPC_ERR_UNSUPPORTED (LL groups: R * T only, every token
                                that can arrive) */
  uint32_t expert_alignment; /* EXPERT_PACKED: zone starts and sizes are multiples of this,
                                any positive value; 0: 1. A value whose default capacity
                                passes 2^31 - 1 rows (the int32 rows kernels number):
                                EPC_ERR_INVALID_ARGUMENT. Other layouts: must be 0 */
  uint32_t flags;            /* EPC_HANDLE_* */
} EpcHandleConfig;

typedef struct EpcRouting {
  uint32_t struct_size;
  uint32_t abi_version;
  const EpcTensor* topk_idx;   /* required: [B, K] int32 or int64 on the group's device;
                                  -1 masks an entry; B <= T, K <= max_topk; copied on the
                                  stream, so it may be reused once the stream has passed */
  const EpcTensor* num_tokens; /* [1] int32 on the device: only the first n rows of
                                  topk_idx take part (n <= B), so that one graph captured
                                  at B serves every batch up to B (EPC_ERR_UNSUPPORTED in
                                  2.0 to 2.2) */
} EpcRouting;

#define EPC_PENDING_NONE 0
#define EPC_PENDING_DISPATCH 1
#define EPC_PENDING_COMBINE 2

typedef struct EpcHandleInfo {
  uint32_t struct_size;      /* set by the caller */
  uint32_t abi_version;      /* set by the caller */
  EpcMode mode;              /* the group's */
  EpcLayout layout;          /* after defaults, as every field below */
  EpcSizing sizing;
  uint32_t expert_alignment;
  uint32_t num_tokens;       /* B of the current routing (0 before the first) */
  uint32_t topk;             /* K of the current routing (0 before the first) */
  uint32_t pending;          /* EPC_PENDING_*: the send-only call awaiting epc_complete */
  uint32_t flags;            /* EPC_HANDLE_* */
  uint64_t capacity;         /* C (LL RANK_MAJOR and FLAT: R * T, the rows of all zones) */
  int64_t rows;              /* the first dimension of [rows, ...] tensors (FLAT,
                                EXPERT_PACKED); EXACT: the rows this rank receives for the
                                current routing (0 before the first): FLAT, the tokens it
                                keeps (under EPC_OVERFLOW_DROP at most its capacity);
                                EXPERT_PACKED, out_expert_offsets[L], padding included */
  EpcStatus overflow_status; /* EPC_OK, or EPC_ERR_CAPACITY when the layout of the last
                                dispatch's routing found some rank's receive over its
                                capacity, under either policy (every rank reports it),
                                once the GPU has run that layout */
  int32_t overflow_rank;     /* the rank whose receive overflowed, -1 for none (this rank
                                if its own did, else the lowest such rank) */
  int64_t overflow_rows;     /* rows that did not fit at overflow_rank
                                (EPC_OVERFLOW_DROP: dropped there) */
  uint64_t id;               /* Since: 2.1. The handle's number in its group: 1 for the
                                group's first handle, counting up in creation order, never
                                reused; the same on every rank that creates the group's
                                handles in one order. Messages name a handle by it ("handle
                                3 (0x...)") */
} EpcHandleInfo;

typedef struct EpcHandle EpcHandle;

/* Create a handle: allocate its device state and, when routing is given, take it as
 * epc_handle_update does. Without routing the call is local and only allocates: create
 * every handle before graph capture, route them inside it.
 *   group       in   the handle's mode is the group's
 *   config      in   NULL: defaults; read during the call
 *   routing     in   NULL: none yet
 *   stream      in   orders the routing copy and, on HT groups, the layout exchange
 *   out_handle  out  the handle
 * Errors: UNSUPPORTED for a layout, sizing or capacity this library cannot serve.
 * Kind: local without routing or on LL groups; collective over the group on HT groups
 * with routing. Order: stream-ordered (blocking on HT groups with EPC_SIZING_EXACT and
 * routing). Graphs: not capturable (allocates). Threads: group-exclusive. Since: 2.0. */
EPC_API EpcStatus epc_handle_create(EpcGroup* group, const EpcHandleConfig* config,
                                    const EpcRouting* routing, void* stream,
                                    EpcHandle** out_handle);

/* Replace the handle's routing for its next step; on HT groups also compute where every
 * token lands and exchange the counts. B may change; K may not after the first routing.
 *   handle   in/out  no step pending on it
 *   routing  in      required
 *   stream   in
 * Errors: INVALID_USAGE with a step pending.
 * Kind: local on LL groups, collective over the group on HT groups.
 * Order: stream-ordered (blocking with EPC_SIZING_EXACT, whose rows may then change).
 * Graphs: capturable with EPC_SIZING_CAPACITY (B is fixed at capture; the routing is read
 * from the same device memory at every replay). Threads: group-exclusive. Since: 2.0. */
EPC_API EpcStatus epc_handle_update(EpcHandle* handle, const EpcRouting* routing, void* stream);

/* Describe a handle: layout, capacity and rows after defaults, what is pending, and the
 * last dispatch's overflow.
 *   handle    in
 *   out_info  out  the caller sets struct_size and abi_version; only that many bytes are
 *                  written
 * Kind: local. Order: host-only. Graphs: capturable. Threads: group-exclusive.
 * Since: 2.0. */
EPC_API EpcStatus epc_handle_query(const EpcHandle* handle, EpcHandleInfo* out_info);

/* Free the handle's device memory after the work queued on the device has finished. A
 * handle with a step pending gives up its slot; on HT groups (2.1) this rank then ends the
 * sent step without reading what peers sent for it (its outputs stay undefined), so that
 * the group's next steps go on.
 *   handle  in  NULL: no-op
 * Kind: local. Order: blocking (waits for the device). Graphs: not capturable.
 * Threads: group-exclusive. Since: 2.0. */
EPC_API EpcStatus epc_handle_destroy(EpcHandle* handle);

/* ---- Steps ----------------------------------------------------------------------------- */

/* How dispatch encodes the payload. The scales' encoding follows out_scales' dtype:
 * FP32 (the value), E8M0 (a byte e, the scale 2^(e - 127)), E8M0X4 (four such bytes per
 * 32-bit word, of consecutive scale blocks), FP8_E4M3 (NVFP4 block scales), any for
 * PASSTHROUGH. */
typedef uint32_t EpcQuant;
#define EPC_QUANT_NONE 0        /* x (bf16 or fp16) travels as it is; no scales */
#define EPC_QUANT_FP8 1         /* cast in the send kernel: bf16/fp16 x -> e4m3 with one
                                   scale per scale_block channels,
                                   scale = max(amax of the block, 1e-4) / 448, rounded up to
                                   a power of two with EPC_DISPATCH_POW2_SCALES,
                                   e4m3 = x / scale, saturated to +-448, rounded to nearest
                                   even. Served in 2.0: LL, FP32 scales, scale_block 128;
                                   2.1 adds E8M0 and E8M0X4 out_scales on LL (every
                                   scale then rounded up to a power of two, with or
                                   without EPC_DISPATCH_POW2_SCALES). HT groups:
                                   EPC_ERR_UNSUPPORTED (quantize and pass PASSTHROUGH).
                                   LL with H not a multiple of 128, or EPC_QUANT_NONE on
                                   an LL group whose window holds fp8 rows only:
                                   EPC_ERR_INVALID_ARGUMENT naming quant */
#define EPC_QUANT_NVFP4 2       /* cast in the send kernel: -> FP4_E2M1X2 with one E4M3
                                   scale per 16 channels relative to x_global_scale
                                   (EPC_ERR_UNSUPPORTED in 2.0 to 2.2) */
#define EPC_QUANT_PASSTHROUGH 3 /* the caller quantized: x and x_scales [B, S] are copied
                                   byte for byte into out_x and out_scales of the same
                                   dtypes. Served on HT groups: FP8_E4M3 [B, H] (H a
                                   multiple of 16) or FP4_E2M1X2 [B, H / 2] (H a multiple
                                   of 32) rows with any S >= 1 scales of any dtype, 4-byte
                                   aligned when a row's scale bytes are a multiple of 4
                                   (2.0.0 served FP8_E4M3 with FP32 scales, S = H / 128);
                                   x of another dtype, or FP8_E4M3 with H not a multiple
                                   of 16: EPC_ERR_UNSUPPORTED; FP4_E2M1X2 with H not a
                                   multiple of 32: EPC_ERR_INVALID_ARGUMENT.
                                   2.1 serves it on LL groups too, in every layout: the
                                   same x and x_scales with scale elements of 1, 2 or 4
                                   bytes (FP32, BF16, FP16, E8M0, E8M0X4, UINT8, FP8, ...;
                                   8-byte ones: EPC_ERR_UNSUPPORTED); out_x has the
                                   layout's rows with x's columns, out_scales [L, C, S],
                                   [R, T, S] or [R * T, S] with any strides under which no
                                   two elements share memory (as the LL fp8 cast's), and
                                   every row a token feeds gets its row and scales. An LL
                                   message holds max_token_bytes as LL groups round it (2 *
                                   H, or H + H / 32), an HT one max_token_bytes: in both
                                   modes a row plus S scales beyond that is
                                   EPC_ERR_INVALID_ARGUMENT naming x_scales. In both modes
                                   FP4_E2M1X2 x may come with x_global_scale (NVFP4),
                                   checked and not sent (with FP8_E4M3 x:
                                   EPC_ERR_INVALID_ARGUMENT) */

/* Where out_scales' elements lie. */
typedef uint32_t EpcScaleLayout;
#define EPC_SCALES_STRIDED 0        /* as out_scales' strides say: row-major, or
                                       column-major over tokens (token stride 1). Served in
                                       2.0: row-major; 2.1 serves any strides under which
                                       no two elements share memory for LL dispatch, the
                                       fp8 cast's and PASSTHROUGH's (e.g. column-major with
                                       rows padded for TMA; strides under which elements
                                       overlap: EPC_ERR_INVALID_ARGUMENT). The shape is
                                       the layout's, unpadded; elements no row's scale
                                       falls on (a TMA padding's) are never written, and
                                       no stride alignment is required. E8M0X4 words
                                       need dtype EPC_DTYPE_E8M0X4 (INT32:
                                       EPC_ERR_INVALID_ARGUMENT). HT out_scales
                                       must be row-major contiguous, else
                                       EPC_ERR_UNSUPPORTED */
#define EPC_SCALES_SWIZZLED_128X4 1 /* the block-scaled GEMM layout of tiles of 128 rows x 4
                                       scale columns; out_scales is then 1-D, the padded
                                       size in bytes (EPC_ERR_UNSUPPORTED in 2.0 to 2.2) */

/* How combine weights the expert outputs before it sums them. */
typedef uint32_t EpcWeighting;
#define EPC_WEIGHTING_DEFAULT 0 /* SENDER for expert layouts, NONE for the others */
#define EPC_WEIGHTING_NONE 1    /* rows are summed as given: the caller weighted them (the
                                   only choice for RANK_MAJOR and FLAT; on HT EXPERT_PACKED
                                   a token's rows on a rank are summed unweighted into its
                                   partial; LL EXPERT_PADDED: EPC_ERR_UNSUPPORTED) */
#define EPC_WEIGHTING_SENDER 2  /* expert layouts: on the expert's rank each row is
                                   multiplied by its entry's weight in dispatch's
                                   topk_weights, and one token's rows are summed into one
                                   partial per rank: one row per (token, rank) crosses */
#define EPC_WEIGHTING_HOME 3    /* expert layouts: every (token, entry) row crosses, and the
                                   token's rank weights them by home_topk_weights: K rows
                                   per token instead of one per rank, at least twice the
                                   bytes at K = 8 on 4 ranks. Needs
                                   EPC_GROUP_COMBINE_PER_ENTRY (EPC_ERR_UNSUPPORTED in
                                   2.0). The token's rank sums, for k ascending with entry k
                                   unmasked, home_topk_weights[t][k] * row_k in fp32 (each
                                   product rounded to fp32, then added), rounded once to
                                   out's dtype; dispatch's topk_weights play no part, and
                                   no partial is formed on the expert's rank. Served since
                                   2.1 on HT EXPERT_PACKED and LL EXPERT_PADDED handles (on
                                   a group without the flag: EPC_ERR_INVALID_ARGUMENT); the
                                   dispatch may then go without topk_weights (LL since
                                   2.2) */

#define EPC_STEP_SEND_ONLY 0x1u       /* dispatch and combine: queue only the sending half;
                                         epc_complete on the handle writes the outputs.
                                         Served in 2.0 on LL groups; 2.1 also serves HT
                                         groups of one node (across nodes, virtual ones
                                         included, the fused launch is required:
                                         EPC_ERR_UNSUPPORTED). LL groups (2.1): up to
                                         max_pending_steps such halves of different handles
                                         may await their epc_complete at once. Order, on
                                         the device (one stream, or events): a handle's
                                         complete after its send, its next step after its
                                         complete, and the group's dispatches (and its
                                         combines) in the order they were made; every rank
                                         makes the group's steps, completes and handle
                                         destroys in the same order */
#define EPC_DISPATCH_POW2_SCALES 0x2u /* EPC_QUANT_FP8 into FP32 scales: round each scale
                                         up to a power of two */

typedef struct EpcDispatchArgs {
  uint32_t struct_size;
  uint32_t abi_version;
  uint32_t flags;              /* EPC_STEP_SEND_ONLY, EPC_DISPATCH_POW2_SCALES */
  EpcQuant quant;              /* 0: EPC_QUANT_NONE */
  uint32_t scale_block;        /* channels per scale of the casts; 0: 128 (FP8), 16 (NVFP4).
                                  Served: 0 and 128 (others with FP8: EPC_ERR_UNSUPPORTED;
                                  with EPC_QUANT_NONE it must be 0). PASSTHROUGH: any
                                  value, which only describes the caller's blocks (MXFP8
                                  32, NVFP4 16): x_scales' S elements per row travel */
  EpcScaleLayout scale_layout; /* 0: EPC_SCALES_STRIDED */
  /* inputs: this rank's tokens */
  const EpcTensor* x;              /* required: [B, H] (FP4_E2M1X2: [B, H / 2]); B may be 0
                                      with NULL data */
  const EpcTensor* x_scales;       /* PASSTHROUGH: required, [B, S] (LL: row and scales
                                      within the group's message, EPC_QUANT_PASSTHROUGH);
                                      else NULL */
  const EpcTensor* x_global_scale; /* NVFP4, and (2.1) PASSTHROUGH of FP4_E2M1X2 x: [1]
                                      fp32, the same on every rank; not sent (each rank's
                                      GEMM uses its own); with other payloads
                                      EPC_ERR_INVALID_ARGUMENT */
  const EpcTensor* topk_weights;   /* [B, K] fp32: required by out_topk_weights; an LL
                                      EXPERT_PADDED or HT EXPERT_PACKED combine with
                                      EPC_WEIGHTING_SENDER (their default) needs them in
                                      the handle's last dispatch, else
                                      EPC_ERR_INVALID_ARGUMENT naming
                                      EpcCombineArgs.weighting (LL EXPERT_PADDED dispatch
                                      required them until 2.1) */
  /* outputs: what this rank receives, shapes per EpcLayout */
  const EpcTensor* out_x;                  /* required, x's dtype (FP8 cast: FP8_E4M3) */
  const EpcTensor* out_scales;             /* required with a cast or PASSTHROUGH, else
                                              NULL */
  const EpcTensor* out_topk_idx;           /* int32: the entry's expert id (local, or
                                              global with EPC_HANDLE_GLOBAL_EXPERT_IDS)
                                              where the expert is on this rank, else -1 */
  const EpcTensor* out_topk_weights;       /* fp32: the entry's weight where its expert is
                                              on this rank, else 0 */
  const EpcTensor* out_expert_counts;      /* [L] int32: rows written per local expert
                                              (FLAT: received (token, entry) pairs) */
  const EpcTensor* out_expert_offsets;     /* [L + 1] int32 or int64: zone starts
                                              (EXPERT_PACKED) */
  const EpcTensor* out_rank_counts;        /* [R] int32: tokens received per source rank
                                              (RANK_MAJOR) */
  const EpcTensor* out_num_recv;           /* [1] int32: rows that arrived, before any drop
                                              (FLAT, EXPERT_PACKED; there one per
                                              (token, entry), padding excluded) */
  const EpcTensor* out_expert_counts_host; /* [L] int32 in pinned host memory: a copy of the
                                              per-expert counts, the (token, entry) pairs
                                              received per local expert (those kept under
                                              EPC_OVERFLOW_DROP; LL EXPERT_PADDED: at most
                                              C), queued after the step; read it once the
                                              stream has passed */
  const EpcTensor* acc_expert_counts;      /* [L] int64: the same counts are added at
                                              every step (load-balancer statistics); the
                                              caller zeroes it */
  /* Since 2.1 (a 2.0 caller's shorter struct gets the defaults) */
  uint32_t send_sms;  /* SMs the sending launch may occupy, so that kernels overlapping it
                         keep the others; 0: the group's num_sms; at most num_sms and the
                         GPU's SM count. With EPC_STEP_SEND_ONLY: the send half's grid
                         (epc_complete's receive half runs on num_sms); without it, the
                         whole step's. Outputs do not depend on it */
  uint32_t reserved0; /* 0 */
  /* Since 2.2 (an earlier caller's shorter struct gets the defaults) */
  uint32_t max_step_tokens; /* the most tokens any rank of the group dispatches in this step
                               (every rank's B at most this), the same value on every rank;
                               0: max_tokens_per_rank. A bound of few tokens lets an LL group
                               of one node (two ranks or more, without
                               EPC_GROUP_COMBINE_PER_ENTRY) move the step, but for
                               PASSTHROUGH payloads, as line records, which spare the
                               wait for each rank's signal (docs/tuning.md, "Line steps");
                               outputs do not depend on it. Above max_tokens_per_rank, or
                               below this rank's B: EPC_ERR_INVALID_ARGUMENT. Ranks that
                               pass different values wait for what the others do not send:
                               EPC_ERR_TIMEOUT, whose message says the ranks were given
                               different max_step_tokens, and the group fails. HT groups
                               check it and use it for nothing */
  uint32_t reserved1;       /* 0 */
} EpcDispatchArgs;

typedef struct EpcCombineArgs {
  uint32_t struct_size;
  uint32_t abi_version;
  uint32_t flags;                     /* EPC_STEP_SEND_ONLY */
  EpcWeighting weighting;             /* 0: EPC_WEIGHTING_DEFAULT */
  const EpcTensor* x;                 /* required: the expert outputs, dispatch out_x's
                                         shape; bf16 is what travels (fp16:
                                         EPC_ERR_UNSUPPORTED in 2.0 to 2.2) */
  const EpcTensor* topk_weights;      /* with out_topk_weights (HT groups): per received
                                         row, fp32, dispatch out_topk_weights' shape;
                                         carried back (the gradient of dispatch's weights);
                                         LL groups: EPC_ERR_UNSUPPORTED */
  const EpcTensor* home_topk_weights; /* EPC_WEIGHTING_HOME: [B, K] fp32 on this rank */
  const EpcTensor* out;               /* required: [B, H] bf16, fp16 or fp32; must not
                                         overlap x */
  const EpcTensor* out_topk_weights;  /* [B, K] fp32: entry k takes the value the rank
                                         hosting its expert sent (0 where masked, and where
                                         that rank dropped the token's row under
                                         EPC_OVERFLOW_DROP) */
  /* Since 2.1 (a 2.0 caller's shorter struct gets the defaults) */
  uint32_t send_sms;  /* as EpcDispatchArgs.send_sms */
  uint32_t reserved0; /* 0 */
} EpcCombineArgs;

/* Send each of this rank's tokens once to every rank hosting one of its unmasked entries,
 * and receive this rank's rows in the handle's layout. A token whose entries name one
 * expert twice is received once per entry in the expert layouts.
 *   handle  in/out  routed (create or update); no step pending on it
 *   args    in      required; read during the call
 *   stream  in
 * Errors: INVALID_ARGUMENT (a shape, dtype or field), INVALID_USAGE (no routing, a step
 * pending on the handle, or max_pending_steps reached; on HT groups, a send-only step of
 * the same operation pending on another handle of the group, both named), UNSUPPORTED (a
 * layout, quant or field this library cannot serve yet), CAPACITY (the handle's dispatch
 * of its current routing overflowed under EPC_OVERFLOW_FAIL, and the host has seen it:
 * EpcOverflow), the group's sticky failure.
 * Kind: collective over the group. Order: stream-ordered. Graphs: capturable.
 * Threads: group-exclusive. Since: 2.0 (send-only on HT groups and send_sms: 2.1;
 * max_step_tokens: 2.2). */
EPC_API EpcStatus epc_dispatch(EpcHandle* handle, const EpcDispatchArgs* args, void* stream);

/* Return the expert outputs to their tokens' ranks and reduce them there. On the expert's
 * rank the rows of one token are weighted (`weighting`; EPC_WEIGHTING_NONE: as given) and
 * summed in fp32 in top-k order into one partial, rounded once to bf16; on the token's rank
 * the partials are summed in fp32 over ranks in ascending order and rounded once to out's
 * dtype. In RANK_MAJOR and FLAT a token's row on a rank is already its partial
 * (EPC_WEIGHTING_NONE): it returns bit for bit, and the token's rank sums the rows of the
 * ranks that received the token. With EPC_WEIGHTING_HOME the rows return one by one
 * instead and the token's rank forms the one weighted fp32 sum over its entries in top-k
 * order (EpcWeighting). Across nodes (HT), every other node's rows of a token (EXPERT_PACKED:
 * its ranks' bf16 partials) are first summed inside that node in fp32, ranks ascending,
 * rounded once to bf16, and cross once; the token's rank then sums in fp32 in ascending
 * rank order, another node's partial standing at its rail peer's place and each rank of its
 * own node adding its row (or partial) itself (no bf16 partial of its own node). Tokens sent nowhere get zeros. On HT groups this is
 * also the backward of dispatch: x = the rows' gradients, topk_weights and
 * out_topk_weights = the weights' gradients.
 *   handle  in/out  dispatched since its last update; no step pending on it
 *   args    in      required; read during the call
 *   stream  in
 * Errors: as epc_dispatch; also INVALID_USAGE (no dispatch since the handle's last routing:
 * on LL groups since 2.2, on HT EXPERT_PACKED handles and groups of several nodes) and
 * INVALID_ARGUMENT naming
 * EpcCombineArgs.weighting (LL EXPERT_PADDED and HT EXPERT_PACKED: EPC_WEIGHTING_SENDER
 * after a dispatch without topk_weights).
 * Kind: collective over the group. Order: stream-ordered. Graphs: capturable.
 * Threads: group-exclusive. Since: 2.0 (send-only on HT groups and send_sms: 2.1). */
EPC_API EpcStatus epc_combine(EpcHandle* handle, const EpcCombineArgs* args, void* stream);

/* Finish the handle's pending send-only call: wait on the device for every peer and write
 * the outputs its call named. Handles of a group complete in any order. On LL groups (2.1)
 * each pending step keeps its own receive slot until its complete, so a handle never
 * completed (or destroyed with its step pending) holds up no other handle's steps. On HT
 * groups (2.1) one send-only step per operation may be pending on the group (a dispatch and
 * a combine, on two handles, where max_pending_steps allows two); the receive half runs on
 * the group's num_sms. Ordering across streams is the caller's (EPC_STEP_SEND_ONLY says
 * which); the library checks what it sees on the host.
 *   handle  in/out  with a step pending
 *   flags   in      reserved, 0
 *   stream  in      ordered after the send-only call (the same stream, or an event); the
 *                   handle's next step must be ordered after it likewise
 * Errors: INVALID_USAGE (nothing pending).
 * Kind: collective over the group. Order: stream-ordered. Graphs: capturable.
 * Threads: group-exclusive. Since: 2.0 (HT groups: 2.1). */
EPC_API EpcStatus epc_complete(EpcHandle* handle, uint32_t flags, void* stream);

/* ---- Function table for dlopen users: dlsym("epc_get_api") is the only symbol needed --- */

/* Append-only: new entries go at the end; struct_size tells how many a library has. */
typedef struct EpcApi {
  uint32_t struct_size; /* set by the caller; the library fills that many bytes */
  uint32_t abi_version; /* the library's EPC_ABI_VERSION, on return */
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
  EpcStatus (*group_async_error)(const EpcGroup* group);
  EpcStatus (*handle_create)(EpcGroup* group, const EpcHandleConfig* config,
                             const EpcRouting* routing, void* stream, EpcHandle** out_handle);
  EpcStatus (*handle_update)(EpcHandle* handle, const EpcRouting* routing, void* stream);
  EpcStatus (*handle_query)(const EpcHandle* handle, EpcHandleInfo* out_info);
  EpcStatus (*handle_destroy)(EpcHandle* handle);
  EpcStatus (*dispatch)(EpcHandle* handle, const EpcDispatchArgs* args, void* stream);
  EpcStatus (*combine)(EpcHandle* handle, const EpcCombineArgs* args, void* stream);
  EpcStatus (*complete)(EpcHandle* handle, uint32_t flags, void* stream);
  EpcStatus (*comm_init_config)(const EpcUniqueId* id, int32_t nranks, int32_t rank,
                                int32_t cuda_device, const EpcCommConfig* config,
                                void** out_comm); /* since 2.3 */
} EpcApi;

/* Fill the function table when abi_major is this library's EPC_ABI_MAJOR.
 *   abi_major  in      EPC_ABI_MAJOR of the caller's header
 *   out_api    in/out  the caller sets struct_size (EPC_API_INIT); only that many bytes
 *                      are written, so an older caller gets the prefix it knows
 * Errors: ABI_MISMATCH for another major.
 * Kind: local. Order: host-only. Graphs: capturable. Threads: any thread. Since: 2.0. */
EPC_API EpcStatus epc_get_api(uint32_t abi_major, EpcApi* out_api);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* ---- Initializers: struct_size and abi_version set, every other field zero -------------
 * C: `EpcDispatchArgs a = EPC_DISPATCH_ARGS_INIT;` (a declaration; to reset an existing
 * struct, `a = (EpcDispatchArgs)EPC_DISPATCH_ARGS_INIT;`). C++: also an expression.
 * Bindings need none of this: zero the struct, then set the two fields. */
#ifdef __cplusplus
template <typename T>
inline T epc_struct_init_() {
  T s{};
  s.struct_size = static_cast<uint32_t>(sizeof(T));
  s.abi_version = EPC_ABI_VERSION;
  return s;
}
#define EPC_GROUP_CONFIG_INIT (epc_struct_init_<EpcGroupConfig>())
#define EPC_PLAN_INIT (epc_struct_init_<EpcPlan>())
#define EPC_GROUP_INFO_INIT (epc_struct_init_<EpcGroupInfo>())
#define EPC_HANDLE_CONFIG_INIT (epc_struct_init_<EpcHandleConfig>())
#define EPC_ROUTING_INIT (epc_struct_init_<EpcRouting>())
#define EPC_HANDLE_INFO_INIT (epc_struct_init_<EpcHandleInfo>())
#define EPC_DISPATCH_ARGS_INIT (epc_struct_init_<EpcDispatchArgs>())
#define EPC_COMBINE_ARGS_INIT (epc_struct_init_<EpcCombineArgs>())
#define EPC_API_INIT (epc_struct_init_<EpcApi>())
#define EPC_COMM_CONFIG_INIT (epc_struct_init_<EpcCommConfig>())
#else
#define EPC_STRUCT_INIT_(T) {.struct_size = (uint32_t)sizeof(T), .abi_version = EPC_ABI_VERSION}
#define EPC_GROUP_CONFIG_INIT EPC_STRUCT_INIT_(EpcGroupConfig)
#define EPC_PLAN_INIT EPC_STRUCT_INIT_(EpcPlan)
#define EPC_GROUP_INFO_INIT EPC_STRUCT_INIT_(EpcGroupInfo)
#define EPC_HANDLE_CONFIG_INIT EPC_STRUCT_INIT_(EpcHandleConfig)
#define EPC_ROUTING_INIT EPC_STRUCT_INIT_(EpcRouting)
#define EPC_HANDLE_INFO_INIT EPC_STRUCT_INIT_(EpcHandleInfo)
#define EPC_DISPATCH_ARGS_INIT EPC_STRUCT_INIT_(EpcDispatchArgs)
#define EPC_COMBINE_ARGS_INIT EPC_STRUCT_INIT_(EpcCombineArgs)
#define EPC_API_INIT EPC_STRUCT_INIT_(EpcApi)
#define EPC_COMM_CONFIG_INIT EPC_STRUCT_INIT_(EpcCommConfig)
#endif

#endif /* EPCOMM_EPCOMM_H */
