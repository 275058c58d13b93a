// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/rank_context.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace epc::gputest {

namespace {
RankContext g_context;
}

const RankContext& context() { return g_context; }
void set_context(const RankContext& ctx) { g_context = ctx; }

std::string last_error() {
  char buf[4096];
  epc_last_error(buf, sizeof buf, nullptr);
  return buf;
}

uint32_t test_timeout_ms() {
  static const uint32_t timeout = [] {
    constexpr uint32_t kDefault = 20000;
    const char* text = std::getenv("EPCOMM_TEST_TIMEOUT_MS");
    if (text == nullptr || *text == '\0') return kDefault;
    errno = 0;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value == 0 || value > 0xFFFFFFFFull || text[0] == '-') {
      std::fprintf(stderr,
                   "EPCOMM_TEST_TIMEOUT_MS=\"%s\" is not a positive number of "
                   "milliseconds; using %u\n",
                   text, kDefault);
      return kDefault;
    }
    return static_cast<uint32_t>(value);
  }();
  return timeout;
}

EpcGroupConfig small_config(EpcMode mode) {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.mode = mode;
  c.num_experts = 8u * static_cast<uint32_t>(context().env.world_size);
  c.hidden = 2048;
  c.max_tokens_per_rank = mode == EPC_MODE_LOW_LATENCY ? 128 : 1024;
  c.timeout_ms = test_timeout_ms();
  return c;
}

}  // namespace epc::gputest
