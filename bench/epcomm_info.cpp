// SPDX-License-Identifier: Apache-2.0
// epcomm-info: the first thing to run on a new machine. Prints the memory plan of a
// configuration and, when GPUs are present, brings up an epcomm group on every local GPU
// (one thread per GPU, through the public C API only) and prints what each rank sees.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "epcomm/epcomm.h"

namespace {

struct Options {
  uint32_t experts = 256;
  uint32_t hidden = 7168;
  uint32_t topk = 8;
  uint32_t ll_tokens = 128;
  uint32_t ht_tokens = 4096;
  uint32_t ht_recv_capacity = 0;               // 0: R * T
  int gpus = -1;                               // -1: all visible
  int plan_ranks = 8;                          // topology shown when there is no GPU (or with --plan-only)
  int node_size = 0;                           // ranks per NVLink node of that plan; 0: all of them (one node)
  const char* node_size_flag = "--node-size";  // the spelling given, for the error message
  bool plan_only = false;
  bool ht_per_entry = false;  // the HT group with EPC_GROUP_COMBINE_PER_ENTRY
  bool ll_per_entry = false;  // the LL group with EPC_GROUP_COMBINE_PER_ENTRY
};

const char* kUsage =
    "usage: epcomm-info [--experts=N] [--hidden=N] [--topk=N] [--ll-tokens=N] [--ht-tokens=N]\n"
    "                   [--ht-recv-capacity=N] [--gpus=N] [--plan-ranks=N]\n"
    "                   [--plan-node-size=N | --node-size=N] [--ht-combine-per-entry]\n"
    "                   [--ll-combine-per-entry] [--plan-only]\n"
    "Prints the symmetric-memory plan of a low-latency and a high-throughput group and, on a\n"
    "machine with GPUs, creates both on every local GPU (or the first N), runs the group\n"
    "barrier and prints each rank's topology. Defaults: 256 experts, hidden 7168, top-8,\n"
    "128 LL / 4096 HT tokens per rank. --plan-ranks sets the rank count of the plan shown\n"
    "when no GPU is visible (default 8), --plan-node-size (or its older spelling --node-size)\n"
    "the ranks per NVLink node of that plan (default: one node of them all; it must divide\n"
    "--plan-ranks); --plan-only shows that\n"
    "plan and creates nothing, also where GPUs are visible. --ht-recv-capacity sets the HT\n"
    "group's recv_capacity, the tokens its receive window holds (default: ranks * HT tokens).\n"
    "--ht-combine-per-entry sets EPC_GROUP_COMBINE_PER_ENTRY on the HT group: its combine window\n"
    "holds a row per (token, top-k entry), which combine-time weights (EPC_WEIGHTING_HOME) need;\n"
    "--ll-combine-per-entry sets it on the LL group: each combine slot holds a row per (token,\n"
    "top-k entry) instead of one partial per (token, rank).\n";

bool parse_u32(const char* arg, const char* name, uint32_t& out) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  char* end = nullptr;
  unsigned long v = std::strtoul(arg + n, &end, 10);
  if (*end != '\0' || v == 0 || v > 0xFFFFFFFFul) {
    std::fprintf(stderr, "epcomm-info: bad value in %s\n%s", arg, kUsage);
    std::exit(2);
  }
  out = static_cast<uint32_t>(v);
  return true;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    uint32_t v = 0;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (parse_u32(argv[i], "--experts=", o.experts) || parse_u32(argv[i], "--hidden=", o.hidden) ||
        parse_u32(argv[i], "--topk=", o.topk) || parse_u32(argv[i], "--ll-tokens=", o.ll_tokens) ||
        parse_u32(argv[i], "--ht-tokens=", o.ht_tokens) ||
        parse_u32(argv[i], "--ht-recv-capacity=", o.ht_recv_capacity)) {
      continue;
    }
    if (parse_u32(argv[i], "--gpus=", v)) {
      o.gpus = static_cast<int>(v);
      continue;
    }
    if (parse_u32(argv[i], "--plan-ranks=", v)) {
      o.plan_ranks = static_cast<int>(v);
      continue;
    }
    for (const char* flag : {"--plan-node-size", "--node-size"}) {
      if (parse_u32(argv[i], (std::string(flag) + "=").c_str(), v)) {
        o.node_size = static_cast<int>(v);
        o.node_size_flag = flag;
        break;
      }
    }
    if (v != 0) continue;
    if (std::strcmp(argv[i], "--plan-only") == 0) {
      o.plan_only = true;
      continue;
    }
    if (std::strcmp(argv[i], "--ht-combine-per-entry") == 0) {
      o.ht_per_entry = true;
      continue;
    }
    if (std::strcmp(argv[i], "--ll-combine-per-entry") == 0) {
      o.ll_per_entry = true;
      continue;
    }
    std::fprintf(stderr, "epcomm-info: unknown argument %s\n%s", argv[i], kUsage);
    std::exit(2);
  }
  if (o.node_size == 0) o.node_size = o.plan_ranks;
  if (o.plan_ranks % o.node_size != 0) {
    std::fprintf(stderr, "epcomm-info: %s=%d does not divide --plan-ranks=%d\n%s", o.node_size_flag, o.node_size,
                 o.plan_ranks, kUsage);
    std::exit(2);
  }
  return o;
}

