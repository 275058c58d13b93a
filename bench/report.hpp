// SPDX-License-Identifier: Apache-2.0
// The two views of a run: the JSON record (format in bench/JSON.md) and the table printed on
// stdout. Pure CPU.
#pragma once

#include <string>

#include "bench/record.hpp"

namespace epc::bench {

constexpr const char kJsonFormat[] = "epcomm-bench/9";

std::string to_json(const RunRecord& run);
std::string to_table(const RunRecord& run);

// Writes `text` to `path` through a temporary file and a rename, so a reader (or a run that
// stops half-way) never sees a half-written file. Returns false with `error` set.
bool write_file_atomically(const std::string& path, const std::string& text, std::string& error);

}  // namespace epc::bench
