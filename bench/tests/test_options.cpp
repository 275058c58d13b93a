// SPDX-License-Identifier: Apache-2.0
// Flags: every flag parses and is documented; bad values are refused by name.
#include <gtest/gtest.h>

#include "bench/options.hpp"

namespace epc::bench {
namespace {

bool parse(std::vector<std::string> args, Options& o, std::string& error) {
  std::vector<char*> argv{const_cast<char*>("epcomm-bench")};
  for (std::string& a : args) argv.push_back(a.data());
  return parse_options(static_cast<int>(argv.size()), argv.data(), o, error);
}

TEST(Options, DefaultsMatchTheDocumentedOnes) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({}, o, error)) << error;
  EXPECT_EQ(o.mode, "ll");
  EXPECT_EQ(o.tokens, std::vector<int>{128});
  EXPECT_EQ(o.hidden, 7168);
  EXPECT_EQ(o.topk, 8);
  EXPECT_EQ(o.experts, 256);
  EXPECT_EQ(o.dtype, "bf16");
  EXPECT_EQ(o.warmup, 20);
  EXPECT_EQ(o.iters, 200);
  EXPECT_FALSE(o.graph);
  EXPECT_FALSE(o.send_only);
  EXPECT_TRUE(o.baseline);
  EXPECT_TRUE(o.ceiling);
  EXPECT_EQ(o.group_max_tokens(), 128);
  EXPECT_EQ(o.ht_sizing, "exact");
  EXPECT_EQ(o.large_from, 0);
  EXPECT_EQ(o.warmup_at(1 << 16), 20);
  EXPECT_EQ(o.iters_at(1 << 16), 200);
  EXPECT_EQ(o.virtual_node_size, 0);
  EXPECT_TRUE(o.cupti);
  EXPECT_FALSE(o.cold_l2);
  EXPECT_EQ(o.weights_at, "none");
  EXPECT_EQ(o.capacity_factor, 1.0);
  EXPECT_EQ(o.overflow, "fail");
}

TEST(Options, EveryFlagIsInTheHelp) {
  const std::string help = usage();
  for (const std::string& name : flag_names()) {
    EXPECT_NE(help.find(name), std::string::npos) << name << " is missing from --help";
  }
  for (const char* launcher : {"--ranks=", "--time-limit=", "--fail-grace=", "--allow-oversubscribe"}) {
    EXPECT_NE(help.find(launcher), std::string::npos) << launcher;
  }
}

