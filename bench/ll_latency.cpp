// epcomm-ll-latency: a first low-latency timing probe (the full epcomm-bench, with baselines,
// ceilings, sweeps and JSON, is the benchmark issue's work). One process per GPU through the
// test harness; every rank times `iters` back-to-back dispatch+combine steps on one stream
// with CUDA events around each half, after `warmup` steps. Routing: uniform random top-k
// without duplicates. Prints, per token count, the slowest rank's median, p10 and p90.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/gpu/harness/harness.hpp"

namespace {

#define CHECK_EPC(call)                                                                    \
  do {                                                                                     \
    EpcStatus s_ = (call);                                                                 \
    if (s_ != EPC_OK) {                                                                    \
      char m_[1024];                                                                       \
      epc_last_error(m_, sizeof m_, nullptr);                                              \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, epc_status_string(s_), m_);      \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

EpcTensor tensor(void* data, EpcDtype dtype, std::initializer_list<int64_t> shape) {
  EpcTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  return t;
}

struct Stats {
  double p10, median, p90;
};

Stats stats(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return static_cast<double>(v[static_cast<size_t>(q * (v.size() - 1))]) * 1000.0; };
  return {at(0.1), at(0.5), at(0.9)};
}

int rank_main(const epc::harness::RankEnv& env, int, char**) {
  const int R = env.world_size, E = 256, H = 7168, K = 8, T = 128, warmup = 20, iters = 200;
  void* comm = nullptr;
  CHECK_EPC(epc_comm_init(&env.unique_id, R, env.rank, env.device, &comm));
  EpcGroupConfig cfg = EPC_GROUP_CONFIG_INIT;
  cfg.num_experts = E;
  cfg.hidden = H;
  cfg.max_tokens_per_rank = T;
  cfg.max_topk = K;
  // EPC_LL_SMS: the SM budget to probe (the group default otherwise).
  if (const char* sms = std::getenv("EPC_LL_SMS")) cfg.num_sms = static_cast<uint32_t>(std::atoi(sms));
  EpcGroup* group = nullptr;
  CHECK_EPC(epc_group_create(comm, &cfg, &group));
  EpcGroupInfo info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  CHECK_EPC(epc_group_query(group, &info));
  const int L = E / R;

  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  void *x, *w, *idx, *out_x, *counts, *y, *out;
  cudaMalloc(&x, static_cast<size_t>(T) * H * 2);
  cudaMalloc(&w, static_cast<size_t>(T) * K * 4);
  cudaMalloc(&idx, static_cast<size_t>(T) * K * 8);
  cudaMalloc(&out_x, static_cast<size_t>(L) * R * T * H * 2);
  cudaMalloc(&counts, static_cast<size_t>(L) * 4);
  cudaMalloc(&y, static_cast<size_t>(L) * R * T * H * 2);
  cudaMalloc(&out, static_cast<size_t>(T) * H * 2);
  cudaMemset(x, 0x3f, static_cast<size_t>(T) * H * 2);  // bf16 0x3f3f, about 0.75
  cudaMemset(y, 0x3f, static_cast<size_t>(L) * R * T * H * 2);

  std::mt19937_64 rng(1234 + static_cast<uint64_t>(env.rank));
  std::vector<int64_t> routing(static_cast<size_t>(T) * K);
  std::vector<float> weights(static_cast<size_t>(T) * K, 1.0f / K);
  for (int t = 0; t < T; ++t) {
    std::vector<int64_t> experts(E);
    for (int e = 0; e < E; ++e) experts[static_cast<size_t>(e)] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int k = 0; k < K; ++k) routing[static_cast<size_t>(t) * K + k] = experts[static_cast<size_t>(k)];
  }
  cudaMemcpy(idx, routing.data(), routing.size() * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(w, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice);

  std::vector<std::string> lines;
  for (int B : {1, 128}) {
    EpcTensor idx_t = tensor(idx, EPC_DTYPE_INT64, {B, K});
    EpcHandle* handle = nullptr;
    CHECK_EPC(epc_handle_create(group, &idx_t, stream, &handle));
    EpcTensor x_t = tensor(x, EPC_DTYPE_BF16, {B, H}), w_t = tensor(w, EPC_DTYPE_FP32, {B, K});
    EpcTensor ox = tensor(out_x, EPC_DTYPE_BF16, {L, static_cast<int64_t>(R) * T, H});
    EpcTensor oc = tensor(counts, EPC_DTYPE_INT32, {L});
    EpcTensor y_t = tensor(y, EPC_DTYPE_BF16, {L, static_cast<int64_t>(R) * T, H});
    EpcTensor o_t = tensor(out, EPC_DTYPE_BF16, {B, H});
    std::vector<cudaEvent_t> ev(3 * static_cast<size_t>(iters));
    for (auto& e : ev) cudaEventCreate(&e);
    for (int i = 0; i < warmup + iters; ++i) {
      const bool timed = i >= warmup;
      const size_t j = static_cast<size_t>(i - warmup) * 3;
      if (timed) cudaEventRecord(ev[j], stream);
      CHECK_EPC(epc_ll_dispatch(handle, &x_t, &w_t, &ox, &oc, 0, stream));
      if (timed) cudaEventRecord(ev[j + 1], stream);
      CHECK_EPC(epc_ll_combine(handle, &y_t, &o_t, 0, stream));
      if (timed) cudaEventRecord(ev[j + 2], stream);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;
    std::vector<float> dispatch_ms, combine_ms;
    for (int i = 0; i < iters; ++i) {
      float a = 0, b = 0;
      cudaEventElapsedTime(&a, ev[static_cast<size_t>(i) * 3], ev[static_cast<size_t>(i) * 3 + 1]);
      cudaEventElapsedTime(&b, ev[static_cast<size_t>(i) * 3 + 1], ev[static_cast<size_t>(i) * 3 + 2]);
      dispatch_ms.push_back(a);
      combine_ms.push_back(b);
    }
    // The same step captured once in a CUDA graph and replayed: no host work between the
    // kernels, so the per-step time is the GPU's alone.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    CHECK_EPC(epc_ll_dispatch(handle, &x_t, &w_t, &ox, &oc, 0, stream));
    CHECK_EPC(epc_ll_combine(handle, &y_t, &o_t, 0, stream));
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      std::fprintf(stderr, "graph capture failed\n");
      return 1;
    }
    std::vector<float> step_ms;
    for (int i = 0; i < warmup + iters; ++i) {
      const bool timed = i >= warmup;
      const size_t j = static_cast<size_t>(i - warmup) * 3;
      if (timed) cudaEventRecord(ev[j], stream);
      cudaGraphLaunch(exec, stream);
      if (timed) cudaEventRecord(ev[j + 1], stream);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;
    for (int i = 0; i < iters; ++i) {
      float a = 0;
      cudaEventElapsedTime(&a, ev[static_cast<size_t>(i) * 3], ev[static_cast<size_t>(i) * 3 + 1]);
      step_ms.push_back(a);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    Stats d = stats(dispatch_ms), c = stats(combine_ms), st = stats(step_ms);
    char line[512];
    std::snprintf(line, sizeof line,
                  "RESULT tokens=%d rank=%d dispatch_us median=%.1f p10=%.1f p90=%.1f  "
                  "combine_us median=%.1f p10=%.1f p90=%.1f  graph_step_us median=%.1f p10=%.1f p90=%.1f  window_MiB=%.1f sms=%u",
                  B, env.rank, d.median, d.p10, d.p90, c.median, c.p10, c.p90, st.median, st.p10, st.p90,
                  static_cast<double>(info.symmetric_bytes) / (1 << 20), cfg.num_sms);
    lines.push_back(line);
    for (auto& e : ev) cudaEventDestroy(e);
    CHECK_EPC(epc_handle_destroy(handle));
  }
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  CHECK_EPC(epc_group_destroy(group));
  CHECK_EPC(epc_comm_destroy(comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return epc::harness::run(argc, argv, rank_main); }
