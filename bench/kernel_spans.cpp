// SPDX-License-Identifier: Apache-2.0
#include "bench/kernel_spans.hpp"

#include <algorithm>
#include <unordered_map>

namespace epc::bench {
namespace {

constexpr int kPartBits = 8;
constexpr int kMaxParts = 1 << kPartBits;

std::string kernel_text(const KernelRecord& k) {
  return "kernel (correlation id " + std::to_string(k.correlation) + ", start " + std::to_string(k.start_ns) +
         " ns, end " + std::to_string(k.end_ns) + " ns)";
}

}  // namespace

bool check_times(const KernelRecord& k, std::string& error) {
  if (k.start_ns == 0 && k.end_ns == 0) {
    error = "CUPTI could not time a " + kernel_text(k);
    return false;
  }
  if (k.end_ns < k.start_ns) {
    error = "CUPTI reports a " + kernel_text(k) + " that ends before it starts";
    return false;
  }
  return true;
}

uint64_t call_tag(int iteration, int part) {
  // Iteration + 1 keeps the tag of iteration 0, part 0 away from 0.
  return (static_cast<uint64_t>(iteration) + 1) << kPartBits | static_cast<uint64_t>(part & (kMaxParts - 1));
}

void KernelSpan::add(uint64_t start_ns, uint64_t end_ns) {
  if (kernels == 0 || start_ns < first_start_ns) first_start_ns = start_ns;
  if (kernels == 0 || end_ns > last_end_ns) last_end_ns = end_ns;
  ++kernels;
}

void KernelSpan::add(const KernelSpan& other) {
  if (other.kernels == 0) return;
  const int before = kernels;
  add(other.first_start_ns, other.last_end_ns);
  kernels = before + other.kernels;
}

double KernelSpan::us() const { return static_cast<double>(last_end_ns - first_start_ns) / 1e3; }

bool spans_by_tag(const std::vector<KernelRecord>& kernels, const std::vector<TagLink>& links, uint32_t device,
                  std::map<uint64_t, KernelSpan>& out, std::string& error) {
  out.clear();
  std::unordered_map<uint32_t, uint64_t> tag_of;
  for (const TagLink& link : links) {
    const auto [it, inserted] = tag_of.emplace(link.correlation, link.tag);
    if (!inserted && it->second != link.tag) {
      error = "CUPTI linked the API call with correlation id " + std::to_string(link.correlation) + " to two tags (" +
              std::to_string(it->second) + " and " + std::to_string(link.tag) + ")";
      return false;
    }
  }
  for (const KernelRecord& k : kernels) {
    if (k.device != device) continue;
    const auto it = tag_of.find(k.correlation);
    if (it == tag_of.end()) continue;
    if (!check_times(k, error)) return false;
    out[it->second].add(k.start_ns, k.end_ns);
  }
  return true;
}

bool iteration_spans(const std::map<uint64_t, KernelSpan>& by_tag, int iterations, const std::vector<int>& parts,
                     std::vector<double>& us, std::string& error) {
  us.clear();
  for (int i = 0; i < iterations; ++i) {
    KernelSpan span;
    for (int part : parts) {
      const auto it = by_tag.find(call_tag(i, part));
      if (it != by_tag.end()) span.add(it->second);
    }
    if (span.kernels == 0) {
      std::string names;
      for (int part : parts) names += (names.empty() ? "" : ", ") + std::to_string(part);
      error = "CUPTI reported no kernel for iteration " + std::to_string(i) + " (parts " + names + ") of " +
              std::to_string(iterations) + ": activity records were lost or never attributed";
      return false;
    }
    us.push_back(span.us());
  }
  return true;
}

int kernels_per_iteration(const std::map<uint64_t, KernelSpan>& by_tag, int iterations, const std::vector<int>& parts) {
  int common = -1;
  for (int i = 0; i < iterations; ++i) {
    int n = 0;
    for (int part : parts) {
      const auto it = by_tag.find(call_tag(i, part));
      if (it != by_tag.end()) n += it->second.kernels;
    }
    if (common >= 0 && n != common) return -1;
    common = n;
  }
  return common;
}

bool graph_step_spans(const std::vector<KernelRecord>& kernels, uint32_t device, int replays, int steps,
                      const StepKernels& eager, GraphSpans& out, std::string& error) {
  out = GraphSpans{};
  const int kernels_per_step = eager.per_step;
  if (replays < 1 || steps < 1) {
    error = "graph_step_spans needs at least one replay of at least one step";
    return false;
  }
  std::vector<KernelRecord> launched;
  for (const KernelRecord& k : kernels) {
    if (k.device != device || k.graph == 0) continue;
    if (!check_times(k, error)) return false;
    launched.push_back(k);
  }
  const size_t groups = static_cast<size_t>(replays) * static_cast<size_t>(steps);
  if (launched.empty() || launched.size() % groups != 0) {
    error = "CUPTI reported " + std::to_string(launched.size()) + " kernels launched by graphs, which do not " +
            "divide into " + std::to_string(replays) + " replays of " + std::to_string(steps) + " steps";
    return false;
  }
  const size_t per_step = launched.size() / groups;
  if (kernels_per_step > 0 && per_step != static_cast<size_t>(kernels_per_step)) {
    error = "a replayed step launched " + std::to_string(per_step) + " kernels, an eager step " +
            std::to_string(kernels_per_step) + ": the graph's kernels cannot be cut into steps";
    return false;
  }
  // Ties (equal starts) keep CUPTI's order: a chain never starts two kernels at once.
  std::stable_sort(launched.begin(), launched.end(),
                   [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  const size_t per_replay = per_step * static_cast<size_t>(steps);
  for (size_t i = per_replay; i < launched.size(); ++i) {
    const KernelRecord& first_replay = launched[i % per_replay];
    if (launched[i].graph != first_replay.graph || launched[i].graph_node != first_replay.graph_node) {
      error = "replay " + std::to_string(i / per_replay) + " launched graph node " +
              std::to_string(launched[i].graph_node) + " (graph " + std::to_string(launched[i].graph) +
              ") where the first replay launched node " + std::to_string(first_replay.graph_node) + " (graph " +
              std::to_string(first_replay.graph) + "): kernels of another graph ran meanwhile";
      return false;
    }
  }
  // The halves only where the eager step cut into a dispatch and a combine that both ran.
  const size_t dispatch = kernels_per_step > 0 && eager.dispatch > 0 && static_cast<size_t>(eager.dispatch) < per_step
                              ? static_cast<size_t>(eager.dispatch)
                              : 0;
  for (size_t g = 0; g < groups; ++g) {
    KernelSpan step, first, second;
    for (size_t i = g * per_step; i < (g + 1) * per_step; ++i) {
      step.add(launched[i].start_ns, launched[i].end_ns);
      (i - g * per_step < dispatch ? first : second).add(launched[i].start_ns, launched[i].end_ns);
    }
    out.step.push_back(step.us());
    if (dispatch == 0) continue;
    out.dispatch.push_back(first.us());
    out.combine.push_back(second.us());
  }
  return true;
}

}  // namespace epc::bench