TEST(Options, ParsesEveryFlag) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--mode=ll",
                     "--tokens=1..256",
                     "--max-tokens=512",
                     "--hidden=4096",
                     "--topk=4",
                     "--experts=64",
                     "--dtype=fp8",
                     "--fp8-pow2-scales",
                     "--sms=16",
                     "--routing=skewed",
                     "--hot-share=0.25",
                     "--hot-expert=3",
                     "--masked=0.1",
                     "--seed=9",
                     "--warmup=2",
                     "--iters=7",
                     "--graph=on",
                     "--graph-replays=3",
                     "--send-only",
                     "--baseline=off",
                     "--ceiling=off",
                     "--ceiling-mib=8",
                     "--timeout-ms=500",
                     "--out=/tmp/x.json",
                     "--ht-sizing=capacity",
                     "--large-from=128",
                     "--large-warmup=1",
                     "--large-iters=2",
                     "--virtual-node-size=2",
                     "--cupti=off",
                     "--cold-l2",
                     "--ranks=4",
                     "--time-limit=60"},
                    o, error))
      << error;
  EXPECT_EQ(o.tokens, (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(o.group_max_tokens(), 512);
  EXPECT_EQ(o.hidden, 4096);
  EXPECT_EQ(o.topk, 4);
  EXPECT_EQ(o.experts, 64);
  EXPECT_EQ(o.dtype, "fp8");
  EXPECT_TRUE(o.pow2_scales);
  EXPECT_EQ(o.sms, 16);
  EXPECT_EQ(o.routing.kind, RoutingKind::skewed);
  EXPECT_DOUBLE_EQ(o.routing.hot_share, 0.25);
  EXPECT_EQ(o.routing.hot_expert, 3);
  EXPECT_DOUBLE_EQ(o.routing.masked, 0.1);
  EXPECT_EQ(o.routing.seed, 9u);
  EXPECT_EQ(o.warmup, 2);
  EXPECT_EQ(o.iters, 7);
  EXPECT_TRUE(o.graph);
  EXPECT_EQ(o.graph_replays, 3);
  EXPECT_TRUE(o.send_only);
  EXPECT_FALSE(o.baseline);
  EXPECT_FALSE(o.ceiling);
  EXPECT_EQ(o.ceiling_peak_mib, 8);
  EXPECT_EQ(o.timeout_ms, 500);
  EXPECT_EQ(o.out, "/tmp/x.json");
  EXPECT_EQ(o.ht_sizing, "capacity");
  EXPECT_EQ(o.large_from, 128);
  EXPECT_EQ(o.warmup_at(64), 2);
  EXPECT_EQ(o.iters_at(64), 7);
  EXPECT_EQ(o.warmup_at(128), 1);
  EXPECT_EQ(o.iters_at(256), 2);
  EXPECT_EQ(o.virtual_node_size, 2);
  EXPECT_FALSE(o.cupti);
  EXPECT_TRUE(o.cold_l2);
}

TEST(Options, HighThroughputSweep) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--mode=ht", "--tokens=1024..16384", "--dtype=fp8", "--graph", "--large-from=8192"}, o, error))
      << error;
  EXPECT_EQ(o.mode, "ht");
  EXPECT_EQ(o.tokens, (std::vector<int>{1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(o.group_max_tokens(), 16384);
  EXPECT_EQ(o.iters_at(4096), 200);
  EXPECT_EQ(o.iters_at(8192), 10);
  EXPECT_EQ(o.warmup_at(16384), 3);
  ASSERT_TRUE(parse({"--mode=ht", "--tokens=65536"}, o, error)) << error;
  // The token limit depends on the mode, whatever order the flags come in.
  ASSERT_TRUE(parse({"--tokens=4096", "--mode=ht"}, o, error)) << error;
  EXPECT_FALSE(parse({"--tokens=4096"}, o, error));
  EXPECT_NE(error.find("--mode=ll allows at most 1024"), std::string::npos) << error;
}

// --layout defaults to the mode's layout; each mode accepts its own layouts only.
TEST(Options, LayoutsPerMode) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({}, o, error)) << error;
  EXPECT_EQ(o.layout, "expert-padded");
  ASSERT_TRUE(parse({"--mode=ht"}, o, error)) << error;
  EXPECT_EQ(o.layout, "flat");
  for (const char* layout : {"expert-padded", "rank-major", "flat"}) {
    ASSERT_TRUE(parse({std::string("--layout=") + layout}, o, error)) << error;
    EXPECT_EQ(o.layout, layout);
  }
  EXPECT_FALSE(parse({"--layout=expert-packed"}, o, error));
  EXPECT_NE(error.find("LL serves expert-padded, rank-major and flat"), std::string::npos) << error;
  for (const char* layout : {"expert-padded", "rank-major"}) {
    EXPECT_FALSE(parse({"--mode=ht", std::string("--layout=") + layout}, o, error)) << layout;
    EXPECT_NE(error.find("HT serves flat and expert-packed"), std::string::npos) << error;
  }
  EXPECT_FALSE(parse({"--layout=packed"}, o, error));
  EXPECT_NE(error.find("--layout"), std::string::npos) << error;
}

TEST(Options, QuantPerMode) {
  Options o;
  std::string error;
  // LL: --quant=fp8 is the in-kernel cast of --dtype=fp8; passthrough in every layout.
  ASSERT_TRUE(parse({"--quant=fp8"}, o, error)) << error;
  EXPECT_EQ(o.quant, "fp8");
  EXPECT_EQ(o.dtype, "fp8");
  for (const char* layout : {"expert-padded", "rank-major", "flat"}) {
    for (const char* scales : {"fp32", "fp32-colmajor", "bf16", "ue8m0", "ue8m0-packed", "uint8"}) {
      Options p;
      ASSERT_TRUE(parse({"--quant=passthrough", std::string("--layout=") + layout, std::string("--scales=") + scales},
                        p, error))
          << layout << " " << scales << ": " << error;
    }
  }
  ASSERT_TRUE(parse({"--quant=passthrough", "--payload=e2m1", "--scales=uint8"}, o, error)) << error;
  EXPECT_EQ(o.passthrough_row_bytes(), 3584);
  EXPECT_EQ(o.passthrough_scale_count(), 448);
  EXPECT_EQ(o.passthrough_scale_element_bytes(), 1);
  ASSERT_TRUE(parse({"--mode=ht", "--quant=passthrough", "--scales=ue8m0"}, o, error)) << error;
  EXPECT_EQ(o.passthrough_scale_count(), 224);
  // An LL message holds 2 * hidden bytes: e4m3 7168 + 1793 fp32 scales is one too many.
  ASSERT_TRUE(parse({"--quant=passthrough", "--scale-count=1792"}, o, error)) << error;
  EXPECT_FALSE(parse({"--quant=passthrough", "--scale-count=1793"}, o, error));
  EXPECT_NE(error.find("2 * hidden bytes of an LL message"), std::string::npos) << error;
  // HT grows its window instead.
  ASSERT_TRUE(parse({"--mode=ht", "--quant=passthrough", "--scale-count=1793"}, o, error)) << error;
  EXPECT_FALSE(parse({"--mode=ht", "--quant=fp8"}, o, error));
  EXPECT_NE(error.find("--quant=fp8 (the cast in the send kernel) serves --mode=ll"), std::string::npos) << error;
  EXPECT_FALSE(parse({"--quant=fp8", "--dtype=bf16"}, o, error));
  EXPECT_NE(error.find("drop --dtype=bf16"), std::string::npos) << error;
  EXPECT_FALSE(parse({"--quant=passthrough", "--dtype=fp8"}, o, error));
  EXPECT_NE(error.find("--quant=passthrough needs --dtype=bf16"), std::string::npos) << error;
  EXPECT_FALSE(parse({"--quant=nvfp4"}, o, error));
  EXPECT_NE(error.find("--quant"), std::string::npos) << error;
}

TEST(Options, WeightsAtOnExpertLayouts) {
  for (const char* at : {"none", "dispatch", "combine"}) {
    Options o;
    std::string error;
    ASSERT_TRUE(parse({"--mode=ht", "--layout=expert-packed", std::string("--weights-at=") + at}, o, error)) << error;
    EXPECT_EQ(o.weights_at, at);
    Options ll;
    ASSERT_TRUE(parse({"--mode=ll", "--layout=expert-padded", std::string("--weights-at=") + at}, ll, error)) << error;
    EXPECT_EQ(ll.weights_at, at);
  }
}

TEST(Options, CapacityFactorAndOverflow) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--mode=ht", "--tokens=4096", "--capacity-factor=0.25", "--overflow=drop"}, o, error)) << error;
  EXPECT_EQ(o.capacity_factor, 0.25);
  EXPECT_EQ(o.overflow, "drop");
  ASSERT_TRUE(parse({"--mode=ht", "--capacity-factor=1", "--overflow=fail"}, o, error)) << error;
  EXPECT_EQ(o.capacity_factor, 1.0);
  EXPECT_EQ(o.overflow, "fail");
  // The defaults are LL's behaviour too: only other values are refused there.
  ASSERT_TRUE(parse({"--mode=ll", "--capacity-factor=1", "--overflow=fail"}, o, error)) << error;
}

