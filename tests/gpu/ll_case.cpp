// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the low-latency dispatch/combine GPU tests; see ll_case.hpp.
#include "tests/gpu/ll_case.hpp"

#include <algorithm>
#include <random>
#include <utility>

#include "tests/gpu/rank_context.hpp"
#include "tests/reference/numeric.hpp"
#include "tests/reference/reference_ll_tokens.hpp"

namespace epc::gputest::ll {
namespace {

std::size_t bytes_of(std::size_t elements, std::size_t element_size) { return elements * element_size; }

}  // namespace

// ---- Shapes, groups, problems -------------------------------------------------------------

std::vector<std::vector<uint16_t>> make_expert_outputs(const ref::Problem& p, uint64_t seed) {
  const ref::LlLayout layout = ref::ll_layout(p);
  const int L = p.local_experts();
  const std::size_t rows = static_cast<std::size_t>(layout.rows_per_expert);
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  // In a fixed order, so every rank computes the same values for every rank.
  std::mt19937_64 engine(seed);
  std::vector<std::vector<uint16_t>> y(p.nranks);
  for (int q = 0; q < p.nranks; ++q) {
    y[q].assign(static_cast<std::size_t>(L) * rows * H, 0);
    for (int l = 0; l < L; ++l) {
      for (int32_t i = 0; i < layout.counts[q][l]; ++i) {
        uint16_t* row = y[q].data() + (static_cast<std::size_t>(l) * rows + i) * H;
        for (std::size_t c = 0; c < H; ++c) row[c] = random_bf16(engine);
      }
    }
  }
  return y;
}

LlStep make_step(ref::Problem problem, uint64_t y_seed, int rank, const ref::LlDispatchOptions& options) {
  LlStep step;
  step.rank = rank;
  step.dispatch_options = options;
  std::vector<ref::LlDispatchResult> dispatched = ref::ll_dispatch(problem, options);
  std::vector<std::vector<uint16_t>> y = make_expert_outputs(problem, y_seed);
  std::vector<std::vector<float>> sums = ref::ll_combine_sums(problem, y, ref::CombineOrder::kPerRankPrereduce);
  step.y = std::move(y[rank]);
  step.want_counts = std::move(dispatched[rank].counts);
  step.want_x = std::move(dispatched[rank].x);
  step.want_x_fp8 = std::move(dispatched[rank].x_fp8);
  step.want_scales = std::move(dispatched[rank].fp8_scales);
  step.want_src = std::move(dispatched[rank].src);
  step.want_out_sums = std::move(sums[rank]);
  step.want_out = ref::round_sums(step.want_out_sums, ref::Dtype::kBf16);
  step.problem = std::move(problem);
  return step;
}

ref::Problem random_problem(const LlShape& shape, int topk, uint64_t seed, bool random_token_counts,
                            double masked_fraction) {
  ref::ProblemGenOptions o = gen_options(shape, topk, seed);
  o.random_token_counts = random_token_counts;
  o.masked_fraction = masked_fraction;
  return ref::make_random_problem(o);
}

void clear_rank(ref::Problem& problem, int rank) { problem.ranks[rank] = ref::RankTokens{}; }

// ---- Device buffers of one step ----------------------------------------------------------

::testing::AssertionResult LlBuffers::allocate(const LlShape& shape, int topk, EpcDtype idx_dtype,
                                               const LlOutputs& outputs) {
  if (idx_dtype != EPC_DTYPE_INT64 && idx_dtype != EPC_DTYPE_INT32) {
    return ::testing::AssertionFailure() << "LlBuffers: topk_idx dtype must be int32 or int64";
  }
  outputs_ = outputs;
  shape_ = shape;
  topk_ = topk;
  idx_dtype_ = idx_dtype;
  tokens_ = 0;
  const std::size_t T = static_cast<std::size_t>(shape.max_tokens);
  const std::size_t H = static_cast<std::size_t>(shape.hidden);
  const std::size_t K = static_cast<std::size_t>(topk);
  const std::size_t idx_size = idx_dtype == EPC_DTYPE_INT64 ? sizeof(int64_t) : sizeof(int32_t);
  const std::size_t big = shape.expert_major_elements();
  ::testing::AssertionResult r = x_.allocate(bytes_of(T * H, 2), "x");
  if (r) r = idx_.allocate(bytes_of(T * K, idx_size), "topk_idx");
  if (r) r = weights_.allocate(bytes_of(T * K, sizeof(float)), "topk_weights");
  if (r) r = out_x_.allocate(bytes_of(big, 2), "out_x");
  if (r && H % 128 == 0) r = scales_.allocate(bytes_of(big / 128, sizeof(float)), "out_scales");
  if (r) r = counts_.allocate(bytes_of(shape.local_experts(), sizeof(int32_t)), "out_counts");
  if (r) r = expert_out_.allocate(bytes_of(big, 2), "expert_out");
  if (r) r = out_.allocate(bytes_of(T * H, sizeof(float)), "out");  // fp32 at most
  const std::size_t L = static_cast<std::size_t>(shape.local_experts());
  if (r && outputs.counts_host) r = counts_host_.allocate(L * sizeof(int32_t), "out_expert_counts_host");
  if (r && outputs.acc_counts) {
    r = acc_.allocate(L * sizeof(int64_t), "acc_expert_counts");
    if (r) r = cuda_ok(cudaMemset(acc_.get(), 0, acc_.bytes()), "zero acc_expert_counts");
  }
  want_acc_.assign(L, 0);
  return r;
}

::testing::AssertionResult LlBuffers::upload(const LlStep& step, cudaStream_t stream) {
  const ref::Problem& p = step.problem;
  if (p.nranks != shape_.nranks || p.num_experts != shape_.num_experts || p.hidden != shape_.hidden ||
      p.max_tokens != shape_.max_tokens || p.topk != topk_) {
    return ::testing::AssertionFailure() << "LlBuffers::upload: the problem (R=" << p.nranks << " E=" << p.num_experts
                                         << " H=" << p.hidden << " T=" << p.max_tokens << " K=" << p.topk
                                         << ") does not have the buffers' shape (R=" << shape_.nranks
                                         << " E=" << shape_.num_experts << " H=" << shape_.hidden
                                         << " T=" << shape_.max_tokens << " K=" << topk_ << ")";
  }
  if (step.dispatch_options.use_fp8 && scales_.get() == nullptr) {
    return ::testing::AssertionFailure() << "LlBuffers::upload: an fp8 step needs H % 128 == 0";
  }
  const ref::RankTokens& mine = step.mine();
  tokens_ = mine.num_tokens;
  step_bound_ = 0;
  for (const ref::RankTokens& r : step.problem.ranks)
    step_bound_ = std::max(step_bound_, static_cast<uint32_t>(r.num_tokens));
  options_ = step.dispatch_options;
  const std::size_t entries = static_cast<std::size_t>(tokens_) * topk_;
  const std::size_t x_elements = static_cast<std::size_t>(tokens_) * shape_.hidden;
  const std::size_t big = shape_.expert_major_elements();

  ::testing::AssertionResult r = upload_bytes(x_.get(), mine.x.data(), bytes_of(x_elements, 2), stream, "x");
  if (r) r = upload_routing(idx_.get(), mine.topk_idx, idx_dtype_, idx32_, stream);
  if (r) {
    r = upload_bytes(weights_.get(), mine.topk_weights.data(), bytes_of(entries, sizeof(float)), stream,
                     "topk_weights");
  }
  if (r) {
    r = upload_bytes(expert_out_.get(), step.y.data(), bytes_of(big, 2), stream, "expert outputs y");
  }
  // Poison every output so that nothing stale or unwritten can pass the comparison.
  if (r) r = poison(out_x_, stream, "out_x");
  if (r) r = poison(scales_, stream, "out_scales");
  if (r) r = poison(counts_, stream, "out_counts");
  if (r) r = poison(out_, stream, "out");
  if (r) r = counts_host_.poison(stream, "out_expert_counts_host");
  for (std::size_t l = 0; l < want_acc_.size(); ++l) want_acc_[l] += step.want_counts[l];
  return r;
}

EpcTensor LlBuffers::x() const { return make_tensor(x_.get(), EPC_DTYPE_BF16, {tokens_, shape_.hidden}); }
EpcTensor LlBuffers::topk_idx() const { return make_tensor(idx_.get(), idx_dtype_, {tokens_, topk_}); }
EpcTensor LlBuffers::topk_weights() const { return make_tensor(weights_.get(), EPC_DTYPE_FP32, {tokens_, topk_}); }
EpcTensor LlBuffers::out_x() const {
  return make_tensor(out_x_.get(), options_.use_fp8 ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16,
                     {shape_.local_experts(), shape_.max_rows(), shape_.hidden});
}
EpcTensor LlBuffers::out_scales() const {
  return make_tensor(scales_.get(), EPC_DTYPE_FP32, {shape_.local_experts(), shape_.max_rows(), shape_.hidden / 128});
}
EpcTensor LlBuffers::out_counts() const {
  return make_tensor(counts_.get(), EPC_DTYPE_INT32, {shape_.local_experts()});
}
EpcTensor LlBuffers::out_counts_host() const {
  return make_tensor(counts_host_.get(), EPC_DTYPE_INT32, {shape_.local_experts()});
}
EpcTensor LlBuffers::acc_counts() const { return make_tensor(acc_.get(), EPC_DTYPE_INT64, {shape_.local_experts()}); }
EpcTensor LlBuffers::expert_out() const {
  return make_tensor(expert_out_.get(), EPC_DTYPE_BF16, {shape_.local_experts(), shape_.max_rows(), shape_.hidden});
}
EpcTensor LlBuffers::out() const { return make_tensor(out_.get(), outputs_.out_dtype, {tokens_, shape_.hidden}); }

bool LlBuffers::check(const LlStep& step, cudaStream_t stream, const std::string& label, bool report) {
  StepReport result(step.rank, label, report);
  if (step.tokens() != tokens_) {
    return result.fail("check: the step has " + std::to_string(step.tokens()) +
                       " tokens but the buffers were last uploaded with " + std::to_string(tokens_));
  }
  const int L = shape_.local_experts();
  const std::size_t rows = static_cast<std::size_t>(shape_.max_rows());
  const std::size_t H = static_cast<std::size_t>(shape_.hidden);
  const std::size_t big = shape_.expert_major_elements();
  const std::size_t out_elements = static_cast<std::size_t>(tokens_) * H;
  const bool fp8 = options_.use_fp8;
  got_counts_.assign(L, 0);
  got_x_.assign(fp8 ? 0 : big, 0);
  got_x_fp8_.assign(fp8 ? big : 0, 0);
  got_scales_.assign(fp8 ? big / 128 : 0, 0.0f);
  const bool out32 = outputs_.out_dtype == EPC_DTYPE_FP32;
  got_out_.assign(out32 ? 0 : out_elements, 0);
  got_out32_.assign(out32 ? out_elements : 0, 0.0f);
  got_acc_.assign(outputs_.acc_counts ? L : 0, 0);
  const ::testing::AssertionResult r = download_and_wait(
      {{got_counts_.data(), counts_.get(), bytes_of(L, sizeof(int32_t)), "out_counts"},
       {got_x_.data(), out_x_.get(), bytes_of(got_x_.size(), 2), "out_x"},
       {got_x_fp8_.data(), out_x_.get(), got_x_fp8_.size(), "out_x (fp8)"},
       {got_scales_.data(), scales_.get(), bytes_of(got_scales_.size(), sizeof(float)), "out_scales"},
       {got_out_.data(), out_.get(), bytes_of(got_out_.size(), 2), "out"},
       {got_out32_.data(), out_.get(), bytes_of(got_out32_.size(), sizeof(float)), "out (fp32)"},
       {got_acc_.data(), acc_.get(), bytes_of(got_acc_.size(), sizeof(int64_t)), "acc_expert_counts"}},
      stream);
  if (!r) return result.fail(r.message());
  const int q = step.rank;

  Mismatches counts;
  counts.compare(got_counts_.data(), step.want_counts.data(), L, [&](std::size_t l, int32_t got, int32_t want) {
    return "local expert " + std::to_string(l) + " (expert " + std::to_string(q * L + static_cast<int>(l)) + "): got " +
           std::to_string(got) + " expected " + std::to_string(want);
  });
  result.check(counts, "dispatch out_counts");
  if (outputs_.counts_host) {
    // The stream has passed the step: the pinned copy equals the device counts.
    Mismatches host;
    host.compare(static_cast<const int32_t*>(counts_host_.get()), got_counts_.data(), L,
                 [&](std::size_t l, int32_t got, int32_t want) {
                   return "local expert " + std::to_string(l) + ": host " + std::to_string(got) + ", device " +
                          std::to_string(want) + " (reference " + std::to_string(step.want_counts[l]) + ")";
                 });
    result.check(host, "dispatch out_expert_counts_host");
  }
  if (outputs_.acc_counts) {
    Mismatches acc;
    acc.compare(got_acc_.data(), want_acc_.data(), L, [&](std::size_t l, int64_t got, int64_t want) {
      return "local expert " + std::to_string(l) + ": got " + std::to_string(got) + " expected " +
             std::to_string(want) + " (the sum of every uploaded step's counts)";
    });
    result.check(acc, "dispatch acc_expert_counts");
  }

  // The first want_counts[l] rows of each expert: payload, and scales for fp8.
  auto compare_rows = [&](const auto* got_data, const auto* want_data, std::size_t width, const char* what, auto text) {
    Mismatches rows_of_experts;
    for (int l = 0; l < L; ++l) {
      const std::size_t first_row = static_cast<std::size_t>(l) * rows;
      const std::size_t n = std::min(static_cast<std::size_t>(step.want_counts[l]), rows);
      rows_of_experts.compare(got_data + first_row * width, want_data + first_row * width, n * width,
                              [&](std::size_t i, auto got, auto want) {
                                const ref::SourceRef& src = step.want_src[first_row + i / width];
                                return "local expert " + std::to_string(l) + " (expert " + std::to_string(q * L + l) +
                                       ") row " + std::to_string(i / width) + " column " + std::to_string(i % width) +
                                       ": got " + text(got) + " expected " + text(want) +
                                       "; the row should hold rank " + std::to_string(src.src_rank) + " token " +
                                       std::to_string(src.src_token) + " slot " + std::to_string(src.topk_slot);
                              });
    }
    result.check(rows_of_experts, std::string("dispatch ") + what);
  };
  if (fp8) {
    compare_rows(got_x_fp8_.data(), step.want_x_fp8.data(), H, "out_x (fp8)", [](uint8_t v) { return hex_text(v); });
    compare_rows(got_scales_.data(), step.want_scales.data(), H / 128, "out_scales", fp32_text);
  } else {
    compare_rows(got_x_.data(), step.want_x.data(), H, "out_x", [](uint16_t v) { return hex_text(v); });
  }

  // Combine output [B, H]: the reference's fp32 sums, rounded once to out's dtype.
  Mismatches out;
  auto at = [H](std::size_t i) { return "token " + std::to_string(i / H) + " channel " + std::to_string(i % H); };
  if (out32) {
    out.compare(got_out32_.data(), step.want_out_sums.data(), out_elements, [&](std::size_t i, float got, float want) {
      return at(i) + ": got " + fp32_text(got) + " expected " + fp32_text(want);
    });
  } else if (outputs_.out_dtype == EPC_DTYPE_FP16) {
    const std::vector<uint16_t> want = ref::round_sums(step.want_out_sums, ref::Dtype::kFp16);
    out.compare(got_out_.data(), want.data(), out_elements, [&](std::size_t i, uint16_t got, uint16_t w) {
      return at(i) + ": got " + fp16_text(got) + " expected " + fp16_text(w);
    });
  } else {
    out.compare(got_out_.data(), step.want_out.data(), out_elements, [&](std::size_t i, uint16_t got, uint16_t want) {
      return at(i) + ": got " + bf16_text(got) + " expected " + bf16_text(want);
    });
  }
  result.check(out, std::string("combine out (") + dtype_name(outputs_.out_dtype) + ")");
  return result.ok();
}

// ---- The epcomm calls of one step ----------------------------------------------------------

::testing::AssertionResult create_handle(EpcGroup* group, const LlBuffers& buffers, cudaStream_t stream,
                                         HandlePtr& out) {
  const EpcTensor idx = buffers.topk_idx();
  return create_handle_with(group, handle_config(), &idx, stream, out,
                            "epc_handle_create(LL, B=" + std::to_string(buffers.tokens()) + ")");
}

::testing::AssertionResult update_handle(EpcHandle* handle, const LlBuffers& buffers, cudaStream_t stream) {
  return epc_ok(update_routing(handle, buffers.topk_idx(), stream),
                "epc_handle_update(LL, B=" + std::to_string(buffers.tokens()) + ")");
}

EpcStatus call_dispatch(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream,
                        uint32_t send_sms) {
  const EpcTensor x = buffers.x(), weights = buffers.topk_weights(), out_x = buffers.out_x(),
                  scales = buffers.out_scales(), counts = buffers.out_counts(), counts_host = buffers.out_counts_host(),
                  acc = buffers.acc_counts();
  EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;
  args.flags = flags;
  args.send_sms = send_sms;
  args.max_step_tokens = buffers.max_step_tokens();
  args.x = &x;
  if (buffers.outputs().dispatch_weights) args.topk_weights = &weights;
  args.out_x = &out_x;
  args.out_expert_counts = &counts;
  if (buffers.dispatch_options().use_fp8) {
    args.quant = EPC_QUANT_FP8;
    if (buffers.dispatch_options().round_scale_ue8m0) args.flags |= EPC_DISPATCH_POW2_SCALES;
    args.out_scales = &scales;
  }
  if (buffers.outputs().counts_host) args.out_expert_counts_host = &counts_host;
  if (buffers.outputs().acc_counts) args.acc_expert_counts = &acc;
  return epc_dispatch(handle, &args, stream);
}

EpcStatus call_combine(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream,
                       uint32_t send_sms) {
  const EpcTensor expert_out = buffers.expert_out(), out = buffers.out();
  EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
  args.flags = flags;
  args.send_sms = send_sms;
  args.x = &expert_out;
  args.out = &out;
  return epc_combine(handle, &args, stream);
}

::testing::AssertionResult dispatch(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream) {
  const bool fp8 = buffers.dispatch_options().use_fp8;
  const ::testing::AssertionResult r = epc_ok(call_dispatch(handle, buffers, flags, stream),
                                              "epc_dispatch(LL, B=" + std::to_string(buffers.tokens()) +
                                                  (fp8 ? ", FP8" : "") + ", flags=" + std::to_string(flags) + ")");
  if (!r || (flags & EPC_STEP_SEND_ONLY) == 0) return r;
  return epc_ok(epc_complete(handle, 0, stream), "epc_complete after a send-only dispatch");
}

::testing::AssertionResult combine(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream) {
  const ::testing::AssertionResult r =
      epc_ok(call_combine(handle, buffers, flags, stream), "epc_combine(LL, B=" + std::to_string(buffers.tokens()) +
                                                               ", out " + dtype_name(buffers.outputs().out_dtype) +
                                                               ", flags=" + std::to_string(flags) + ")");
  if (!r || (flags & EPC_STEP_SEND_ONLY) == 0) return r;
  return epc_ok(epc_complete(handle, 0, stream), "epc_complete after a send-only combine");
}

::testing::AssertionResult dispatch_and_combine(EpcHandle* handle, const LlBuffers& buffers, cudaStream_t stream,
                                                StepFlags dispatch_flags, StepFlags combine_flags) {
  ::testing::AssertionResult r = dispatch(handle, buffers, dispatch_flags, stream);
  if (!r) return r;
  return combine(handle, buffers, combine_flags, stream);
}

// ---- A sequence of steps on one handle ------------------------------------------------------

void run_sequence(EpcGroup* group, const LlShape& shape, const std::vector<ref::Problem>& problems, uint64_t y_seed,
                  const std::string& label, EpcDtype idx_dtype, StepFlags dispatch_flags, StepFlags combine_flags,
                  const ref::LlDispatchOptions& options, const LlOutputs& outputs, bool bound_steps) {
  ASSERT_FALSE(problems.empty());
  const int topk = problems.front().topk;
  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, topk, idx_dtype, outputs));
  buffers.bound_steps(bound_steps);
  HandlePtr handle;
  int failing_steps = 0;
  for (std::size_t s = 0; s < problems.size(); ++s) {
    const LlStep step = make_step(problems[s], y_seed + s, my_rank(), options);
    ASSERT_TRUE(buffers.upload(step, stream.get()));
    if (s == 0) {
      ASSERT_TRUE(create_handle(group, buffers, stream.get(), handle));
    } else {
      ASSERT_TRUE(update_handle(handle.get(), buffers, stream.get()));
    }
    ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get(), dispatch_flags, combine_flags));
    const std::string where = label + ", step " + std::to_string(s) + " (B=" + std::to_string(step.tokens()) + ")";
    if (!buffers.check(step, stream.get(), where, failing_steps < kMaxReportedSteps)) {
      ++failing_steps;
    }
  }
  EXPECT_EQ(failing_steps, 0) << label << ": " << failing_steps << " of " << problems.size()
                              << " steps differ from the reference (the first " << kMaxReportedSteps
                              << " are printed above)";
}

