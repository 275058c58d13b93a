// SPDX-License-Identifier: Apache-2.0
// Turns a child's output byte stream into whole prefixed lines on the launcher's stdout.
#ifndef EPC_TESTS_GPU_HARNESS_LINE_RELAY_HPP
#define EPC_TESTS_GPU_HARNESS_LINE_RELAY_HPP

#include <cstddef>
#include <string>

namespace epc::harness {

// Writes `line` plus a newline to `fd` with as few write() calls as the kernel allows, so
// lines from several sources do not mix. Gives up silently if the fd is gone: losing
// output must not stop the launcher from supervising its children.
void write_line(int fd, const std::string& line);

// The launcher's own messages, prefixed "[harness] ", on stdout next to the ranks' lines.
void harness_say(const std::string& message);

class LineRelay {
 public:
  LineRelay(std::string prefix, int out_fd);

  // Writes every line that `data` completes; keeps the unfinished tail for later.
  void feed(const char* data, std::size_t size);

  // At end of stream: writes an unfinished tail as a line of its own.
  void finish();

 private:
  std::string prefix_;
  int out_fd_;
  std::string pending_;
};

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_LINE_RELAY_HPP
