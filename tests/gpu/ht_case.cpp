// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the high-throughput dispatch/combine GPU tests; see ht_case.hpp.
#include "tests/gpu/ht_case.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "tests/reference/numeric.hpp"

namespace epc::gputest::ht {
namespace {

std::size_t sz(int64_t value) { return static_cast<std::size_t>(value); }

// "row 5 (rank 1 token 17)": a received row and the token the model says it holds.
std::string row_text(const HtStep& step, std::size_t row) {
  const ref::TokenRef& src = step.want.src[row];
  return "row " + std::to_string(row) + " (rank " + std::to_string(src.src_rank) + " token " +
         std::to_string(src.src_token) + ")";
}

}  // namespace

// ---- Shapes, groups, problems -------------------------------------------------------------

ref::Problem make_problem(const HtShape& shape, const ProblemSpec& spec) {
  ref::ProblemGenOptions o = gen_options(shape, spec.topk, spec.seed);
  if (spec.tokens >= 0) o.max_tokens = spec.tokens;
  o.random_token_counts = spec.random_token_counts;
  o.hot_expert_share = spec.hot_expert_share;
  o.hot_expert = spec.hot_expert;
  o.allow_duplicate_experts = spec.duplicates;
  o.masked_fraction = spec.masked_fraction;
  o.with_fp8 = spec.fp8;
  ref::Problem p = ref::make_random_problem(o);
  p.max_tokens = shape.max_tokens;  // the group's T
  if (spec.empty_rank >= 0) p.ranks[spec.empty_rank % p.nranks] = ref::RankTokens{};
  if (spec.fully_masked_token) {
    for (int r = 0; r < p.nranks; ++r) {
      ref::RankTokens& rank = p.ranks[r];
      if (rank.num_tokens == 0) continue;
      const std::size_t t = sz((7 * r + 3) % rank.num_tokens);
      for (int k = 0; k < p.topk; ++k) rank.topk_idx[t * sz(p.topk) + sz(k)] = -1;
    }
  }
  return p;
}

ProblemSpec random_spec(int topk, uint64_t seed) {
  ProblemSpec spec;
  spec.topk = topk;
  spec.seed = seed;
  spec.random_token_counts = true;
  spec.masked_fraction = 0.1;
  spec.fully_masked_token = true;
  return spec;
}

void replace_payload(ref::Problem& problem, uint64_t seed) {
  std::mt19937_64 engine(seed);
  for (ref::RankTokens& rank : problem.ranks) {
    for (uint16_t& v : rank.x) v = random_bf16(engine);
    for (uint8_t& v : rank.x_fp8) v = static_cast<uint8_t>(engine() & 0xFF);
    for (float& v : rank.fp8_scales) {
      const int exponent = static_cast<int>(engine() % 61) - 30;
      v = std::ldexp(unit_float(engine) * 2.0f - 1.0f, exponent);
    }
  }
}

// ---- Steps ----------------------------------------------------------------------------------

HtStep make_step(ref::Problem problem, uint64_t combine_seed, int rank, bool fp8, int node_size, bool global_ids,
                 int64_t capacity) {
  HtStep step;
  step.rank = rank;
  step.fp8 = fp8;
  step.global_ids = global_ids;
  step.capacity = capacity;
  ref::HtDispatchOptions options;
  options.payload = fp8 ? ref::HtPayload::kFp8 : ref::HtPayload::k16Bit;
  options.global_expert_ids = global_ids;
  options.capacity = capacity;
  std::vector<ref::HtDispatchResult> dispatched = ref::ht_dispatch(problem, options);

  // Every rank's combine inputs, in a fixed order, so every rank computes the same values.
  const std::size_t H = sz(problem.hidden);
  const std::size_t K = sz(problem.topk);
  std::mt19937_64 engine(combine_seed);
  std::vector<std::vector<uint16_t>> rows(problem.nranks);
  std::vector<std::vector<float>> weights(problem.nranks);
  for (int q = 0; q < problem.nranks; ++q) {
    const std::size_t n = sz(dispatched[q].rows);
    rows[q].resize(n * H);
    for (uint16_t& v : rows[q]) v = random_bf16(engine);
    weights[q].resize(n * K);
    for (float& v : weights[q]) v = unit_float(engine);
  }
  ref::HtCombineResult combined = ref::ht_combine(problem, rows, weights, node_size, capacity);

  step.want = std::move(dispatched[rank]);
  step.combine_x = std::move(rows[rank]);
  step.combine_w = std::move(weights[rank]);
  step.want_out = std::move(combined.x[rank]);
  step.want_out_sums = std::move(combined.sums[rank]);
  step.want_out_w = std::move(combined.topk_weights[rank]);
  step.problem = std::move(problem);
  return step;
}

std::vector<HtStep> make_steps(const HtShape& shape, ProblemSpec spec, int count, int rank) {
  const uint64_t first_seed = spec.seed;
  std::vector<HtStep> steps;
  for (int s = 0; s < count; ++s) {
    spec.seed = first_seed + 100 * static_cast<uint64_t>(s);
    steps.push_back(make_step(make_problem(shape, spec), spec.seed + 1, rank, spec.fp8));
  }
  return steps;
}

// ---- Device buffers of one step ----------------------------------------------------------

CallOptions payload_only() {
  CallOptions o;
  o.topk_weights = false;
  o.out_topk_idx = false;
  o.out_expert_counts = false;
  o.out_num_recv = false;
  o.backward_weights = false;
  return o;
}

::testing::AssertionResult HtBuffers::allocate(const HtShape& shape, int topk, EpcDtype idx_dtype) {
  if (idx_dtype != EPC_DTYPE_INT64 && idx_dtype != EPC_DTYPE_INT32) {
    return ::testing::AssertionFailure() << "HtBuffers: topk_idx dtype must be int32 or int64";
  }
  shape_ = shape;
  topk_ = topk;
  idx_dtype_ = idx_dtype;
  tokens_ = 0;
  rows_ = 0;
  const std::size_t T = sz(shape.max_tokens);
  const std::size_t H = sz(shape.hidden);
  const std::size_t K = sz(topk);
  const std::size_t rows = sz(shape.max_rows());
  const std::size_t idx_size = idx_dtype == EPC_DTYPE_INT64 ? sizeof(int64_t) : sizeof(int32_t);
  const bool blocks = H % 128 == 0;
  ::testing::AssertionResult r = x_.allocate(T * H * 2, "x");
  if (r && blocks) r = x_scales_.allocate(T * (H / 128) * sizeof(float), "x_scales");
  if (r) r = idx_.allocate(T * K * idx_size, "topk_idx");
  if (r) r = weights_.allocate(T * K * sizeof(float), "topk_weights");
  if (r) r = out_x_.allocate(rows * H * 2, "out_x");
  if (r && blocks) r = out_scales_.allocate(rows * (H / 128) * sizeof(float), "out_scales");
  if (r) r = out_idx_.allocate(rows * K * sizeof(int32_t), "out_topk_idx");
  if (r) r = out_weights_.allocate(rows * K * sizeof(float), "out_topk_weights");
  if (r) r = out_counts_.allocate(sz(shape.local_experts()) * sizeof(int32_t), "out_expert_counts");
  if (r) r = out_num_recv_.allocate(sizeof(int32_t), "out_num_recv");
  if (r) r = combine_x_.allocate(rows * H * 2, "combine x");
  if (r) r = combine_w_.allocate(rows * K * sizeof(float), "combine topk_weights");
  if (r) r = out_.allocate(T * H * sizeof(float), "out");  // fp32 at most
  if (r) r = out_w_.allocate(T * K * sizeof(float), "out_topk_weights (combine)");
  const std::size_t L = sz(shape.local_experts());
  if (r) r = counts_host_.allocate(L * sizeof(int32_t), "out_expert_counts_host");
  if (r) r = acc_.allocate(L * sizeof(int64_t), "acc_expert_counts");
  if (r) r = cuda_ok(cudaMemset(acc_.get(), 0, acc_.bytes()), "zero acc_expert_counts");
  want_acc_.assign(L, 0);
  return r;
}

::testing::AssertionResult HtBuffers::upload(const HtStep& step, const CallOptions& options, cudaStream_t stream) {
  const ref::Problem& p = step.problem;
  if (p.nranks != shape_.nranks || p.num_experts != shape_.num_experts || p.hidden != shape_.hidden ||
      p.max_tokens != shape_.max_tokens || p.topk != topk_) {
    return ::testing::AssertionFailure() << "HtBuffers::upload: the problem (R=" << p.nranks << " E=" << p.num_experts
                                         << " H=" << p.hidden << " T=" << p.max_tokens << " K=" << p.topk
                                         << ") does not have the buffers' shape (R=" << shape_.nranks
                                         << " E=" << shape_.num_experts << " H=" << shape_.hidden
                                         << " T=" << shape_.max_tokens << " K=" << topk_ << ")";
  }
  if (step.fp8 && x_scales_.get() == nullptr) {
    return ::testing::AssertionFailure() << "HtBuffers::upload: an fp8 step needs H % 128 == 0";
  }
  if (options.counts_host && !options.out_expert_counts) {
    return ::testing::AssertionFailure() << "HtBuffers::upload: counts_host is compared with out_expert_counts";
  }
  const ref::RankTokens& mine = step.mine();
  tokens_ = mine.num_tokens;
  fp8_ = step.fp8;
  options_ = options;
  const std::size_t n = sz(step.rows());
  ::testing::AssertionResult r = fp8_ ? upload_bytes(x_.get(), mine.x_fp8.data(), mine.x_fp8.size(), stream, "x (fp8)")
                                      : upload_bytes(x_.get(), mine.x.data(), mine.x.size() * 2, stream, "x");
  if (r && fp8_) {
    r = upload_bytes(x_scales_.get(), mine.fp8_scales.data(), mine.fp8_scales.size() * sizeof(float), stream,
                     "x_scales");
  }
  if (r) r = upload_routing(idx_.get(), mine.topk_idx, idx_dtype_, idx32_, stream);
  if (r) {
    r = upload_bytes(weights_.get(), mine.topk_weights.data(), mine.topk_weights.size() * sizeof(float), stream,
                     "topk_weights");
  }
  // Garbage (NaN) everywhere, then the N rows the model combines: rows past N of a CAPACITY
  // handle must not reach any output.
  if (r) r = poison(combine_x_, stream, "combine x");
  if (r) r = poison(combine_w_, stream, "combine topk_weights");
  if (r) {
    r = upload_bytes(combine_x_.get(), step.combine_x.data(), n * sz(shape_.hidden) * 2, stream, "combine x");
  }
  if (r) {
    r = upload_bytes(combine_w_.get(), step.combine_w.data(), n * sz(topk_) * sizeof(float), stream,
                     "combine topk_weights");
  }
  if (r) r = poison_outputs(stream);
  if (r && options.acc_counts) {
    for (std::size_t l = 0; l < want_acc_.size(); ++l) want_acc_[l] += step.want.expert_counts[l];
  }
  return r;
}

::testing::AssertionResult HtBuffers::poison_outputs(cudaStream_t stream) {
  ::testing::AssertionResult r = poison(out_x_, stream, "out_x");
  if (r) r = poison(out_scales_, stream, "out_scales");
  if (r) r = poison(out_idx_, stream, "out_topk_idx");
  if (r) r = poison(out_weights_, stream, "out_topk_weights");
  if (r) r = poison(out_counts_, stream, "out_expert_counts");
  if (r) r = poison(out_num_recv_, stream, "out_num_recv");
  if (r) r = poison(out_, stream, "out");
  if (r) r = poison(out_w_, stream, "out_topk_weights (combine)");
  if (r) r = counts_host_.poison(stream, "out_expert_counts_host");
  return r;
}

void HtBuffers::set_handle(EpcSizing sizing, int64_t rows, uint32_t flags) {
  sizing_ = sizing;
  rows_ = rows;
  handle_flags_ = flags;
}

EpcTensor HtBuffers::x() const {
  return make_tensor(x_.get(), fp8_ ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16, {tokens_, shape_.hidden});
}
EpcTensor HtBuffers::x_scales() const {
  return make_tensor(x_scales_.get(), EPC_DTYPE_FP32, {tokens_, shape_.hidden / 128});
}
EpcTensor HtBuffers::topk_idx() const { return make_tensor(idx_.get(), idx_dtype_, {tokens_, topk_}); }
EpcTensor HtBuffers::topk_weights() const { return make_tensor(weights_.get(), EPC_DTYPE_FP32, {tokens_, topk_}); }
EpcTensor HtBuffers::out_x() const {
  return make_tensor(out_x_.get(), fp8_ ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16, {rows_, shape_.hidden});
}
EpcTensor HtBuffers::out_scales() const {
  return make_tensor(out_scales_.get(), EPC_DTYPE_FP32, {rows_, shape_.hidden / 128});
}
EpcTensor HtBuffers::out_topk_idx() const { return make_tensor(out_idx_.get(), EPC_DTYPE_INT32, {rows_, topk_}); }
EpcTensor HtBuffers::out_topk_weights() const {
  return make_tensor(out_weights_.get(), EPC_DTYPE_FP32, {rows_, topk_});
}
EpcTensor HtBuffers::out_expert_counts() const {
  return make_tensor(out_counts_.get(), EPC_DTYPE_INT32, {shape_.local_experts()});
}
EpcTensor HtBuffers::out_num_recv() const { return make_tensor(out_num_recv_.get(), EPC_DTYPE_INT32, {1}); }
EpcTensor HtBuffers::combine_x() const { return make_tensor(combine_x_.get(), EPC_DTYPE_BF16, {rows_, shape_.hidden}); }
EpcTensor HtBuffers::combine_w() const { return make_tensor(combine_w_.get(), EPC_DTYPE_FP32, {rows_, topk_}); }
EpcTensor HtBuffers::out() const { return make_tensor(out_.get(), options_.out_dtype, {tokens_, shape_.hidden}); }
EpcTensor HtBuffers::out_w() const { return make_tensor(out_w_.get(), EPC_DTYPE_FP32, {tokens_, topk_}); }
EpcTensor HtBuffers::out_counts_host() const {
  return make_tensor(counts_host_.get(), EPC_DTYPE_INT32, {shape_.local_experts()});
}
EpcTensor HtBuffers::acc_counts() const { return make_tensor(acc_.get(), EPC_DTYPE_INT64, {shape_.local_experts()}); }

bool HtBuffers::check(const HtStep& step, cudaStream_t stream, const std::string& label, bool report) {
  StepReport result(step.rank, label, report);
  if (step.tokens() != tokens_ || step.fp8 != fp8_) {
    return result.fail("check: the step (B=" + std::to_string(step.tokens()) +
                       ") is not the one last uploaded (B=" + std::to_string(tokens_) + ")");
  }
  if (step.global_ids != ((handle_flags_ & EPC_HANDLE_GLOBAL_EXPERT_IDS) != 0)) {
    return result.fail("check: the step expects " + std::string(step.global_ids ? "global" : "local") +
                       " expert ids, the handle has flags " + std::to_string(handle_flags_));
  }
  const std::size_t n = sz(step.rows());
  const int64_t want_rows =
      sizing_ == EPC_SIZING_EXACT ? step.rows() : (step.capacity != 0 ? step.capacity : shape_.max_rows());
  if (rows_ != want_rows) {
    // The outputs cannot be compared row by row without the right row count.
    return result.fail(std::string("epc_handle_query (") + sizing_name(sizing_) +
                       ") reported rows = " + std::to_string(rows_) + ", expected " + std::to_string(want_rows) +
                       " (N = " + std::to_string(n) + ")");
  }
  const std::size_t H = sz(shape_.hidden);
  const std::size_t K = sz(topk_);
  const std::size_t B = sz(tokens_);
  const std::size_t L = sz(shape_.local_experts());
  const std::size_t blocks = fp8_ ? H / 128 : 0;
  got_x16_.assign(fp8_ ? 0 : n * H, 0);
  got_x8_.assign(fp8_ ? n * H : 0, 0);
  got_scales_.assign(n * blocks, 0.0f);
  got_idx_.assign(options_.out_topk_idx ? n * K : 0, 0);
  got_weights_.assign(options_.topk_weights ? n * K : 0, 0.0f);
  got_counts_.assign(options_.out_expert_counts ? L : 0, 0);
  const bool out32 = options_.out_dtype == EPC_DTYPE_FP32;
  got_out_.assign(out32 ? 0 : B * H, 0);
  got_out32_.assign(out32 ? B * H : 0, 0.0f);
  got_acc_.assign(options_.acc_counts ? L : 0, 0);
  got_out_w_.assign(options_.backward_weights ? B * K : 0, 0.0f);
  got_num_recv_ = -1;
  // Past the handle's rows: out_x, out_topk_idx and out_topk_weights as poisoned.
  const std::size_t past = sz(shape_.max_rows()) - sz(rows_);
  const std::size_t x_row = fp8_ ? H : H * 2;
  got_past_x_.assign(past * x_row, 0);
  got_past_idx_.assign(options_.out_topk_idx ? past * K * sizeof(int32_t) : 0, 0);
  got_past_w_.assign(options_.topk_weights ? past * K * sizeof(float) : 0, 0);
  auto after_rows = [this](const DeviceMemory& m, std::size_t row_bytes) {
    return static_cast<const char*>(m.get()) + sz(rows_) * row_bytes;
  };
  const ::testing::AssertionResult r = download_and_wait(
      {{got_past_x_.data(), after_rows(out_x_, x_row), got_past_x_.size(), "out_x past the rows"},
       {got_past_idx_.data(), after_rows(out_idx_, K * sizeof(int32_t)), got_past_idx_.size(),
        "out_topk_idx past the rows"},
       {got_past_w_.data(), after_rows(out_weights_, K * sizeof(float)), got_past_w_.size(),
        "out_topk_weights past the rows"},
       {got_x16_.data(), out_x_.get(), got_x16_.size() * 2, "out_x"},
       {got_x8_.data(), out_x_.get(), got_x8_.size(), "out_x (fp8)"},
       {got_scales_.data(), out_scales_.get(), got_scales_.size() * sizeof(float), "out_scales"},
       {got_idx_.data(), out_idx_.get(), got_idx_.size() * sizeof(int32_t), "out_topk_idx"},
       {got_weights_.data(), out_weights_.get(), got_weights_.size() * sizeof(float), "out_topk_weights"},
       {got_counts_.data(), out_counts_.get(), got_counts_.size() * sizeof(int32_t), "out_expert_counts"},
       {&got_num_recv_, out_num_recv_.get(), options_.out_num_recv ? sizeof(int32_t) : 0, "out_num_recv"},
       {got_out_.data(), out_.get(), got_out_.size() * 2, "out"},
       {got_out32_.data(), out_.get(), got_out32_.size() * sizeof(float), "out (fp32)"},
       {got_acc_.data(), acc_.get(), got_acc_.size() * sizeof(int64_t), "acc_expert_counts"},
       {got_out_w_.data(), out_w_.get(), got_out_w_.size() * sizeof(float), "out_topk_weights (combine)"}},
      stream);
  if (!r) return result.fail(r.message());

  // Received rows [N, width]: element i is row i / width, column i % width.
  auto compare_rows = [&](const auto* got, const auto* want, std::size_t width, const std::string& what, auto text) {
    Mismatches m;
    m.compare(got, want, n * width, [&](std::size_t i, auto g, auto w) {
      return row_text(step, i / width) + " column " + std::to_string(i % width) + ": got " + text(g) + " expected " +
             text(w);
    });
    result.check(m, "dispatch " + what);
  };
  auto hex = [](auto v) { return hex_text(static_cast<unsigned>(v)); };
  auto number = [](auto v) { return std::to_string(v); };
  if (fp8_) {
    compare_rows(got_x8_.data(), step.want.x_fp8.data(), H, "out_x (fp8)", hex);
    compare_rows(got_scales_.data(), step.want.fp8_scales.data(), blocks, "out_scales", fp32_text);
  } else {
    compare_rows(got_x16_.data(), step.want.x.data(), H, "out_x", hex);
  }
  if (options_.out_topk_idx) {
    compare_rows(got_idx_.data(), step.want.recv_topk_idx.data(), K, "out_topk_idx", number);
  }
  if (options_.topk_weights) {
    compare_rows(got_weights_.data(), step.want.recv_topk_weights.data(), K, "out_topk_weights", fp32_text);
  }
  if (options_.counts_host) {
    // The stream has passed the step: the pinned copy equals the device counts.
    Mismatches m;
    m.compare(static_cast<const int32_t*>(counts_host_.get()), got_counts_.data(), L,
              [&](std::size_t l, int32_t g, int32_t w) {
                return "local expert " + std::to_string(l) + ": host " + std::to_string(g) + ", device " +
                       std::to_string(w) + " (reference " + std::to_string(step.want.expert_counts[l]) + ")";
              });
    result.check(m, "dispatch out_expert_counts_host");
  }
  if (options_.acc_counts) {
    Mismatches m;
    m.compare(got_acc_.data(), want_acc_.data(), L, [&](std::size_t l, int64_t g, int64_t w) {
      return "local expert " + std::to_string(l) + ": got " + std::to_string(g) + " expected " + std::to_string(w) +
             " (the sum of every accumulating step's counts)";
    });
    result.check(m, "dispatch acc_expert_counts");
  }
  if (options_.out_expert_counts) {
    Mismatches m;
    m.compare(got_counts_.data(), step.want.expert_counts.data(), L, [&](std::size_t l, int32_t g, int32_t w) {
      return "local expert " + std::to_string(l) + ": got " + std::to_string(g) + " expected " + std::to_string(w);
    });
    result.check(m, "dispatch out_expert_counts");
  }
  for (const std::vector<uint8_t>* past_rows : {&got_past_x_, &got_past_idx_, &got_past_w_}) {
    const auto written = std::find_if(past_rows->begin(), past_rows->end(), [](uint8_t b) { return b != 0xFF; });
    if (written != past_rows->end()) {
      result.fail("dispatch wrote past the handle's " + std::to_string(rows_) + " rows (byte " +
                  std::to_string(written - past_rows->begin()) + " after them)");
    }
  }
  if (options_.out_num_recv && got_num_recv_ != step.num_recv()) {
    result.fail("dispatch out_num_recv: got " + std::to_string(got_num_recv_) + " expected " +
                std::to_string(step.num_recv()));
  }

  // Combine outputs [B, width]: element i is token i / width.
  auto compare_tokens = [&](const auto* got, const auto* want, std::size_t width, const std::string& what,
                            const char* column, auto text) {
    Mismatches m;
    m.compare(got, want, B * width, [&](std::size_t i, auto g, auto w) {
      return "token " + std::to_string(i / width) + " " + column + " " + std::to_string(i % width) + ": got " +
             text(g) + " expected " + text(w);
    });
    result.check(m, "combine " + what);
  };
  const std::string out_name = std::string("out (") + dtype_name(options_.out_dtype) + ")";
  if (out32) {
    compare_tokens(got_out32_.data(), step.want_out_sums.data(), H, out_name, "channel", fp32_text);
  } else if (options_.out_dtype == EPC_DTYPE_FP16) {
    const std::vector<uint16_t> want = ref::round_sums(step.want_out_sums, ref::Dtype::kFp16);
    compare_tokens(got_out_.data(), want.data(), H, out_name, "channel", fp16_text);
  } else {
    compare_tokens(got_out_.data(), step.want_out.data(), H, out_name, "channel", bf16_text);
  }
  if (options_.backward_weights) {
    compare_tokens(got_out_w_.data(), step.want_out_w.data(), K, "out_topk_weights", "slot", fp32_text);
  }
  return result.ok();
}

// ---- The epcomm calls of one step ----------------------------------------------------------

::testing::AssertionResult create_handle(EpcGroup* group, HtBuffers& buffers, EpcSizing sizing, cudaStream_t stream,
                                         HandlePtr& out, uint32_t flags) {
  const EpcTensor idx = buffers.topk_idx();
  HandlePtr handle;
  ::testing::AssertionResult r =
      create_handle_with(group, handle_config(sizing, flags), &idx, stream, handle,
                         std::string("epc_handle_create(HT, B=") + std::to_string(buffers.tokens()) + ", " +
                             sizing_name(sizing) + ", flags=" + std::to_string(flags) + ")");
  if (!r) return r;
  EpcHandleInfo info{};
  r = query_handle(handle.get(), info);
  if (!r) return r;
  out = std::move(handle);
  buffers.set_handle(sizing, info.rows, flags);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult update_handle(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream) {
  return epc_ok(update_routing(handle, buffers.topk_idx(), stream),
                "epc_handle_update(HT, B=" + std::to_string(buffers.tokens()) + ")");
}

EpcStatus call_dispatch(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream, uint32_t flags,
                        uint32_t send_sms) {
  const CallOptions& o = buffers.options();
  const EpcTensor x = buffers.x(), x_scales = buffers.x_scales(), weights = buffers.topk_weights(),
                  out_x = buffers.out_x(), out_scales = buffers.out_scales(), out_idx = buffers.out_topk_idx(),
                  out_weights = buffers.out_topk_weights(), counts = buffers.out_expert_counts(),
                  num_recv = buffers.out_num_recv(), counts_host = buffers.out_counts_host(),
                  acc = buffers.acc_counts();
  EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;
  args.flags = flags;
  args.send_sms = send_sms;
  args.x = &x;
  args.out_x = &out_x;
  if (buffers.fp8()) {
    args.quant = EPC_QUANT_PASSTHROUGH;
    args.x_scales = &x_scales;
    args.out_scales = &out_scales;
  }
  if (o.topk_weights) {
    args.topk_weights = &weights;
    args.out_topk_weights = &out_weights;
  }
  if (o.out_topk_idx) args.out_topk_idx = &out_idx;
  if (o.out_expert_counts) args.out_expert_counts = &counts;
  if (o.out_num_recv) args.out_num_recv = &num_recv;
  if (o.counts_host) args.out_expert_counts_host = &counts_host;
  if (o.acc_counts) args.acc_expert_counts = &acc;
  return epc_dispatch(handle, &args, stream);
}

EpcStatus call_combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream, uint32_t flags,
                       uint32_t send_sms) {
  const bool bw = buffers.options().backward_weights;
  const EpcTensor x = buffers.combine_x(), weights = buffers.combine_w(), out = buffers.out(), out_w = buffers.out_w();
  EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
  args.flags = flags;
  args.send_sms = send_sms;
  args.x = &x;
  args.out = &out;
  if (bw) {
    args.topk_weights = &weights;
    args.out_topk_weights = &out_w;
  }
  return epc_combine(handle, &args, stream);
}

::testing::AssertionResult dispatch(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream) {
  return epc_ok(call_dispatch(handle, buffers, stream),
                std::string("epc_dispatch(HT, B=") + std::to_string(buffers.tokens()) +
                    ", rows=" + std::to_string(buffers.rows()) + (buffers.fp8() ? ", PASSTHROUGH fp8" : "") + ")");
}

::testing::AssertionResult combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream) {
  const bool bw = buffers.options().backward_weights;
  return epc_ok(call_combine(handle, buffers, stream),
                std::string("epc_combine(HT, rows=") + std::to_string(buffers.rows()) +
                    ", B=" + std::to_string(buffers.tokens()) + ", out " + dtype_name(buffers.options().out_dtype) +
                    (bw ? ", backward weights" : "") + ")");
}