// ceil(F * R * T) rows, R * T at factor 1, at least 1; a decimal fraction that lands a hair
// above an integer does not round up.
TEST(Options, ReceiveCapacityRows) {
  Options o;
  o.mode = "ht";
  o.tokens = {4096};
  EXPECT_EQ(ht_recv_capacity(o, 1), 4096);
  EXPECT_EQ(ht_recv_capacity(o, 8), 32768);
  o.capacity_factor = 0.5;
  EXPECT_EQ(ht_recv_capacity(o, 1), 2048);
  EXPECT_EQ(ht_recv_capacity(o, 8), 16384);
  o.capacity_factor = 0.25;
  EXPECT_EQ(ht_recv_capacity(o, 1), 1024);
  o.tokens = {10};
  o.capacity_factor = 0.3;  // 0.3 * 10 is 3.0000000000000004 in doubles
  EXPECT_EQ(ht_recv_capacity(o, 1), 3);
  o.capacity_factor = 0.31;
  EXPECT_EQ(ht_recv_capacity(o, 1), 4);
  o.capacity_factor = 1e-9;
  EXPECT_EQ(ht_recv_capacity(o, 1), 1);
  o.max_tokens = 20;  // the group's T, not the point's
  o.capacity_factor = 0.5;
  EXPECT_EQ(ht_recv_capacity(o, 3), 30);
}