std::string error_text() {
  char buf[4096];
  epc_last_error(buf, sizeof buf, nullptr);
  return buf;
}

EpcGroupConfig make_config(const Options& o, EpcMode mode) {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.mode = mode;
  c.num_experts = o.experts;
  c.hidden = o.hidden;
  c.max_topk = o.topk;
  c.max_tokens_per_rank = mode == EPC_MODE_LOW_LATENCY ? o.ll_tokens : o.ht_tokens;
  if (mode == EPC_MODE_HIGH_THROUGHPUT) {
    c.recv_capacity = o.ht_recv_capacity;
    if (o.ht_per_entry) c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  } else if (o.ll_per_entry) {
    c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  }
  return c;
}

const char* mode_name(EpcMode m) { return m == EPC_MODE_LOW_LATENCY ? "low-latency" : "high-throughput"; }

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// The plan of `ranks` ranks in nodes of `node_size` (one NVLink team each), with the
// network staging regions summed, as epc_plan_query reports it.
bool print_plan(const Options& o, EpcMode mode, int ranks, int node_size) {
  EpcGroupConfig c = make_config(o, mode);
  EpcPlan plan;
  std::memset(&plan, 0, sizeof plan);
  plan.struct_size = sizeof plan;
  plan.abi_version = EPC_ABI_VERSION;
  EpcStatus s = epc_plan_query(&c, ranks, node_size, ranks / node_size, &plan);
  if (s != EPC_OK) {
    std::printf("%s plan: %s: %s\n", mode_name(mode), epc_status_string(s), error_text().c_str());
    return false;
  }
  std::printf(
      "\n%s plan: %d ranks in %d node(s) of %d, %u experts, hidden %u, top-%u, %u tokens/rank, "
      "recv_capacity %llu%s\n",
      mode_name(mode), ranks, ranks / node_size, node_size, c.num_experts, c.hidden, c.max_topk, c.max_tokens_per_rank,
      static_cast<unsigned long long>(plan.recv_capacity),
      (c.flags & EPC_GROUP_COMBINE_PER_ENTRY) != 0 ? ", combine per entry" : "");
  std::printf(
      "  symmetric window per rank: %.2f MiB (%llu bytes), %u slot(s), %u B per token "
      "message, %u SMs\n",
      mib(plan.symmetric_bytes), static_cast<unsigned long long>(plan.symmetric_bytes), plan.num_slots,
      plan.message_bytes, plan.num_sms);
  std::printf("  %-20s %14s %14s\n", "region", "offset", "bytes");
  for (uint32_t i = 0; i < plan.num_regions; ++i) {
    const EpcPlanRegion& r = plan.regions[i];
    std::printf("  %-20s %14llu %14llu\n", r.name, static_cast<unsigned long long>(r.offset),
                static_cast<unsigned long long>(r.size));
  }
  return true;
}

// Both modes' plans for --plan-ranks in nodes of --node-size; the exit status.
int plans_only(const Options& o) {
  const bool ok = print_plan(o, EPC_MODE_LOW_LATENCY, o.plan_ranks, o.node_size) &&
                  print_plan(o, EPC_MODE_HIGH_THROUGHPUT, o.plan_ranks, o.node_size);
  return ok ? 0 : 1;
}

