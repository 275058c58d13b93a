// SPDX-License-Identifier: Apache-2.0
#include "line_relay.hpp"

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace epc::harness {
namespace {

// A child printing without newlines must not grow our memory without bound; past this
// the text is cut into lines of this length.
constexpr std::size_t kMaxLineBytes = 64 * 1024;

}  // namespace

void write_line(int fd, const std::string& line) {
  std::string text = line;
  text.push_back('\n');
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    written += static_cast<std::size_t>(n);
  }
}

void harness_say(const std::string& message) { write_line(STDOUT_FILENO, "[harness] " + message); }

LineRelay::LineRelay(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}

void LineRelay::feed(const char* data, std::size_t size) {
  pending_.append(data, size);
  std::size_t start = 0;
  while (true) {
    const std::size_t newline = pending_.find('\n', start);
    if (newline == std::string::npos) break;
    write_line(out_fd_, prefix_ + pending_.substr(start, newline - start));
    start = newline + 1;
  }
  pending_.erase(0, start);
  while (pending_.size() >= kMaxLineBytes) {
    write_line(out_fd_, prefix_ + pending_.substr(0, kMaxLineBytes));
    pending_.erase(0, kMaxLineBytes);
  }
}

void LineRelay::finish() {
  if (!pending_.empty()) write_line(out_fd_, prefix_ + pending_);
  pending_.clear();
}

}  // namespace epc::harness
