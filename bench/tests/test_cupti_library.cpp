// SPDX-License-Identifier: Apache-2.0
// Loading CUPTI where it may be absent: the candidates, and what a failed load says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cupti_version.h>

#include "bench/cupti_library.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace epc::bench {
namespace {

TEST(CuptiLibrary, CandidatesTryTheLoaderThenTheBenchThenTheToolkit) {
  EXPECT_EQ(
      cupti_candidates("/stage/bench", {"/cuda/lib64", "/cuda/extras/CUPTI/lib64"}),
      (std::vector<std::string>{"libcupti.so.13", "libcupti.so", "/stage/bench/libcupti.so.13",
                                "/stage/bench/libcupti.so", "/cuda/lib64/libcupti.so.13", "/cuda/lib64/libcupti.so",
                                "/cuda/extras/CUPTI/lib64/libcupti.so.13", "/cuda/extras/CUPTI/lib64/libcupti.so"}));
  EXPECT_EQ(cupti_candidates("", {}), (std::vector<std::string>{"libcupti.so.13", "libcupti.so"}));
  EXPECT_EQ(
      toolkit_lib_dirs("/usr/local/cuda"),
      (std::vector<std::string>{"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/extras/CUPTI/lib64"}));
  EXPECT_TRUE(toolkit_lib_dirs("").empty());
}

// The CUPTI of the toolkit the bench is built with has every function the bench resolves,
// under these names, and the headers' major version. Loading calls nothing that needs a GPU.
TEST(CuptiLibrary, TheToolkitsCuptiLoads) {
  const std::vector<std::string> dirs = toolkit_lib_dirs(EPC_BENCH_CUDA_HOME);
  std::vector<std::string> present;
  for (const std::string& candidate : cupti_candidates("", dirs)) {
    if (candidate.find('/') != std::string::npos && access(candidate.c_str(), R_OK) == 0) present.push_back(candidate);
  }
  if (present.empty()) GTEST_SKIP() << "no CUPTI in the toolkit at " << EPC_BENCH_CUDA_HOME;
  CuptiLibrary cupti;
  std::string error;
  {
#if defined(__SANITIZE_ADDRESS__)
    // CUPTI's library initialisers allocate once at load time and never free it: not ours
    // to report in the ASan build.
    __lsan::ScopedDisabler cupti_initialisers;
#endif
    ASSERT_TRUE(cupti.load(present, error)) << error;
  }
  EXPECT_EQ(cupti.path(), present[0]);
  uint32_t version = 0;
  ASSERT_EQ(cupti.get_version(&version), CUPTI_SUCCESS);
  EXPECT_EQ(version / 10000, static_cast<uint32_t>(CUPTI_API_VERSION / 10000));
  EXPECT_EQ(cupti.describe(CUPTI_SUCCESS), "CUPTI_SUCCESS");
}

TEST(CuptiLibrary, AMissingLibraryIsNamed) {
  CuptiLibrary cupti;
  std::string error;
  EXPECT_FALSE(cupti.load({"libepc-no-such-cupti.so.13", "/nonexistent/libcupti.so"}, error));
  EXPECT_FALSE(cupti.loaded());
  EXPECT_EQ(error.rfind("CUPTI could not be loaded (", 0), 0u) << error;
  EXPECT_NE(error.find("libepc-no-such-cupti.so.13"), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/libcupti.so"), std::string::npos) << error;
  EXPECT_FALSE(cupti.load({}, error));
  EXPECT_EQ(error, "no CUPTI library to try");
}

TEST(CuptiLibrary, ALibraryWithoutTheFunctionsIsRefused) {
  CuptiLibrary cupti;
  std::string error;
  EXPECT_FALSE(cupti.load({"libm.so.6"}, error));  // loads, but is no CUPTI
  EXPECT_FALSE(cupti.loaded());
  EXPECT_NE(error.find("libm.so.6 lacks cuptiGetVersion, cuptiGetResultString, cuptiActivityRegisterCallbacks"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("cuptiActivityPopExternalCorrelationId)"), std::string::npos) << error;
  EXPECT_EQ(cupti.describe(CUPTI_ERROR_UNKNOWN),
            "CUPTI error " + std::to_string(static_cast<int>(CUPTI_ERROR_UNKNOWN)));
}

}  // namespace
}  // namespace epc::bench