// A smaller window is served on flat layouts, on one node and across nodes (virtual ones
// included, since 2.1); the bench refuses the rest before any GPU work, naming the flags.
TEST(Options, CapacityFactorNeedsFlat) {
  Options o;
  std::string error;
  EXPECT_FALSE(parse({"--mode=ht", "--layout=expert-packed", "--capacity-factor=0.5"}, o, error));
  EXPECT_NE(error.find("--capacity-factor below 1 serves --layout=flat"), std::string::npos) << error;
  ASSERT_TRUE(parse({"--mode=ht", "--layout=expert-packed", "--overflow=drop"}, o, error)) << error;
  ASSERT_TRUE(parse({"--mode=ht", "--capacity-factor=0.5"}, o, error)) << error;
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
  for (int node_size : {1, 2, 4}) {
    o.virtual_node_size = node_size;
    EXPECT_TRUE(check_virtual_node_size(o, 4, error)) << node_size << ": " << error;
  }
  o.virtual_node_size = 3;  // still refused for what it is: not a divisor
  EXPECT_FALSE(check_virtual_node_size(o, 4, error));
  EXPECT_NE(error.find("does not divide"), std::string::npos) << error;
  o.virtual_node_size = 2;
  o.capacity_factor = 1.0;
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
}

TEST(Options, TokenLists) {
  std::vector<int> t;
  std::string error;
  ASSERT_TRUE(parse_token_list("64", t, error));
  EXPECT_EQ(t, std::vector<int>{64});
  ASSERT_TRUE(parse_token_list("1,3,5", t, error));
  EXPECT_EQ(t, (std::vector<int>{1, 3, 5}));
  ASSERT_TRUE(parse_token_list("3..20", t, error));
  EXPECT_EQ(t, (std::vector<int>{3, 6, 12, 20}));
  ASSERT_TRUE(parse_token_list("8..8", t, error));
  EXPECT_EQ(t, std::vector<int>{8});
  ASSERT_TRUE(parse_token_list("1024..16384", t, error));
  EXPECT_EQ(t, (std::vector<int>{1024, 2048, 4096, 8192, 16384}));
  for (const char* bad : {"", "0", "70000", "4..2", "1,,2", "a", "1..", "-1", "1.5", "1..65537"}) {
    EXPECT_FALSE(parse_token_list(bad, t, error)) << bad;
  }
}

