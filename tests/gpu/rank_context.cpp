#include "tests/gpu/rank_context.hpp"

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

EpcGroupConfig small_config(EpcMode mode) {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.mode = mode;
  c.num_experts = 8u * static_cast<uint32_t>(context().env.world_size);
  c.hidden = 2048;
  c.max_tokens_per_rank = mode == EPC_MODE_LOW_LATENCY ? 128 : 1024;
  c.timeout_ms = 20000;
  return c;
}

}  // namespace epc::gputest
