// SPDX-License-Identifier: Apache-2.0
// Timing tools shared by the three measured subjects (ours, baseline, ceiling): CUDA events
// recorded at named marks of every iteration, and the host clock for time through the API.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "bench/stats.hpp"

namespace epc::bench {

// Where the calls of a step report its marks (StepMark, bench/mode_support.hpp): CUDA events
// (EventMarks), or tags for CUPTI (TagMarks, bench/kernel_tracer.hpp).
class StepMarks {
 public:
  virtual ~StepMarks() = default;
  virtual void record(int iter, int mark, cudaStream_t stream) = 0;
};

// Events for `iters` iterations x `marks` marks, created up front so that recording costs
// nothing but the record itself.
class EventMarks final : public StepMarks {
 public:
  EventMarks(int iters, int marks);
  ~EventMarks() override;
  EventMarks(const EventMarks&) = delete;
  EventMarks& operator=(const EventMarks&) = delete;

  bool ok() const { return ok_; }
  void record(int iter, int mark, cudaStream_t stream) override;
  // Microseconds from mark `from` to mark `to` of every iteration; call after the stream has
  // been synchronised. False if an event was not recorded or CUDA failed.
  bool elapsed_us(int from, int to, std::vector<double>& out) const;

 private:
  int iters_, marks_;
  bool ok_ = true;
  std::vector<cudaEvent_t> events_;
};

using Clock = std::chrono::steady_clock;

inline double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// One rank's figures for one point, in a fixed order that every rank produces alike.
using MetricList = std::vector<std::pair<std::string, Summary>>;

}  // namespace epc::bench