::testing::AssertionResult dispatch_and_combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream) {
  ::testing::AssertionResult r = dispatch(handle, buffers, stream);
  if (!r) return r;
  return combine(handle, buffers, stream);
}

bool same_routing(const ref::Problem& a, const ref::Problem& b) {
  if (a.nranks != b.nranks || a.topk != b.topk) return false;
  for (int r = 0; r < a.nranks; ++r) {
    if (a.ranks[r].num_tokens != b.ranks[r].num_tokens || a.ranks[r].topk_idx != b.ranks[r].topk_idx) {
      return false;
    }
  }
  return true;
}

void run_steps(EpcGroup* group, const HtShape& shape, const std::vector<HtStep>& steps, EpcSizing sizing,
               const std::vector<CallOptions>& options, const std::string& label, EpcDtype idx_dtype,
               uint32_t handle_flags) {
  ASSERT_FALSE(steps.empty());
  ASSERT_FALSE(options.empty());
  Stream stream;
  ASSERT_TRUE(stream.status());
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, steps.front().problem.topk, idx_dtype));
  HandlePtr handle;
  int failing_steps = 0;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const HtStep& step = steps[s];
    ASSERT_TRUE(buffers.upload(step, options[s % options.size()], stream.get()));
    const char* handle_use = "reused";
    if (s == 0 || (sizing == EPC_SIZING_EXACT && !same_routing(step.problem, steps[s - 1].problem))) {
      handle.reset();
      ASSERT_TRUE(create_handle(group, buffers, sizing, stream.get(), handle, handle_flags));
      handle_use = "new";
    } else if (!same_routing(step.problem, steps[s - 1].problem)) {
      ASSERT_TRUE(update_handle(handle.get(), buffers, stream.get()));
      handle_use = "updated";
    }
    ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get()));
    const std::string where = label + ", " + sizing_name(sizing) + ", step " + std::to_string(s) + " (" + handle_use +
                              " handle, B=" + std::to_string(step.tokens()) + ", N=" + std::to_string(step.num_recv()) +
                              ")";
    if (!buffers.check(step, stream.get(), where, failing_steps < kMaxReportedSteps)) {
      ++failing_steps;
    }
  }
  EXPECT_EQ(failing_steps, 0) << label << " (" << sizing_name(sizing) << "): " << failing_steps << " of "
                              << steps.size() << " steps differ from the reference (the first " << kMaxReportedSteps
                              << " are printed above)";
}

}  // namespace epc::gputest::ht