TEST(Options, BadValuesAreRefusedByName) {
  struct Case {
    std::vector<std::string> args;
    const char* names;
  };
  const Case cases[] = {
      {{"--mode=xx"}, "--mode"},
      {{"--hidden=100"}, "--hidden"},
      {{"--hidden"}, "--hidden needs a value"},
      {{"--topk=0"}, "--topk"},
      {{"--topk=33"}, "--topk"},
      {{"--dtype=fp16"}, "--dtype"},
      {{"--dtype=fp8", "--hidden=7176"}, "--dtype=fp8"},
      {{"--masked=1"}, "--masked"},
      {{"--hot-share=1.5"}, "--hot-share"},
      {{"--routing=skewed", "--hot-expert=256"}, "--hot-expert"},
      {{"--graph=maybe"}, "--graph"},
      {{"--iters=0"}, "--iters"},
      {{"--tokens=64", "--max-tokens=32"}, "--max-tokens"},
      {{"--topk=8", "--experts=4"}, "--topk"},
      {{"--frobnicate"}, "unknown argument"},
      {{"--out="}, "--out"},
      {{"--ht-sizing=maybe"}, "--ht-sizing"},
      {{"--large-iters=0"}, "--large-iters"},
      {{"--max-tokens=2048"}, "--max-tokens"},
      {{"--mode=ht", "--tokens=65537"}, "--tokens"},
      {{"--mode=ht", "--dtype=fp8", "--fp8-pow2-scales"}, "--fp8-pow2-scales does not apply"},
      {{"--virtual-node-size=-1"}, "--virtual-node-size"},
      {{"--virtual-node-size=two"}, "--virtual-node-size"},
      {{"--virtual-node-size"}, "--virtual-node-size needs a value"},
      {{"--virtual-node-size=65537"}, "--virtual-node-size"},
      {{"--cupti=maybe"}, "--cupti"},
      {{"--mode=ht", "--layout=expert-packed", "--weights-at=home"}, "--weights-at"},
      {{"--mode=ht", "--weights-at=combine"}, "--weights-at=combine"},
      {{"--layout=flat", "--weights-at=dispatch"}, "--layout=expert-padded"},
      {{"--layout=rank-major", "--weights-at=combine"}, "--layout=expert-padded"},
      {{"--mode=ht", "--capacity-factor=0"}, "--capacity-factor: expected a number in (0, 1]"},
      {{"--mode=ht", "--capacity-factor=1.5"}, "--capacity-factor: expected a number in (0, 1]"},
      {{"--mode=ht", "--capacity-factor=-0.5"}, "--capacity-factor"},
      {{"--mode=ht", "--capacity-factor=half"}, "--capacity-factor"},
      {{"--mode=ht", "--capacity-factor=nan"}, "--capacity-factor"},
      {{"--mode=ht", "--capacity-factor="}, "--capacity-factor"},
      {{"--mode=ht", "--capacity-factor"}, "--capacity-factor needs a value"},
      {{"--mode=ht", "--overflow=truncate"}, "--overflow: expected fail or drop"},
      {{"--capacity-factor=0.5"}, "--capacity-factor sizes the high-throughput receive window: use --mode=ht"},
      {{"--overflow=drop"}, "--overflow=drop sizes the high-throughput receive window: use --mode=ht"},
      {{"--mode=ll", "--dtype=fp8", "--capacity-factor=0.5", "--overflow=drop"}, "use --mode=ht"},
  };
  for (const Case& c : cases) {
    Options o;
    std::string error;
    EXPECT_FALSE(parse(c.args, o, error)) << c.args[0];
    EXPECT_NE(error.find(c.names), std::string::npos) << "'" << error << "' should mention " << c.names;
  }
}

// The rank count is not a benchmark flag (the launcher's --ranks, or the visible GPUs), so the
// node size is checked against it separately, by the launcher and again by every rank.
TEST(Options, VirtualNodeSizeMustDivideTheRankCount) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--virtual-node-size=2"}, o, error)) << error;
  EXPECT_EQ(o.virtual_node_size, 2);
  for (int ranks : {2, 4, 8}) EXPECT_TRUE(check_virtual_node_size(o, ranks, error)) << ranks;
  for (int ranks : {1, 3, 5}) {
    error.clear();
    EXPECT_FALSE(check_virtual_node_size(o, ranks, error)) << ranks;
    EXPECT_NE(error.find("--virtual-node-size=2 does not divide the rank count " + std::to_string(ranks)),
              std::string::npos)
        << error;
  }
  o.virtual_node_size = 1;  // every rank its own node
  EXPECT_TRUE(check_virtual_node_size(o, 3, error));
  o.virtual_node_size = 4;  // one node of every rank: allowed, no network traffic
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
  EXPECT_FALSE(check_virtual_node_size(o, 2, error));  // larger than the world
  o.virtual_node_size = 0;                             // off: any rank count
  for (int ranks : {1, 3, 7}) EXPECT_TRUE(check_virtual_node_size(o, ranks, error)) << ranks;
}

// HT send-only is served on groups of one node: with virtual nodes splitting the ranks it
// is refused naming both flags; one node of every rank, or LL, is fine.
TEST(Options, HighThroughputSendOnlyNeedsOneNode) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--mode=ht", "--send-only"}, o, error)) << error;
  EXPECT_TRUE(o.send_only);
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
  o.virtual_node_size = 2;
  EXPECT_FALSE(check_virtual_node_size(o, 4, error));
  EXPECT_NE(error.find("--send-only with --mode=ht needs one node"), std::string::npos) << error;
  o.virtual_node_size = 4;
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
  o.mode = "ll";
  o.virtual_node_size = 2;
  EXPECT_TRUE(check_virtual_node_size(o, 4, error));
}

TEST(Options, HelpSkipsValidation) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--topk=8", "--experts=4", "--help"}, o, error)) << error;
  EXPECT_TRUE(o.help);
}

}  // namespace
}  // namespace epc::bench