// ---- Passthrough (EPC_QUANT_PASSTHROUGH) ---------------------------------------------------

void fill_passthrough(ref::Problem& problem, const ref::PassthroughFormat& format, uint64_t seed) {
  const std::size_t row = static_cast<std::size_t>(ref::passthrough_row_bytes(problem.hidden, format));
  const std::size_t scales = static_cast<std::size_t>(ref::passthrough_scale_bytes(format));
  std::mt19937_64 engine(seed);
  for (ref::RankTokens& r : problem.ranks) {
    r.x.clear();
    r.x_quant.resize(static_cast<std::size_t>(r.num_tokens) * row);
    r.x_scale_bytes.resize(static_cast<std::size_t>(r.num_tokens) * scales);
    for (uint8_t& b : r.x_quant) b = static_cast<uint8_t>(engine());
    for (uint8_t& b : r.x_scale_bytes) b = static_cast<uint8_t>(engine());
  }
}

PassthroughRows passthrough_rows(const ref::Problem& problem, EpcLayout layout, const ref::PassthroughFormat& format,
                                 int rank) {
  PassthroughRows out;
  out.row_bytes = ref::passthrough_row_bytes(problem.hidden, format);
  out.scale_bytes = ref::passthrough_scale_bytes(format);
  if (layout == EPC_LAYOUT_EXPERT_PADDED) {
    ref::LlDispatchOptions o;
    o.passthrough = true;
    o.format = format;
    ref::LlDispatchResult r = std::move(ref::ll_dispatch(problem, o)[rank]);
    out.rows = r.local_experts * r.rows_per_expert;
    out.written.assign(static_cast<std::size_t>(out.rows), 0);
    for (int l = 0; l < r.local_experts; ++l) {
      for (int i = 0; i < r.counts[l]; ++i) out.written[r.row_index(l, i)] = 1;
    }
    out.x = std::move(r.x_quant);
    out.scales = std::move(r.x_scale_bytes);
    out.expert_counts = std::move(r.counts);
    return out;
  }
  ref::LlTokenOptions o;
  o.layout = layout == EPC_LAYOUT_RANK_MAJOR ? ref::LlTokenLayout::kRankMajor : ref::LlTokenLayout::kFlat;
  o.passthrough = true;
  o.format = format;
  ref::LlTokenResult r = std::move(ref::ll_dispatch_tokens(problem, o)[rank]);
  out.rows = r.rows;
  out.written = std::move(r.written);
  out.x = std::move(r.x_quant);
  out.scales = std::move(r.x_scale_bytes);
  out.expert_counts = std::move(r.expert_counts);
  return out;
}

}  // namespace epc::gputest::ll
