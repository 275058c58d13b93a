// SPDX-License-Identifier: Apache-2.0
#include "bench/record.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

namespace epc::bench {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

const AcrossRanks* PointResult::find(const std::string& name) const {
  for (const Metric& m : metrics) {
    if (m.name == name) return &m.value;
  }
  return nullptr;
}

double PointResult::median_us(const std::string& name) const {
  const AcrossRanks* m = find(name);
  return m == nullptr ? kNaN : m->slowest.median_us;
}

double CeilingPeak::egress_GBps() const {
  return gbps(static_cast<double>(bytes_per_peer) * peers, time.slowest.median_us);
}

double MemoryCopy::copy_GBps() const { return gbps(2.0 * static_cast<double>(bytes), time.slowest.median_us); }

double gbps(double bytes, double us) { return us > 0 ? bytes / us / 1e3 : kNaN; }

double mean_bytes(const PointResult& p, int64_t RankTraffic::* field) {
  if (p.traffic.empty()) return kNaN;
  double sum = 0;
  for (const RankTraffic& t : p.traffic) sum += static_cast<double>(t.*field);
  return sum / static_cast<double>(p.traffic.size());
}

Bandwidth bandwidth(const RunRecord& run, const PointResult& p, const std::string& who, const std::string& op) {
  const bool dispatch = op == "dispatch";
  const double us = p.median_us(who + ".kernel." + op);
  // Logical bytes are the same for everyone: they measure the work, not the method.
  const double logical =
      mean_bytes(p, dispatch ? &RankTraffic::logical_dispatch_bytes : &RankTraffic::logical_combine_bytes);
  double wire;
  if (who == "baseline") {
    wire = mean_bytes(
        p, dispatch ? &RankTraffic::baseline_wire_dispatch_bytes : &RankTraffic::baseline_wire_combine_bytes);
  } else {
    // The ceiling copies exactly our payload bytes (signals aside: it sends its own).
    wire = mean_bytes(p, dispatch ? &RankTraffic::wire_dispatch_bytes : &RankTraffic::wire_combine_bytes);
  }
  Bandwidth b;
  b.logical_GBps = gbps(logical, us);
  b.wire_GBps = gbps(wire, us);
  const double peak = run.ceiling_peak ? run.ceiling_peak->egress_GBps() : kNaN;
  b.wire_over_ceiling = peak > 0 ? b.wire_GBps / peak : kNaN;
  return b;
}

namespace {

double max_bytes(const PointResult& p, int64_t RankTraffic::* field) {
  double most = 0;
  for (const RankTraffic& t : p.traffic) most = std::max(most, static_cast<double>(t.*field));
  return most;
}

// Microseconds to move `bytes` at `GBps`; NaN when the rate is unknown.
double us_at(double bytes, double GBps) { return GBps > 0 ? bytes / GBps / 1e3 : kNaN; }

}  // namespace

Roofline roofline(const RunRecord& run, const PointResult& p, const std::string& op) {
  const bool dispatch = op == "dispatch";
  Roofline r;
  r.memory_bytes = max_bytes(p, dispatch ? &RankTraffic::memory_dispatch_bytes : &RankTraffic::memory_combine_bytes);
  r.wire_bytes = max_bytes(p, dispatch ? &RankTraffic::wire_dispatch_bytes : &RankTraffic::wire_combine_bytes);
  r.memory_us = us_at(r.memory_bytes, run.memory_copy ? run.memory_copy->copy_GBps() : kNaN);
  r.wire_us = us_at(r.wire_bytes, run.ceiling_peak ? run.ceiling_peak->egress_GBps() : kNaN);
  if (std::isnan(r.memory_us)) {
    r.us = r.wire_us;
  } else {
    r.us = std::isnan(r.wire_us) ? r.memory_us : std::max(r.memory_us, r.wire_us);
  }
  return r;
}

double roofline_step_us(const RunRecord& run, const PointResult& p) {
  return roofline(run, p, "dispatch").us + roofline(run, p, "combine").us;
}

double ratio(const PointResult& p, const std::string& a, const std::string& b) {
  const double x = p.median_us(a), y = p.median_us(b);
  return (std::isfinite(x) && std::isfinite(y) && y > 0) ? x / y : kNaN;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace epc::bench
