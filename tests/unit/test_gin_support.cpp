// SPDX-License-Identifier: Apache-2.0
// The GIN decision of group creation (core/gin_support.cpp): what NCCL reported when asked
// for GIN resources, turned into a status and a message that names it.
#include <gtest/gtest.h>

#include <string>

#include "core/gin_support.hpp"

namespace {

const epc::Topology kTwoNodes{16, 8, 2, 8};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

epc::GinReport created(int contexts, int backend, uint64_t base, uint64_t count) {
  epc::GinReport r;
  r.signals_requested = static_cast<uint32_t>(count);
  r.created = true;
  r.contexts = contexts;
  r.backend = backend;
  r.signal_base = base;
  r.signal_count = count;
  return r;
}

TEST(GinSupport, NoGinInNcclIsUnsupportedAndSaysWhatNcclSaid) {
  epc::GinReport r;
  r.signals_requested = 320;
  r.nccl_result = epc::kNcclInvalidUsageCode;
  r.nccl_result_text = "invalid usage";
  r.nccl_last_error = "GIN not supported.";
  const epc::GinVerdict v = epc::judge_gin(kTwoNodes, r);
  EXPECT_EQ(v.status, EPC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(v.message, "the 16 ranks span 2 NVLink (LSA) domains of 8 ranks")) << v.message;
  EXPECT_TRUE(contains(v.message, "ncclDevCommCreate with 320 GIN signals returned invalid usage (5)")) << v.message;
  EXPECT_TRUE(contains(v.message, "\"GIN not supported.\"")) << v.message;
  EXPECT_TRUE(contains(v.message, "NCCL_GIN_ENABLE=0")) << v.message;

  r.nccl_result = epc::kNcclInternalErrorCode;  // GIN disabled, or no GIN-capable NIC
  r.nccl_result_text = "internal error";
  r.nccl_last_error.clear();
  const epc::GinVerdict disabled = epc::judge_gin(kTwoNodes, r);
  EXPECT_EQ(disabled.status, EPC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(disabled.message, "returned internal error (3). NCCL 2.28.9")) << disabled.message;
}

TEST(GinSupport, OtherNcclFailuresAreNcclErrors) {
  epc::GinReport r;
  r.nccl_result = 2;
  r.nccl_result_text = "unhandled system error";
  EXPECT_EQ(epc::judge_gin(kTwoNodes, r).status, EPC_ERR_NCCL);
}

TEST(GinSupport, UnusableGinIsUnsupported) {
  const epc::GinVerdict no_context = epc::judge_gin(kTwoNodes, created(0, epc::kGinBackendProxy, 0, 16));
  EXPECT_EQ(no_context.status, EPC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(no_context.message, "ginContextCount 0")) << no_context.message;

  const epc::GinVerdict unknown = epc::judge_gin(kTwoNodes, created(4, 1, 0, 16));
  EXPECT_EQ(unknown.status, EPC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(unknown.message, "type 1")) << unknown.message;
}

TEST(GinSupport, ProxySignalIdsMustFitSixteenBits) {
  const epc::GinVerdict last_fits = epc::judge_gin(kTwoNodes, created(4, epc::kGinBackendProxy, 65536 - 320, 320));
  EXPECT_EQ(last_fits.status, EPC_OK) << last_fits.message;
  const epc::GinVerdict past = epc::judge_gin(kTwoNodes, created(4, epc::kGinBackendProxy, 65536 - 319, 320));
  EXPECT_EQ(past.status, EPC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(past.message, "signals 65217 to 65536")) << past.message;
  EXPECT_TRUE(contains(past.message, "16 bits")) << past.message;
  // GDAKI addresses signals by offset: no such limit.
  EXPECT_EQ(epc::judge_gin(kTwoNodes, created(4, epc::kGinBackendGdaki, 65536 - 319, 320)).status, EPC_OK);
}

}  // namespace