// One rank (thread) brings up a group in each mode and reports.
std::string run_rank(const Options& o, const EpcUniqueId& id, int nranks, int rank, std::string& report) {
  void* comm = nullptr;
  // A rank (thread) that fails before it joins leaves the others a TIMEOUT, not a hang.
  EpcCommConfig bounded = EPC_COMM_CONFIG_INIT;
  bounded.timeout_ms = 60000;
  if (epc_comm_init_config(&id, nranks, rank, rank, &bounded, &comm) != EPC_OK) return "comm init: " + error_text();
  std::string failure;
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    EpcGroupConfig c = make_config(o, mode);
    EpcGroup* group = nullptr;
    if (epc_group_create(comm, &c, &group) != EPC_OK) {
      failure = std::string(mode_name(mode)) + " group create: " + error_text();
      break;
    }
    EpcGroupInfo info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.abi_version = EPC_ABI_VERSION;
    epc_group_query(group, &info);
    EpcStatus b = epc_group_barrier(group, nullptr);
    char line[512];
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, info.cuda_device);
    std::snprintf(line, sizeof line,
                  "  rank %d/%d  %-15s GPU %d (%s)  NVLink team %d/%d  node %d/%d  "
                  "%u local experts  window %.2f MiB  barrier %s\n",
                  info.rank, info.nranks, mode_name(mode), info.cuda_device, prop.name, info.lsa_rank, info.lsa_size,
                  info.node, info.num_nodes, info.local_experts, mib(info.symmetric_bytes),
                  b == EPC_OK ? "ok" : error_text().c_str());
    report += line;
    if (b != EPC_OK) failure = "barrier: " + error_text();
    if (epc_group_destroy(group) != EPC_OK && failure.empty()) failure = "destroy: " + error_text();
    if (!failure.empty()) break;
  }
  if (epc_comm_destroy(comm) != EPC_OK && failure.empty()) failure = "comm destroy: " + error_text();
  return failure;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  uint32_t major = 0, minor = 0, patch = 0;
  epc_get_version(&major, &minor, &patch);
  std::printf("epcomm ABI %u.%u.%u\n", major, minor, patch);

  if (o.plan_only) {
    std::printf("The plan for %d ranks in nodes of %d (--plan-only: nothing is created).\n", o.plan_ranks, o.node_size);
    return plans_only(o);
  }
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf(
        "No CUDA GPU is usable here (cudaGetDeviceCount: %s): showing the plan for %d "
        "ranks in nodes of %d only.\n",
        err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", o.plan_ranks, o.node_size);
    return plans_only(o);
  }
  int nranks = o.gpus > 0 ? o.gpus : devices;
  if (nranks > devices) {
    std::fprintf(stderr, "epcomm-info: --gpus=%d but only %d GPUs are visible\n", nranks, devices);
    return 2;
  }
  std::printf("%d CUDA GPU(s) visible; bringing up a group on %d of them.\n", devices, nranks);
  if (!print_plan(o, EPC_MODE_LOW_LATENCY, nranks, nranks) ||
      !print_plan(o, EPC_MODE_HIGH_THROUGHPUT, nranks, nranks)) {
    return 1;
  }

  EpcUniqueId id;
  if (epc_unique_id_create(&id) != EPC_OK) {
    std::fprintf(stderr, "epc_unique_id_create: %s\n", error_text().c_str());
    return 1;
  }
  std::vector<std::string> reports(static_cast<size_t>(nranks)), failures(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back(
        [&, r] { failures[static_cast<size_t>(r)] = run_rank(o, id, nranks, r, reports[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
  std::printf("\nGroups brought up:\n");
  int failed = 0;
  for (int r = 0; r < nranks; ++r) {
    std::fputs(reports[static_cast<size_t>(r)].c_str(), stdout);
    if (!failures[static_cast<size_t>(r)].empty()) {
      std::printf("  rank %d FAILED: %s\n", r, failures[static_cast<size_t>(r)].c_str());
      failed++;
    }
  }
  std::printf("%s: %d of %d ranks brought up both groups\n", failed == 0 ? "OK" : "FAILED", nranks - failed, nranks);
  return failed == 0 ? 0 : 1;
}
